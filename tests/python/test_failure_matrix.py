"""The failure matrix's Python half (the C++ half: tests/integration/failure_matrix_test.cpp).

Every failure point of a Python task (failure_task.py) ends its job with the outcome
docs/fault-tolerance.md ("Every job ends") documents for it: finished, failed with the hook in
the reason, stalled, or refused at start with exit code 2. The cells are generated from the
factors below as a pairwise cover: every failure point at least once, in a mode it applies to,
every mode with every layout, and every failure point in the process layout where it starts
processes (refused cells start one). Each cell's processes are started here and must all end
by themselves; none is left behind. Run by ctest like test_python_faults.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from processes import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
TASK = os.path.join(HERE, "failure_task.py")
BOUND_S = 120  # a cell's bound: every one ends well within it (60 s at the fast pace)
ENV = dict(os.environ, TROUPE_SECRET="a-long-random-secret-for-tests")

# Each failure point: the modes it applies to, and its outcome: (status, text in the reason,
# or for a refused start the text on stderr). status "refused": exit code 2, no report.
OUTCOMES = {
    "parameters": (("ps", "dp", "hybrid", "diloco"), "refused", "parameters raised"),
    "initialize": (("ps", "dp", "hybrid", "diloco"), "refused", "initialize raised"),
    "forward": (("ps", "dp", "hybrid", "diloco"), "failed", "forward raised at step 8"),
    "ids": (("ps", "hybrid"), "failed", "ids raised at step 8"),
    "malformed-example": (("ps", "dp", "hybrid", "diloco"), "failed", "the task's gradient"),
    "nan-loss": (("ps", "dp", "hybrid", "diloco"), "finished", ""),
    "evaluate": (("ps", "dp", "hybrid", "diloco"), "finished", ""),
    "deadlock": (("ps", "dp", "hybrid", "diloco"), "stalled", "user code: gradient"),
    "deadlock-holding-gil": (("ps", "dp", "hybrid", "diloco"), "stalled", "user code: gradient"),
    "no-tables": (("hybrid",), "finished", ""),
}
MODES = ("ps", "dp", "hybrid", "diloco")
# Rows run embedded as well (the C++ half runs every failure point embedded).
EMBEDDED_TOO = {"deadlock": "dp", "deadlock-holding-gil": "ps", "nan-loss": "ps", "forward": "diloco"}


def pairwise_cells():
    """(fault, mode, layout) rows: every failure point in the process layout, the modes it
    applies to taken in turn (so each mode meets the process layout), and a few embedded;
    with the C++ half (every failure point in every mode, embedded) and the C++ process row
    below, every pair of factor values (language, mode, failure point, layout) is met."""
    cells, turn = [], 0
    for fault, (modes, _, _) in OUTCOMES.items():
        cells.append((fault, modes[turn % len(modes)], "processes"))
        turn += 1
    cells += [(fault, mode, "embedded") for fault, mode in EMBEDDED_TOO.items()]
    covered = {(m, l) for _, m, l in cells}
    assert all((m, "processes") in covered for m in MODES), cells
    return cells


class Job:
    """One cell's processes, each with its output in a file."""

    def __init__(self, folder, fault, mode, layout):
        self.report = os.path.join(folder, "report.json")
        job = ["--fault", fault, "--mode", mode, "--workers", "1", "--epochs", "1", "--batch",
               "32", "--stall-timeout", "2", "--join-timeout", "5", "--torch-threads", "1",
               "--blas-threads", "1", "--log-level", "info"]
        servers = [] if mode == "dp" else ["--servers", "1"]
        # Each role starts once the one before it is in (a job this short may end before a
        # late process joins): (name, args, what its log says once it is in).
        if layout == "embedded":
            roles = [("embedded", [*servers, "--report", self.report], None)]
        else:
            port = str(free_port())
            at = ["--coordinator", f"127.0.0.1:{port}", *servers]
            roles = [("coordinator", ["--role", "coordinator", "--listen", f"127.0.0.1:{port}",
                                      "--report", self.report, *at], "listening on")]
            if mode != "dp":  # (a hybrid job without tables tells its server it is not needed)
                in_log = "not needed" if fault == "no-tables" else None  # (others wait for it)
                roles.append(("server", ["--role", "server", *at], in_log))
            roles.append(("worker", ["--role", "worker", "--name", "w0", *at], None))
        self.procs = []
        for name, args, in_log in roles:
            log = os.path.join(folder, name + ".log")
            with open(log, "w") as out:
                popen = subprocess.Popen([sys.executable, TASK, *job, *args], stdout=out,
                                         stderr=subprocess.STDOUT, env=ENV)
            self.procs.append((name, popen, log))
            if in_log:
                await_text(log, in_log, popen)

    def wait(self):
        """Each process's exit code (None for one still running after the bound: killed)."""
        codes = {}
        for name, popen, _ in self.procs:
            try:
                codes[name] = popen.wait(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
                codes[name] = None
        return codes

    def logs(self):
        text = ""
        for name, _, log in self.procs:
            with open(log) as f:
                text += f"--- {name}\n{f.read()}"
        return text

    def kill(self):
        for _, popen, _ in self.procs:
            if popen.poll() is None:
                popen.kill()
                popen.wait()


class FailureMatrix(unittest.TestCase):
    def check(self, fault, mode, layout):
        _, status, reason = OUTCOMES[fault]
        with tempfile.TemporaryDirectory() as folder:
            job = Job(folder, fault, mode, layout)
            try:
                codes = job.wait()
                logs = job.logs()
                self.assertNotIn(None, codes.values(), logs)  # every process ended by itself
                if status == "refused":
                    first = codes.get("embedded", codes.get("coordinator"))
                    self.assertEqual(first, 2, logs)
                    self.assertIn(reason, logs)
                    self.assertFalse(os.path.exists(job.report), logs)
                    return
                with open(job.report) as f:
                    report = json.load(f)
                self.assertEqual(report["status"], status, logs)
                if status == "finished":
                    self.assertTrue(all(code == 0 for code in codes.values()), (codes, logs))
                else:
                    first = codes.get("embedded", codes.get("coordinator"))
                    self.assertNotEqual(first, 0, logs)
                    self.assertIn("worker" if layout == "processes" else "embedded", codes)
                if status == "failed":
                    self.assertIn(reason, report["failure"], logs)
                if status == "stalled":
                    member = "w0" if layout == "processes" else "worker-0"
                    self.assertEqual(report["stall"][member]["waiting_on"], reason, report)
                    self.assertTrue(all(code not in (0, None) for code in codes.values()),
                                    (codes, logs))
                if fault == "nan-loss":
                    self.assertEqual(report["skipped_steps"], 1, logs)
                    self.assertEqual(report["workers"][0]["skipped_steps"], 1, logs)
                if fault == "evaluate":
                    self.assertIsNone(report["epochs"][0]["test_accuracy"], report)
                if fault == "no-tables":
                    self.assertIn("trains as --mode dp", logs)
                    self.assertEqual(report["mode"], "dp")
                    if layout == "processes":
                        self.assertIn("not needed", logs)
            finally:
                job.kill()


class CppProcesses(unittest.TestCase):
    """The matrix's C++ process row: troupe-fmnist (no tables) under --mode hybrid as five
    processes trains as dp to the end, and its servers exit 0, not needed."""

    def test_troupe_fmnist_hybrid_without_tables_as_processes(self):
        binary = os.path.join(os.environ.get("TROUPE_BIN", ""), "troupe-fmnist")
        port = str(free_port())
        at = ["--coordinator", f"127.0.0.1:{port}", "--workers", "2", "--servers", "2",
              "--mode", "hybrid", "--epochs", "2", "--train-limit", "2048", "--test-limit", "500"]
        with tempfile.TemporaryDirectory() as folder:
            report = os.path.join(folder, "report.json")
            procs = []

            def start(role, wait_for=None):
                log = os.path.join(folder, f"{len(procs)}.log")
                with open(log, "w") as out:
                    procs.append((subprocess.Popen([binary, *role, *at], stdout=out,
                                                   stderr=subprocess.STDOUT, env=ENV), log))
                if wait_for:  # the job is short: each role starts once the last one is in
                    self.assertTrue(await_text(log, wait_for), read(log))

            try:
                start(["--role", "coordinator", "--listen", f"127.0.0.1:{port}", "--report",
                       report], "listening on")
                start(["--role", "server"], "not needed")
                start(["--role", "server"], "not needed")
                start(["--role", "worker"])
                start(["--role", "worker"])
                codes = [p.wait(timeout=BOUND_S) for p, _ in procs]
                logs = "".join(read(log) for _, log in procs)
                self.assertEqual(codes, [0] * 5, logs)
                with open(report) as f:
                    data = json.load(f)
                self.assertEqual(data["status"], "finished", logs)
                self.assertEqual(len(data["epochs"]), 2)
            finally:
                for p, _ in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()


def read(path):
    with open(path) as f:
        return f.read()


def await_text(path, text, process=None):
    """Waits until the file at `path` holds `text` (False after BOUND_S, or once `process`
    ended without it)."""
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if text in read(path):
            return True
        if process is not None and process.poll() is not None:
            return text in read(path)
        time.sleep(0.02)
    return False


def add_cells():
    for fault, mode, layout in pairwise_cells():
        name = f"test_{fault.replace('-', '_')}_{mode}_{layout}"
        setattr(FailureMatrix, name,
                lambda self, f=fault, m=mode, l=layout: self.check(f, m, l))


add_cells()

if __name__ == "__main__":
    unittest.main()
