"""Faults in jobs of Python processes (--role per process, on loopback): kill -9 of a dp worker
of the CNN example (the group re-forms and every epoch's examples are used once), kill -9 of
the primary coordinator of a dp job with a standby (the standby finishes it), and kill -9 of a
server of the click model's hybrid job under --replication 2 (its tables' copies take over).
Each kill waits for a point of progress (a log line), on a job with a floor under its length
(--worker-delay-ms), never for a time. Run by ctest like test_torch_task (TROUPE_BIN names
the directory of the C++ binaries: the hybrid job's servers are troupe-fmnist)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from processes import free_port, write_script

EXAMPLES = os.environ.get("TROUPE_EXAMPLES", "")
CNN = os.path.join(EXAMPLES, "fmnist_cnn.py")
CLICKS = os.path.join(EXAMPLES, "click_model.py")
SERVER = os.path.join(os.environ.get("TROUPE_BIN", ""), "troupe-fmnist")
BOUND_S = 300  # every wait's bound; none comes near it
TRAIN = 2560
# 40 steps an epoch at --batch 32 x 2 workers; a floor of 30 ms a step: epochs 2 and 3 take
# 2.4 s at least after the kill that follows epoch 1's line.
JOB = ["--mode", "dp", "--epochs", "3", "--batch", "32", "--train-limit", str(TRAIN),
       "--test-limit", "300", "--torch-threads", "1", "--blas-threads", "1",
       "--log-level", "info"]
FLOOR = ["--worker-delay-ms", "0:30,1:30"]  # rank:ms
ENV = dict(os.environ, TROUPE_SECRET="a-long-random-secret-for-tests")


class Process:
    """A process of the job, its output in a file; killed if still running at the end."""

    def __init__(self, args, log, program=(sys.executable, CNN)):
        self.log = log
        with open(log, "w") as out:
            self.popen = subprocess.Popen([*program, *args], stdout=out,
                                          stderr=subprocess.STDOUT, env=ENV)

    def output(self):
        with open(self.log) as f:
            return f.read()

    def wait_for(self, text, count=1):
        """Waits until the output holds `text` `count` times (False if it ended first)."""
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            if self.output().count(text) >= count:
                return True
            if self.popen.poll() is not None:
                return self.output().count(text) >= count
            time.sleep(0.02)
        return False

    def wait(self):
        try:
            return self.popen.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()


class DpJob:
    """A coordinator (and optionally its standby) and two workers of a dp job."""

    def __init__(self, folder, standby=False):
        self.folder = folder
        self.report = os.path.join(folder, "report.json")
        primary = f"127.0.0.1:{free_port()}"
        coordinating = [*JOB, *FLOOR, "--role", "coordinator", "--workers", "2", "--report",
                        self.report]
        self.coordinator = Process([*coordinating, "--listen", primary],
                                   os.path.join(folder, "c.log"))
        join = primary
        self.standby = None
        if standby:
            second = f"127.0.0.1:{free_port()}"
            self.standby = Process([*coordinating, "--listen", second, "--standby-of", primary],
                                   os.path.join(folder, "c2.log"))
            join += "," + second
        self.workers = [Process([*JOB, "--role", "worker", "--coordinator", join, "--name",
                                 f"w{i}"], os.path.join(folder, f"w{i}.log")) for i in range(2)]

    def processes(self):
        return [p for p in [self.coordinator, self.standby, *self.workers] if p]

    def close(self):
        for p in self.processes():
            p.kill()

    def logs(self):
        return "\n".join(f"--- {p.log}\n{p.output()[-3000:]}" for p in self.processes())


class HybridJob:
    """The click model in --mode hybrid: a coordinator, two servers (troupe-fmnist: a server
    needs no model) holding every table bucket twice, and two workers."""
    # 20000 examples: 157 steps an epoch at --batch 64 x 2 workers; a floor of 20 ms a step:
    # epochs 2 to 4 take 9.4 s at least after the kill that follows epoch 1's line.
    JOB = ["--mode", "hybrid", "--epochs", "4", "--train-examples", "20000",
           "--test-examples", "2000", "--torch-threads", "1", "--blas-threads", "1",
           "--log-level", "info", "--request-timeout", "4"]

    def __init__(self, folder):
        self.report = os.path.join(folder, "report.json")
        at = f"127.0.0.1:{free_port()}"
        script = (sys.executable, CLICKS)
        self.coordinator = Process(
            [*self.JOB, "--worker-delay-ms", "0:20,1:20", "--role", "coordinator", "--listen",
             at, "--workers", "2", "--servers", "2", "--replication", "2", "--report",
             self.report], os.path.join(folder, "c.log"), script)
        self.servers = [Process(["--role", "server", "--coordinator", at, "--name", f"s{i}",
                                 "--log-level", "info", "--request-timeout", "4"],
                                os.path.join(folder, f"s{i}.log"), (SERVER,)) for i in range(2)]
        self.workers = [Process([*self.JOB, "--role", "worker", "--coordinator", at, "--name",
                                 f"w{i}"], os.path.join(folder, f"w{i}.log"), script)
                        for i in range(2)]

    def processes(self):
        return [self.coordinator, *self.servers, *self.workers]

    def close(self):
        for p in self.processes():
            p.kill()

    def logs(self):
        return "\n".join(f"--- {p.log}\n{p.output()[-3000:]}" for p in self.processes())


MAP_STYLE = """
import sys
import fmnist_cnn
import troupe


class MapStyle:
    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


def make_task(flags):
    task = fmnist_cnn.make_task(flags)
    task.train = MapStyle(task.train)
    return task


sys.exit(troupe.run(make_task, flags=fmnist_cnn.FLAGS))
"""


# A script that calls troupe.run 50 times in one process, each a small embedded job, and goes
# on after each call: every call must return its job's code to its caller. (The calls take
# longer in all than the 10 s bound that once ended the process after a first call.)
MANY_RUNS = """
import sys
import torch
from torch import nn
from torch.utils.data import TensorDataset

import troupe

g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(4096, 6, generator=g),
                     torch.randint(0, 3, (4096,), generator=g))
task = troupe.TorchTask(lambda: nn.Linear(6, 3), data, data)
for i in range(50):
    code = troupe.run(task, ["--epochs", "5", "--batch", "16", "--workers", "1", "--servers",
                             "1", "--torch-threads", "1", "--log-level", "error"])
    print(f"call {i} returned {code}", flush=True)
print("after the calls", flush=True)
"""

def children_of(pid):
    """The processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class PythonFaults(unittest.TestCase):
    def check_every_epoch_once(self, report, job):
        self.assertEqual(report["status"], "finished", job.logs())
        self.assertEqual(len(report["epochs"]), 3)
        for epoch in report["epochs"]:
            self.assertEqual(epoch["examples"], TRAIN, job.logs())

    def test_a_killed_python_dp_worker_leaves_a_group_that_uses_every_example_once(self):
        with tempfile.TemporaryDirectory() as folder:
            job = DpJob(folder)
            try:
                self.assertTrue(job.coordinator.wait_for("epoch 1/3"), job.logs())
                job.workers[1].kill()
                self.assertEqual(job.coordinator.wait(), 0, job.logs())
                report = self.read(job)
                self.check_every_epoch_once(report, job)
                self.assertEqual(report["workers_lost"], ["w1"])
                self.assertGreaterEqual(report["generations"], 2)
                self.assertEqual(job.workers[0].wait(), 0, job.logs())
            finally:
                job.close()

    def test_a_killed_python_coordinator_is_replaced_by_its_standby(self):
        with tempfile.TemporaryDirectory() as folder:
            job = DpJob(folder, standby=True)
            try:
                self.assertTrue(job.standby.wait_for("following the coordinator"), job.logs())
                self.assertTrue(job.coordinator.wait_for("epoch 1/3"), job.logs())
                job.coordinator.kill()
                self.assertEqual(job.standby.wait(), 0, job.logs())
                self.assertIn("took over as the coordinator of term 1", job.standby.output())
                report = self.read(job)
                self.check_every_epoch_once(report, job)
                self.assertEqual(len(report["takeovers"]), 1)
                self.assertEqual(report["workers_lost"], [])
                for w in job.workers:
                    self.assertEqual(w.wait(), 0, job.logs())
            finally:
                job.close()

    def test_a_python_hybrid_job_survives_a_killed_server_under_replication_2(self):
        with tempfile.TemporaryDirectory() as folder:
            job = HybridJob(folder)
            try:
                self.assertTrue(job.coordinator.wait_for("epoch 1/4"), job.logs())
                job.servers[1].kill()
                self.assertTrue(job.coordinator.wait_for("lost server 's1'"), job.logs())
                self.assertEqual(job.coordinator.wait(), 0, job.logs())
                report = self.read(job)
                self.assertEqual(report["status"], "finished", job.logs())
                self.assertEqual(report["mode"], "hybrid")
                self.assertEqual(len(report["epochs"]), 4)
                self.assertEqual(report["workers_lost"], [])
                self.assertEqual([loss["name"] for loss in report["losses"]], ["s1"])
                self.assertEqual(report["updates_lost"], 0, job.logs())
                self.assertGreater(report["updates_applied"], 0)
                # still learning after the loss: the last epoch's test loss is the lowest
                losses = [e["test_loss"] for e in report["epochs"]]
                self.assertLess(losses[-1], losses[0], losses)
                for p in [job.servers[0], *job.workers]:
                    self.assertEqual(p.wait(), 0, job.logs())
            finally:
                job.close()

    def test_ctrl_c_ends_a_python_job_with_its_report_and_its_loader_processes(self):
        with tempfile.TemporaryDirectory() as folder:
            script = write_script(folder, "map_style.py", MAP_STYLE)
            report = os.path.join(folder, "report.json")
            job = Process([*JOB, *FLOOR, "--workers", "2", "--loader-workers", "2", "--report",
                           report], os.path.join(folder, "job.log"), (sys.executable, script))
            try:
                self.assertTrue(job.wait_for("epoch 1/3"), job.output())
                loaders = children_of(job.popen.pid)
                self.assertGreaterEqual(len(loaders), 4, job.output())  # 2 trainers x 2
                job.popen.send_signal(signal.SIGINT)
                self.assertEqual(job.wait(), 130, job.output())
                self.assertIn("SIGINT: stopping", job.output())
                with open(report) as f:
                    data = json.load(f)
                self.assertEqual(data["status"], "failed")
                self.assertIn("interrupted: SIGINT", data["failure"])
                self.assertNotIn("Traceback", job.output())
                deadline = time.monotonic() + BOUND_S
                while any(alive(p) for p in loaders) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertFalse([p for p in loaders if alive(p)])
            finally:
                job.kill()

    def test_troupe_run_returns_to_its_caller_50_times_in_one_process(self):
        with tempfile.TemporaryDirectory() as folder:
            script = write_script(folder, "many_runs.py", MANY_RUNS)
            job = Process([], os.path.join(folder, "runs.log"), (sys.executable, script))
            try:
                self.assertEqual(job.wait(), 0, job.output())
                for i in range(50):
                    self.assertIn(f"call {i} returned 0", job.output())
                self.assertIn("after the calls", job.output())
            finally:
                job.kill()

    def test_a_python_model_without_tables_trains_in_hybrid_as_in_dp(self):
        with tempfile.TemporaryDirectory() as folder:
            report = os.path.join(folder, "report.json")
            job = Process(["--mode", "hybrid", "--epochs", "1", "--batch", "32", "--train-limit",
                           "640", "--test-limit", "100", "--torch-threads", "1", "--report",
                           report], os.path.join(folder, "job.log"))
            try:
                self.assertEqual(job.wait(), 0, job.output())
                self.assertIn("trains as --mode dp", job.output())
                self.assertNotIn("error", job.output())
                with open(report) as f:
                    data = json.load(f)
                self.assertEqual(data["status"], "finished")
                self.assertEqual(len(data["epochs"]), 1)
            finally:
                job.kill()

    def read(self, job):
        self.assertTrue(os.path.exists(job.report), job.logs())
        with open(job.report) as f:
            return json.load(f)


if __name__ == "__main__":
    unittest.main()
