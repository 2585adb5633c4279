"""Models of real size from Python, CI-sized (at most 32 steps a job): torchvision's ResNet-18
(11 M parameters, BatchNorm's buffers; a message held its 44 MB whole and failed before) in
--mode dp; a wide MLP of 20 M parameters (80 MB, five times the codec's 16 MiB message cap)
through TorchTask in --mode dp (with checkpoints, then resumed) and --mode ps, and its dp job
as processes with a worker killed, a joiner, checkpoints and a resume, and the same with its
optimizer's state and gradient sharded (--zero-stage 2, a backup each: 32 steps); and a model whose rows
hold 5 Mi values (20 MiB: cut inside them) in ps and dp. Each job finishes with every step
taken and, in dp, the members' checksums equal. A plain PyTorch loop of the same 20 M MLP on
troupe.elastic (DistributedOptimizer): a third loop joins (it takes the model's state in
pieces) once the first has committed a step, a second is killed once the third has, and the
two left end with the same parameters. The C++ ladder, with a standby and hybrid jobs too, is
tests/integration/size_ladder_test.cpp. Run by ctest (python_size_ladder_test)."""
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

from processes import Process, free_port, grow_then_lose, write_script

BOUND_S = 600  # no job here comes near it
EXAMPLES = os.environ.get("TROUPE_EXAMPLES", "")
SECRET = "a-long-random-secret-for-tests"

WIDE_MLP = textwrap.dedent("""
    import os, sys
    from torch import nn
    import troupe
    sys.path.insert(0, os.environ["TROUPE_EXAMPLES"])
    from fmnist_cnn import FLAGS, fashion_mnist

    def wide():  # 784-4096-4096-10: 20 M parameters
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(),
                             nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))

    def make_task(flags):
        return troupe.TorchTask(wide, fashion_mnist(flags.data, "train", flags.train_limit),
                                fashion_mnist(flags.data, "t10k", flags.test_limit))

    sys.exit(troupe.run(make_task, flags=FLAGS, prog="wide-mlp"))
""")

WIDE_ROWS = textwrap.dedent("""
    import os, sys
    import torch
    from torch import nn
    import troupe
    sys.path.insert(0, os.environ["TROUPE_EXAMPLES"])
    from fmnist_cnn import FLAGS, fashion_mnist

    class WideRows(nn.Module):  # a linear model and a parameter of rows of 5 Mi values
        def __init__(self):
            super().__init__()
            self.linear = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
            self.wide = nn.Parameter(torch.zeros(2, 5 << 20))

        def forward(self, x):
            return self.linear(x) + self.wide.mean()

    def make_task(flags):
        return troupe.TorchTask(WideRows, fashion_mnist(flags.data, "train", flags.train_limit),
                                fashion_mnist(flags.data, "t10k", flags.test_limit))

    sys.exit(troupe.run(make_task, flags=FLAGS, prog="wide-rows"))
""")


def run(script, *args):
    """Runs `script` with `args` and a report; (exit code, output, report or None)."""
    with tempfile.TemporaryDirectory() as cwd:
        report = os.path.join(cwd, "report.json")
        done = subprocess.run([sys.executable, script, "--report", report, "--torch-threads", "1",
                               "--log-level", "warn", *args],
                              cwd=cwd, capture_output=True, text=True, timeout=BOUND_S)
        out = done.stdout + done.stderr
        if not os.path.exists(report):
            return done.returncode, out, None
        with open(report) as f:
            return done.returncode, out, json.load(f)


class SizeLadder(unittest.TestCase):
    def finished(self, script, steps, *args):
        code, out, report = run(script, *args)
        self.assertEqual(code, 0, out)
        self.assertIsNotNone(report, out)
        self.assertEqual(report["status"], "finished")
        self.assertEqual(report["steps"], steps)
        return report

    def test_resnet18_trains_in_dp(self):
        report = self.finished(os.path.join(EXAMPLES, "fmnist_resnet.py"), 4, "--mode", "dp",
                               "--workers", "2", "--epochs", "1", "--batch", "32",
                               "--train-limit", "256", "--test-limit", "128")
        self.assertEqual(report["checksum_mismatches"], 0)
        self.assertEqual(report["epochs"][0]["examples"], 256)
        self.assertGreater(report["test_accuracy"], 0.0)

    def test_a_20m_parameter_mlp_trains_in_dp_and_in_ps(self):
        with tempfile.TemporaryDirectory() as where:
            script = write_script(where, "wide_mlp.py", WIDE_MLP)
            common = ["--workers", "2", "--epochs", "1", "--batch", "16", "--train-limit", "512",
                      "--test-limit", "200"]
            saved = os.path.join(where, "checkpoints")  # after steps 5, 10 and 15
            dp = ["--mode", "dp", *common, "--checkpoint-dir", saved, "--checkpoint-every", "5"]
            report = self.finished(script, 16, *dp)
            self.assertEqual(report["checksum_mismatches"], 0)
            resumed = self.finished(script, 16, *dp, "--resume", saved)
            self.assertEqual(resumed["resumed_from_step"], 15)
            self.assertEqual(resumed["checksum_mismatches"], 0)
            self.assertGreater(report["test_accuracy"], 0.3)
            for worker in report["workers"]:
                self.assertGreater(worker["peak_rss_mb"], 0)
            # In ps a step is one worker's batch: batches of 32 make the same 16.
            report = self.finished(script, 16, "--mode", "ps", "--servers", "1", *common,
                                   "--batch", "32")
            self.assertEqual(report["updates_lost"], 0)
            self.assertGreater(report["test_accuracy"], 0.3)

    def test_a_model_whose_rows_outgrow_a_message_trains_in_ps_and_dp(self):
        # A parameter of 2 rows of 5 Mi values: a row is 20 MiB, so buckets (and the dp
        # evaluation's parts) cut inside it.
        with tempfile.TemporaryDirectory() as where:
            script = write_script(where, "wide_rows.py", WIDE_ROWS)
            common = ["--epochs", "1", "--batch", "16", "--train-limit", "256",
                      "--test-limit", "100", "--workers", "2"]
            report = self.finished(script, 16, "--mode", "ps", "--servers", "1", *common)
            self.assertEqual(report["updates_lost"], 0)
            report = self.finished(script, 8, "--mode", "dp", *common)
            self.assertEqual(report["checksum_mismatches"], 0)


class WideMlpCluster(unittest.TestCase):
    """The 20 M MLP's dp job as processes: a coordinator and two workers, checkpoints every 5
    steps; once one is written a worker is killed and a third joins (it takes the whole state
    in pieces); then a second job resumes from the newest checkpoint."""

    def start(self, where, script, name, args):
        """A process of the job, killed at the test's end if it still runs."""
        process = Process(script, [*args, "--torch-threads", "1", "--log-level", "info"],
                          os.path.join(where, name + ".log"), SECRET)
        self.addCleanup(process.stop)
        return process

    def worker(self, where, script, name, address, flags):
        return self.start(where, script, name,
                          ["--role", "worker", "--coordinator", address, *flags])

    def job(self, where, script, tag, flags):
        """A coordinator and two workers; (coordinator, workers, its address, its report)."""
        address = f"127.0.0.1:{free_port()}"
        report = os.path.join(where, tag + ".json")
        coordinator = self.start(where, script, tag + "-c",
                                 ["--role", "coordinator", "--listen", address, "--workers", "2",
                                  "--report", report, *flags])
        workers = [self.worker(where, script, f"{tag}-w{i}", address, flags) for i in range(2)]
        return coordinator, workers, address, report

    def run_to_end(self, processes, report):
        """Every one of `processes` exits 0; the job's report."""
        for p in processes:
            self.assertEqual(p.finish(), 0, p.output())
        with open(report) as f:
            return json.load(f)

    def test_a_20m_parameter_dp_job_loses_a_worker_takes_a_joiner_and_resumes(self):
        with tempfile.TemporaryDirectory() as where:
            script = write_script(where, "wide_mlp.py", WIDE_MLP)
            saved = os.path.join(where, "checkpoints")
            # 16 steps of 2 x 16 examples, each at least 0.3 s a worker.
            flags = ["--mode", "dp", "--epochs", "1", "--batch", "16", "--train-limit", "512",
                     "--test-limit", "200", "--checkpoint-dir", saved, "--checkpoint-every", "5",
                     "--max-workers", "3", "--worker-delay-ms", "0:300,1:300,2:300"]
            coordinator, workers, address, report = self.job(where, script, "first", flags)
            self.assertTrue(coordinator.wait_for(r"checkpoint after step "), coordinator.output())
            workers[1].stop()  # kill -9
            joiner = self.worker(where, script, "joiner", address, flags)
            first = self.run_to_end([coordinator, workers[0], joiner], report)
            self.assertEqual(first["status"], "finished")
            self.assertEqual(first["steps"], 16)
            self.assertEqual(first["checksum_mismatches"], 0)
            self.assertGreaterEqual(first["generations"], 2)
            self.assertEqual(first["epochs"][0]["examples"], 512)  # each example once
            self.assertGreaterEqual(first["checkpoints"], 1)
            # the joiner stepped too (beside the worker killed and the one that went on)
            self.assertEqual(sum(1 for w in first["workers"] if w["steps"] > 0), 3, first)
            coordinator, workers, _, report = self.job(where, script, "resumed",
                                                       [*flags, "--resume", saved])
            resumed = self.run_to_end([coordinator, *workers], report)
            self.assertGreaterEqual(resumed["resumed_from_step"], 5)
            self.assertEqual(resumed["steps"], 16)
            self.assertEqual(resumed["checksum_mismatches"], 0)

    def test_a_20m_parameter_sharded_dp_job_loses_a_worker_and_takes_a_joiner(self):
        # --zero-stage 2 (TorchTask puts each .grad, freed after) with a backup: the killed
        # worker's pieces live on with the other, which goes on alone; the joiner then gets its
        # pieces, cut anew for two.
        with tempfile.TemporaryDirectory() as where:
            script = write_script(where, "wide_mlp.py", WIDE_MLP)
            flags = ["--mode", "dp", "--epochs", "2", "--batch", "16", "--train-limit", "512",
                     "--test-limit", "200", "--zero-stage", "2", "--shard-backups", "1",
                     "--checksum-every", "4", "--max-workers", "3",
                     "--worker-delay-ms", "0:300,1:300,2:300"]
            coordinator, workers, address, report = self.job(where, script, "sharded", flags)
            self.assertTrue(coordinator.wait_for(r"epoch 1/2"), coordinator.output())
            workers[1].stop()  # kill -9
            joiner = self.worker(where, script, "joiner", address, flags)
            done = self.run_to_end([coordinator, workers[0], joiner], report)
            self.assertEqual(done["status"], "finished")
            self.assertEqual(done["zero_stage"], 2)
            self.assertEqual(done["steps"], 32)
            self.assertEqual(done["checksum_mismatches"], 0)
            self.assertGreaterEqual(done["generations"], 3)  # the loss, then the joiner
            for epoch in done["epochs"]:
                self.assertEqual(epoch["examples"], 512)  # each example once
            self.assertEqual(sum(1 for w in done["workers"] if w["steps"] > 0), 3, done)


class ElasticLoop(unittest.TestCase):
    def test_a_20m_parameter_loop_takes_a_joiner_and_loses_a_member(self):
        # 20 steps of 2 x 16 examples, each at least 0.4 s: the acts below come after
        # progress (a commit), while steps are still to come.
        flags = ["--hidden", "4096,4096", "--epochs", "1", "--batch", "16", "--train-limit",
                 "640", "--test-limit", "200", "--step-delay-ms", "400", "--timeout", "60"]
        with tempfile.TemporaryDirectory() as tmp:
            a, _, c = grow_then_lose(self, os.path.join(EXAMPLES, "elastic_loop.py"), flags, tmp,
                                     SECRET)
            sums = [re.search(r"done: checksum (\S+)", p.output()) for p in (a, c)]
            self.assertTrue(all(sums), a.output() + c.output())
            self.assertEqual(sums[0].group(1), sums[1].group(1))
            self.assertIn("size 2", a.output().split("size 3")[-1])  # two again after the kill


if __name__ == "__main__":
    unittest.main()
