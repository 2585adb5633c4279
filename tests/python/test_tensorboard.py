"""--tensorboard DIR, read back with the tensorboard package's own reader (EventAccumulator):
a parameter-service job's curves and test accuracy against its report, and a dp job whose
coordinator is killed after epoch 1 (waiting for that log line, on a job with a floor under its
length): its standby writes to the same run and the step axis goes on. Needs the tensorboard
package (cmake/bootstrap.sh installs it into build/venv, whose Python ctest runs this with);
skipped without it. TROUPE_BIN names the directory of troupe-fmnist."""
import glob
import json
import os
import sys
import tempfile
import unittest

from processes import Process, free_port

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    EventAccumulator = None

FMNIST = (os.path.join(os.environ.get("TROUPE_BIN", ""), "troupe-fmnist"),)
SECRET = "a-long-random-secret-for-tests"
TRAIN = 2560
COMMON = ["--epochs", "3", "--train-limit", str(TRAIN), "--test-limit", "500",
          "--blas-threads", "1", "--log-level", "info", "--seed", "3"]



def read_run(folder):
    acc = EventAccumulator(folder, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


@unittest.skipIf(EventAccumulator is None, "the tensorboard package is missing (run "
                 "cmake/bootstrap.sh test, which installs it into build/venv)")
class TensorBoardRuns(unittest.TestCase):
    def test_a_ps_jobs_figures_are_its_reports(self):
        with tempfile.TemporaryDirectory() as folder:
            run = os.path.join(folder, "run")
            report_file = os.path.join(folder, "report.json")
            job = Process(FMNIST, [*COMMON, "--workers", "2", "--servers", "2", "--batch", "32",
                                   "--tensorboard", run, "--report", report_file],
                          os.path.join(folder, "job.log"), SECRET)
            self.assertEqual(job.finish(), 0, job.output()[-3000:])
            with open(report_file) as f:
                report = json.load(f)
            acc = read_run(run)
            tags = acc.Tags()
            for tag in ("train/loss", "staleness/p50", "staleness/p99", "throughput/steps_per_s",
                        "test/accuracy", "test/loss", "train/epoch_loss"):
                self.assertIn(tag, tags["scalars"], tags)
            batches = TRAIN // 32
            self.assertEqual(scalars(acc, "test/accuracy"),
                             [(e["epoch"] * batches, _f32(e["test_accuracy"]))
                              for e in report["epochs"]])
            self.assertEqual([v for _, v in scalars(acc, "train/epoch_loss")],
                             [_f32(e["train_loss"]) for e in report["epochs"]])
            loss = scalars(acc, "train/loss")
            self.assertGreater(len(loss), 1)
            self.assertEqual([s for s, _ in loss], sorted(s for s, _ in loss))
            self.assertLessEqual(loss[-1][0], 3 * batches)
            p50 = [v for _, v in scalars(acc, "staleness/p50")]
            p99 = [v for _, v in scalars(acc, "staleness/p99")]
            self.assertTrue(all(0 <= a <= b for a, b in zip(p50, p99)), (p50, p99))
            settings = acc.Tensors("settings")[0].tensor_proto.string_val[0].decode()
            self.assertIn("| --servers | 2 |", settings)
            self.assertIn("| --tensorboard | " + run + " |", settings)

    def test_a_standby_goes_on_writing_the_same_run(self):
        with tempfile.TemporaryDirectory() as folder:
            run = os.path.join(folder, "run")
            report_file = os.path.join(folder, "report.json")
            primary, second = (f"127.0.0.1:{free_port()}" for _ in range(2))
            # 40 steps an epoch; a floor of 30 ms a step: epochs 2 and 3 take 2.4 s at least
            # after the kill that follows epoch 1's line.
            job = [*COMMON, "--mode", "dp", "--batch", "32", "--workers", "2"]
            coordinating = [*job, "--role", "coordinator", "--worker-delay-ms", "0:30,1:30",
                            "--tensorboard", run, "--report", report_file]
            log = lambda name: os.path.join(folder, name + ".log")
            c1 = Process(FMNIST, [*coordinating, "--listen", primary], log("c1"), SECRET)
            c2 = Process(FMNIST, [*coordinating, "--listen", second, "--standby-of", primary],
                         log("c2"), SECRET)
            workers = [Process(FMNIST, [*job, "--role", "worker", "--coordinator",
                                        f"{primary},{second}", "--name", f"w{i}"],
                               log(f"w{i}"), SECRET) for i in range(2)]
            everyone = [c1, c2, *workers]
            logs = lambda: "\n".join(p.output()[-2000:] for p in everyone)
            try:
                self.assertTrue(c2.wait_for("following the coordinator"), logs())
                self.assertTrue(c1.wait_for("epoch 1/3"), logs())
                c1.stop()
                self.assertEqual(c2.finish(), 0, logs())
                for w in workers:
                    self.assertEqual(w.finish(), 0, logs())
            finally:
                for p in everyone:
                    p.stop()
            with open(report_file) as f:
                report = json.load(f)
            files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
            self.assertEqual(len(files), 2, files)  # the primary's, then the standby's
            first, then = read_run(files[0]), read_run(files[1])
            self.assertEqual([e.step for e in first.Scalars("test/accuracy")], [40])  # epoch 1
            steps_of_then = [e.step for e in then.Scalars("train/loss")]
            # It goes on from the last standing it took, at most a heartbeat (500 ms, about 17
            # steps at the 30 ms floor) behind the kill after epoch 1's line, and the members
            # send it again what it lacks; a standby that started over would write from step 2.
            self.assertGreater(min(steps_of_then), 20, "the standby did not go on from the job")
            self.assertEqual(steps_of_then, sorted(steps_of_then))
            accuracy = scalars(read_run(run), "test/accuracy")
            self.assertEqual([s for s, _ in accuracy], [40, 80, 120])
            self.assertEqual(accuracy[-1][1], _f32(report["epochs"][-1]["test_accuracy"]))
            for tag in ("allreduce/seconds", "allreduce/bytes", "group/generation",
                        "group/members"):
                self.assertIn(tag, then.Tags()["scalars"])


def _f32(x):
    import struct
    return struct.unpack("f", struct.pack("f", x))[0]


if __name__ == "__main__":
    unittest.main()
