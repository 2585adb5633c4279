"""The Python front: troupe.run's keyword options (named as the flags, checked before anything
starts, overridden by the command line), a script's own flags declared with troupe.Flag and
returned typed, troupe.TaskProtocol (a TorchTask satisfies it; an object that does not is
refused by name), and ParameterClient.wait_for (returns once every bucket has applied the
pushes, TimeoutError when they never come). Jobs run as subprocesses with a bound on each
wait. Run by ctest (python_front_test) with the build's package on PYTHONPATH."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

import troupe

BOUND_S = 300  # no job here comes near it

# A script whose task is built from a typed flag; it prints what its flags held.
SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    import troupe

    def make_task(flags):
        print(f"limit={flags.limit!r} rate={flags['rate']!r} threads={flags.torch_threads!r}",
              flush=True)
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(flags.limit, 6, generator=g),
                             torch.randint(0, 3, (flags.limit,), generator=g))
        return troupe.TorchTask(lambda: nn.Linear(6, 3), data, data)

    FLAGS = [troupe.Flag("limit", int, 64, "examples"), troupe.Flag("rate", float, 0.5)]
    sys.exit(troupe.run(make_task, flags=FLAGS, prog="front-test", mode="dp", workers=2,
                        epochs=1, batch=16, torch_threads=1, blas_threads=1, limit=96,
                        log_level="error"))
""")


def data(n=64):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


def linear():
    return nn.Linear(6, 3)


def run_script(cwd, *args):
    """Runs SCRIPT with `args`; (exit code, output, report or None)."""
    script = os.path.join(cwd, "front_script.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    report = os.path.join(cwd, "report.json")
    done = subprocess.run([sys.executable, script, "--report", report, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=BOUND_S)
    out = done.stdout + done.stderr
    if not os.path.exists(report):
        return done.returncode, out, None
    with open(report) as f:
        return done.returncode, out, json.load(f)


class KeywordOptions(unittest.TestCase):
    def setUp(self):
        self.task = troupe.TorchTask(linear, data(), data(32))

    def refused(self, error, **options):
        """troupe.run(task, [], **options) raises `error` and writes no report."""
        with tempfile.TemporaryDirectory() as cwd:
            report = os.path.join(cwd, "report.json")
            with self.assertRaises(error) as raised:
                troupe.run(self.task, ["--report", report], **options)
            self.assertFalse(os.path.exists(report))
        return str(raised.exception)

    def test_an_unknown_name_raises_type_error(self):
        self.assertIn("wrokers", self.refused(TypeError, wrokers=2))
        # prog is the program's name; name= is the --name flag, no longer the program's.
        self.assertIn("prog", self.refused(TypeError, prog_name="x"))

    def test_a_value_of_the_wrong_kind_raises_type_error(self):
        switch = next(name for name, is_switch in troupe._native.common_flags() if is_switch)
        self.assertIn("True or False", self.refused(TypeError, **{switch.replace("-", "_"): 1}))
        self.assertIn("dict", self.refused(TypeError, workers={"a": 1}))
        self.assertIn("bool", self.refused(TypeError, workers=True))

    def test_a_value_its_flag_refuses_raises_value_error(self):
        self.assertIn("--workers", self.refused(ValueError, workers="two"))
        self.assertIn("mode", self.refused(ValueError, mode="allreduce"))
        self.assertIn("--lr", self.refused(ValueError, lr=float("nan")))
        with self.assertRaises(ValueError) as raised:
            troupe.run(self.task, [], flags=[troupe.Flag("limit", int, 0)], limit="many")
        self.assertIn("--limit", str(raised.exception))

    def test_options_run_the_job_typed_and_the_command_line_overrides_them(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, report = run_script(cwd, "--epochs", "2")
        self.assertEqual(code, 0, out)
        self.assertEqual(report["mode"], "dp", out)
        self.assertEqual(len(report["epochs"]), 2, out)   # the command line's, not epochs=1
        self.assertEqual(len(report["workers"]), 2, out)
        self.assertIn("limit=96 rate=0.5 threads=1", out)  # ints and floats, not text

    def test_a_bad_typed_value_on_the_command_line_refuses_the_job_naming_the_flag(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, report = run_script(cwd, "--limit", "many")
        self.assertNotEqual(code, 0, out)
        self.assertIn("--limit: invalid int value: 'many'", out)
        self.assertTrue(report is None or report["status"] != "finished", out)


class TaskProtocolChecks(unittest.TestCase):
    def test_a_torch_task_is_a_task_protocol_and_its_replica_a_replica_protocol(self):
        task = troupe.TorchTask(linear, data(), data(32))
        self.assertIsInstance(task, troupe.TaskProtocol)
        self.assertIsInstance(task.make_replica(16, 1), troupe.ReplicaProtocol)

    def test_an_object_that_is_not_a_task_is_refused_by_name_before_anything_starts(self):
        class Half:
            def parameters(self):
                return []

            def make_replica(self, batch, seed):
                return None

        self.assertNotIsInstance(Half(), troupe.TaskProtocol)
        with self.assertRaises(TypeError) as raised:
            troupe.run(Half(), [])
        self.assertIn("initialize", str(raised.exception))
        self.assertIn("evaluate", str(raised.exception))


class WaitFor(unittest.TestCase):
    def test_it_returns_once_every_bucket_applied_the_pushes_of_all_clients(self):
        model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8))
        with troupe.ParameterService(model, clients=3, optimizer="sgd", lr=0.1,
                                     buckets=2) as service:
            loops = [service.client(0), service.client(1)]

            def push_three(client):
                for _ in range(3):
                    client.pull()
                    client.push(np.full(64 * 64 + 64 + 64 * 8 + 8, 0.01, np.float32))

            threads = [threading.Thread(target=push_three, args=(c,)) for c in loops]
            for t in threads:
                t.start()
            snapshot = service.client(2).wait_for(pushes=6, timeout=BOUND_S, into=model)
            for t in threads:
                t.join(BOUND_S)
            self.assertEqual(len(snapshot.clocks), 2)
            self.assertTrue(all(sum(clock) >= 6 for clock in snapshot.clocks))
            self.assertTrue(np.array_equal(
                snapshot.values, torch.cat([p.detach().reshape(-1)
                                            for p in model.parameters()]).numpy()))

    def test_pushes_that_never_come_raise_timeout_error(self):
        model = nn.Linear(4, 2)
        with troupe.ParameterService(model, clients=2, optimizer="sgd", lr=0.1) as service:
            pusher = service.client(0)
            pusher.pull()
            pusher.push(np.zeros(10, np.float32))
            with self.assertRaises(TimeoutError) as raised:
                service.client(1).wait_for(pushes=2, timeout=0.5)
            self.assertIn("1 of 2", str(raised.exception))
            with self.assertRaises(ValueError):
                service.client(1).wait_for(pushes=1, timeout=0)


if __name__ == "__main__":
    unittest.main()
