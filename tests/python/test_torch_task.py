"""The Python package: a TorchTask's gradient against torch's own, its tensors told final as
backward accumulates them, troupe.Table rows and their gradients, the CNN example run as a
Troupe binary (embedded ps, dp with two workers equal to one worker with the same global
batch, an exception in user code), and the click model's tables in --mode hybrid and ps.
Run by ctest with the build's package on PYTHONPATH (TROUPE_EXAMPLES names the examples)."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy

import torch
from torch import nn
from torch.utils.data import TensorDataset

import troupe

EXAMPLES = os.environ.get("TROUPE_EXAMPLES", "")
CNN = os.path.join(EXAMPLES, "fmnist_cnn.py")
BIN = os.environ.get("TROUPE_BIN", "")  # the C++ binaries (troupe-fmnist)
BOUND_S = 600  # no job here comes near it; a hang fails the test instead of CI


def small_data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return TensorDataset(x, y)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 5)
        self.b = nn.Linear(5, 3)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def flat(values):
    return memoryview(bytearray(4 * values)).cast("B").cast("f")


class TaskProtocol(unittest.TestCase):
    def setUp(self):
        self.task = troupe.TorchTask(Mlp, small_data(), small_data(32, 1))
        self.total = 6 * 5 + 5 + 5 * 3 + 3

    def test_parameters_and_initialize_follow_named_parameters(self):
        self.assertEqual([n for n, _ in self.task.parameters()], ["a.weight", "a.bias",
                                                                  "b.weight", "b.bias"])
        out = flat(self.total)
        self.task.initialize(5, out)
        torch.manual_seed(5)
        expected = torch.cat([p.detach().reshape(-1) for p in Mlp().parameters()])
        self.assertTrue(torch.equal(torch.frombuffer(out, dtype=torch.float32), expected))

    def test_the_gradient_is_torchs_and_every_tensor_is_told_once(self):
        params = flat(self.total)
        self.task.initialize(3, params)
        replica = self.task.make_replica(16, 7)
        for step in range(3):  # the first counts accumulations, the next ones overlap
            grad = flat(self.total)
            told = []
            loss, used = replica.gradient_range(params, 0, 16 * step, 16, grad, told.append)
            self.assertEqual(used, 16)
            self.assertEqual(sorted(told), [0, 1, 2, 3])
            if step > 0:
                self.assertEqual(set(told[:2]), {2, 3})  # backward's order: last layer first
            model = Mlp()
            torch.nn.utils.vector_to_parameters(torch.frombuffer(params, dtype=torch.float32)
                                                .clone(), model.parameters())
            order = replica._epoch_order(0)[16 * step:16 * step + 16]
            x, y = self.task.train.tensors[0][order], self.task.train.tensors[1][order]
            expected_loss = nn.functional.cross_entropy(model(x), y)
            expected_loss.backward()
            expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            got = torch.frombuffer(grad, dtype=torch.float32)
            self.assertLess(float((got - expected).norm() / expected.norm()), 1e-6)
            self.assertAlmostEqual(loss, float(expected_loss), places=5)
            # A step in place, as a dp member's: the next range sees it (views, not a copy).
            torch.frombuffer(params, dtype=torch.float32).sub_(0.1 * got)

    def test_a_replica_holds_no_copy_of_the_parameters_or_their_gradients(self):
        params, grad = flat(self.total), flat(self.total)
        self.task.initialize(3, params)
        replica = self.task.make_replica(16, 7)
        replica.gradient_range(params, 0, 0, 16, grad, None)
        base = torch.frombuffer(params, dtype=torch.float32).data_ptr()
        end = base + 4 * self.total
        for p in replica.model.params:  # views of Troupe's parameters
            self.assertTrue(base <= p.data_ptr() < end)
            self.assertIsNone(p.grad)  # backward wrote into `grad`; no view of it is kept
        self.assertEqual(replica.model.flat.numel(), 0)  # the MLP has no buffers to hold

    def test_a_range_past_the_epoch_uses_what_is_left(self):
        params, grad = flat(self.total), flat(self.total)
        self.task.initialize(3, params)
        replica = self.task.make_replica(16, 7)
        self.assertEqual(replica.gradient_range(params, 2, 56, 16, grad, None)[1], 8)
        self.assertEqual(replica.gradient_range(params, 2, 64, 16, grad, None), (0.0, 0))

    def test_models_troupe_cannot_train_are_refused_clearly(self):
        with self.assertRaisesRegex(TypeError, "torch.nn.Module"):
            troupe.TorchTask(lambda: 3, small_data(), small_data())

        def frozen():
            model = Mlp()
            model.a.weight.requires_grad_(False)
            return model
        with self.assertRaisesRegex(ValueError, "a.weight' is frozen"):
            troupe.TorchTask(frozen, small_data(), small_data())


class Wide(nn.Module):
    """A table of 2-value rows beside a linear layer over the dense features."""

    def __init__(self):
        super().__init__()
        self.rows = troupe.Table("rows", 2, init_scale=0.1)
        self.dense = nn.Linear(6, 3)

    def forward(self, x, ids):
        picked = self.rows(ids)  # batch x 2 ids x 2 values
        return self.dense(x) + picked.sum(dim=1).repeat(1, 2)[:, :3]


def with_ids(n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 6, generator=g),
                         torch.randint(0, 9, (n, 2), generator=g) * 1000 + (1 << 40),
                         torch.randint(0, 3, (n,), generator=g))


class TableProtocol(unittest.TestCase):
    def setUp(self):
        self.task = troupe.TorchTask(Wide, with_ids(), with_ids(16, 1),
                                     ids=lambda x, ids: {"rows": ids})
        self.total = 6 * 3 + 3

    def test_the_rows_and_their_gradients_are_torchs(self):
        self.assertEqual(self.task.tables(), [("rows", 2, 0.1, 1 << 22, "none", 1)])
        params, grad = flat(self.total), flat(self.total)
        self.task.initialize(3, params)
        replica = self.task.make_replica(16, 7)
        (ids,) = replica.rows_of_range(1, 16, 16)
        order = replica._epoch_order(1)[16:32]
        x, used, y = (t[order] for t in self.task.train.tensors)
        self.assertEqual(ids.tolist(), sorted(set(used.reshape(-1).tolist())))
        values = torch.randn(len(ids), 2)
        grads = torch.zeros(len(ids), 2)
        loss, count = replica.gradient_range(params, 1, 16, 16, grad, None, [(
            memoryview(ids.astype("uint64")), memoryview(values.numpy()).cast("B").cast("f"),
            memoryview(grads.numpy()).cast("B").cast("f"))])
        self.assertEqual(count, 16)
        # the same computation with the rows as an ordinary leaf tensor
        model = nn.Linear(6, 3)
        torch.nn.utils.vector_to_parameters(torch.frombuffer(params, dtype=torch.float32)
                                            .clone(), model.parameters())
        leaf = values.clone().requires_grad_(True)
        at = torch.searchsorted(torch.from_numpy(ids), used)
        expected = nn.functional.cross_entropy(
            model(x) + leaf[at].sum(dim=1).repeat(1, 2)[:, :3], y)
        expected.backward()
        self.assertAlmostEqual(loss, float(expected), places=5)
        self.assertLess(float((grads - leaf.grad).norm() / leaf.grad.norm()), 1e-6)
        dense = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        got = torch.frombuffer(grad, dtype=torch.float32)
        self.assertLess(float((got - dense).norm() / dense.norm()), 1e-6)

    def test_evaluation_reads_the_test_sets_rows(self):
        (ids,) = self.task.evaluation_rows()
        self.assertEqual(ids.tolist(), sorted(set(self.task.test.tensors[1].reshape(-1).tolist())))
        params = flat(self.total)
        self.task.initialize(3, params)
        values = torch.zeros(len(ids), 2)
        accuracy, loss = self.task.evaluate(params, [(memoryview(ids.astype("uint64")),
                                                      memoryview(values.numpy()).cast("B")
                                                      .cast("f"))])
        self.assertTrue(0 <= accuracy <= 1 and loss > 0)

    def test_tables_misused_are_refused_clearly(self):
        params, grad = flat(self.total), flat(self.total)
        replica = self.task.make_replica(16, 7)
        with self.assertRaisesRegex(RuntimeError, "--mode ps or --mode hybrid"):
            replica.gradient_range(params, 0, 0, 16, grad, None)
        with self.assertRaisesRegex(ValueError, "give ids="):
            troupe.TorchTask(Wide, with_ids(), with_ids())
        wrong = troupe.TorchTask(Wide, with_ids(), with_ids(), ids=lambda x, ids: {"rows": ids[:, :1]})
        replica = wrong.make_replica(16, 7)
        (ids,) = replica.rows_of_range(0, 0, 16)
        values = torch.zeros(len(ids), 2)
        rows = [(memoryview(ids.astype("uint64")), memoryview(values.numpy()).cast("B").cast("f"),
                 memoryview(torch.zeros(len(ids), 2).numpy()).cast("B").cast("f"))]
        with self.assertRaisesRegex(KeyError, "not named by the task's ids"):
            replica.gradient_range(params, 0, 0, 16, grad, None, rows)
        with self.assertRaisesRegex(ValueError, "negative"):
            troupe.TorchTask(Wide, with_ids(), with_ids(),
                             ids=lambda x, ids: {"rows": -ids}).evaluation_rows()
        with self.assertRaisesRegex(ValueError, "dim must be at least 1"):
            troupe.Table("t", 0)
        with self.assertRaisesRegex(ValueError, "evict must be"):
            troupe.Table("t", 2, evict="fifo")
        with self.assertRaisesRegex(ValueError, "admit_after"):
            troupe.Table("t", 2, admit_after=0)
        with self.assertRaisesRegex(ValueError, "bf16 rows are not built"):
            troupe.Table("t", 2, dtype="bf16")
        self.assertEqual(troupe.Table("t", 2, evict="ttl:30", admit_after=3).spec()[4:],
                         ("ttl:30", 3))

    def test_read_deltas_gives_a_jobs_exported_rows_as_arrays(self):
        import troupe.table
        with tempfile.TemporaryDirectory() as folder:
            export = os.path.join(folder, "rows")
            report = os.path.join(folder, "report.json")
            ctr = os.path.join(os.environ.get("TROUPE_BIN", ""), "troupe-ctr")
            done = subprocess.run(
                [ctr, "--stream", "--train-examples", "20000", "--test-examples", "2000",
                 "--vocabulary", "3000", "--fm-dim", "2", "--epochs", "1", "--evict", "lfu",
                 "--capacity", "4000", "--admit-after", "2", "--reference=false",
                 "--export-dir", export, "--report", report, "--log-level", "warn"],
                capture_output=True, text=True, timeout=BOUND_S)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            tables = troupe.table.read_deltas(export)
            with open(report) as f:
                counted = json.load(f)["tables"]
            self.assertEqual(sorted(tables), ["v", "w"])
            for name, dim in (("w", 1), ("v", 2)):
                ids, values = tables[name]
                self.assertEqual(ids.dtype, numpy.uint64)
                self.assertEqual(values.shape, (len(ids), dim))
                self.assertEqual(len(ids), counted[name]["rows"])
                self.assertTrue(bool((numpy.diff(ids.astype(numpy.float64)) > 0).all()))
                self.assertGreater(counted[name]["rows_evicted"], 0)
                self.assertGreater(counted[name]["ids_not_admitted"], 0)
            with self.assertRaisesRegex(ValueError, "no table delta directory"):
                troupe.table.read_deltas(os.path.join(folder, "absent"))


def run_cnn(args, cwd, script=CNN):
    """Runs a script as a Troupe binary (or, given a tuple, that command); (exit code, output,
    report or None)."""
    report = os.path.join(cwd, "report.json")
    command = list(script) if isinstance(script, tuple) else [sys.executable, script]
    done = subprocess.run([*command, "--report", report, "--log-level", "info", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=BOUND_S)
    text = done.stdout + done.stderr
    data = None
    if os.path.exists(report):
        with open(report) as f:
            data = json.load(f)
    return done.returncode, text, data


SMALL = ["--train-limit", "2560", "--test-limit", "500", "--torch-threads", "1",
         "--blas-threads", "1"]


class CnnJobs(unittest.TestCase):
    def test_the_cnn_trains_embedded_on_the_parameter_service(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, report = run_cnn([*SMALL, "--epochs", "2", "--workers", "2",
                                         "--batch", "32"], cwd)
            self.assertEqual(code, 0, out)
            self.assertEqual(report["status"], "finished", out)
            self.assertEqual(report["updates_lost"], 0)
            self.assertGreater(report["updates_applied"], 0)
            self.assertGreater(report["test_accuracy"], 0.5, out)

    def test_the_cnn_trains_in_diloco_rounds_with_int8_pseudo_gradients(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, report = run_cnn([*SMALL, "--mode", "diloco", "--epochs", "2",
                                         "--workers", "2", "--batch", "32", "--sync-every", "10",
                                         "--comm-dtype", "int8"], cwd)
            self.assertEqual(code, 0, out)
            self.assertEqual(report["status"], "finished", out)
            self.assertEqual(report["mode"], "diloco")
            self.assertEqual(report["steps"], 2 * 2560 // 32)
            self.assertGreaterEqual(report["rounds"], 2 * 2560 // 32 // 10)
            self.assertGreater(report["pseudo_gradient_bytes"], 0)
            self.assertEqual(report["staleness"]["unit"], "rounds")
            self.assertGreater(report["test_accuracy"], 0.5, out)

    def test_the_libtorch_cnn_trains_in_diloco_rounds(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, report = run_cnn(["--train-limit", "2560", "--test-limit", "500",
                                         "--mode", "diloco", "--epochs", "2", "--workers", "2",
                                         "--sync-every", "10", "--blas-threads", "1"], cwd,
                                        (os.path.join(BIN, "torch-cnn"),))
            self.assertEqual(code, 0, out)
            self.assertEqual(report["mode"], "diloco")
            self.assertEqual(report["steps"], 2 * 2560 // 64)
            self.assertGreater(report["test_accuracy"], 0.5, out)

    def test_dp_with_two_workers_equals_one_worker_with_the_same_global_batch(self):
        with tempfile.TemporaryDirectory() as cwd:
            common = [*SMALL, "--mode", "dp", "--epochs", "1", "--optimizer", "sgd",
                      "--lr", "0.05"]
            code, out, two = run_cnn([*common, "--workers", "2", "--batch", "64"], cwd)
            self.assertEqual(code, 0, out)
            code, out, one = run_cnn([*common, "--workers", "1", "--batch", "128"], cwd)
            self.assertEqual(code, 0, out)
            self.assertEqual(two["epochs"][0]["examples"], 2560)
            for key in ("test_loss", "train_loss"):
                a, b = two["epochs"][0][key], one["epochs"][0][key]
                self.assertLess(abs(a - b) / abs(b), 1e-5, (key, a, b))

    def test_dataloader_workers_read_the_same_examples_from_forked_processes(self):
        with tempfile.TemporaryDirectory() as cwd:
            runs = {}
            for workers in ("0", "2"):
                readers = os.path.join(cwd, "readers-" + workers)
                os.mkdir(readers)
                script = os.path.join(cwd, "map_style.py")
                with open(script, "w") as f:
                    f.write(MAP_STYLE_SCRIPT.format(examples=EXAMPLES, readers=readers))
                code, out, report = run_cnn([*SMALL, "--mode", "dp", "--workers", "2",
                                             "--batch", "64", "--epochs", "1",
                                             "--loader-workers", workers], cwd, script)
                self.assertEqual(code, 0, out)
                runs[workers] = (report["epochs"][0], set(os.listdir(readers)))
            (plain, read_here), (loaded, read_there) = runs["0"], runs["2"]
            self.assertEqual(len(read_here), 1)  # the trainers' own process
            self.assertEqual(len(read_there), 4)  # 2 trainers x 2 forked workers
            for key in ("test_loss", "train_loss"):
                self.assertLess(abs(plain[key] - loaded[key]) / abs(plain[key]), 1e-6, key)

    @unittest.skipIf(torch.cuda.is_available(), "this machine has a GPU: nothing to refuse")
    def test_device_cuda_without_a_gpu_is_refused_clearly(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, _ = run_cnn([*SMALL, "--device", "cuda"], cwd)
            self.assertNotEqual(code, 0, out)
            self.assertLess(code, 128, out)
            self.assertIn("--device cuda: this process has no usable GPU", out)

    def test_an_exception_in_user_code_stops_with_its_traceback(self):
        with tempfile.TemporaryDirectory() as cwd:
            script = os.path.join(cwd, "broken.py")
            with open(script, "w") as f:
                f.write(BROKEN_SCRIPT.format(examples=EXAMPLES))
            code, out, _ = run_cnn(["--train-limit", "512", "--test-limit", "100",
                                    "--epochs", "1", "--workers", "1"], cwd, script)
            self.assertNotEqual(code, 0, out)
            self.assertLess(code, 128, out)  # an exit, not a signal
            self.assertIn("Traceback", out)
            self.assertIn("ValueError: the user's loss broke at step 3", out)


MLP_SCRIPT = '''
"""troupe-fmnist's model in torch: the 784-256-128-10 ReLU MLP, its inputs normalised and its
parameters drawn as apps/fmnist/mlp_task.cpp does (std::mt19937_64, written out below)."""
import sys
sys.path.insert(0, "{examples}")
import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset
import troupe
import fmnist_cnn

MASK = (1 << 64) - 1


def mt19937_64(seed):
    """std::mt19937_64's raw outputs."""
    mt = [seed & MASK]
    for i in range(1, 312):
        mt.append((6364136223846793005 * (mt[-1] ^ (mt[-1] >> 62)) + i) & MASK)
    while True:
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            mt[i] = mt[(i + 156) % 312] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
        for x in mt:
            x ^= (x >> 29) & 0x5555555555555555
            x ^= (x << 17) & 0x71D67FFFEDA60000
            x ^= (x << 37) & 0xFFF7EEE000000000
            yield (x ^ (x >> 43)) & MASK


def fmnist_parameters(seed):
    """fmnist_task::initialize: weights uniform in +-sqrt(6 / in) from the top 24 bits of each
    output, biases 0."""
    draws = mt19937_64(seed)
    out = []
    for fan_in, fan_out in ((784, 256), (256, 128), (128, 10)):
        top = np.fromiter((next(draws) >> 40 for _ in range(fan_in * fan_out)), np.float32)
        bound = np.float32(np.sqrt(np.float32(6.0) / np.float32(fan_in)))
        out += [(np.float32(2.0) * (top * np.float32(2.0 ** -24)) - np.float32(1.0)) * bound,
                np.zeros(fan_out, np.float32)]
    return np.concatenate(out)


def normalised(directory, split, limit):
    images = fmnist_cnn.read_idx(f"{{directory}}/{{split}}-images-idx3-ubyte.gz", limit)
    labels = fmnist_cnn.read_idx(f"{{directory}}/{{split}}-labels-idx1-ubyte.gz", limit)
    scale = np.float32(1.0) / (np.float32(255.0) * np.float32(0.3530))
    shift = np.float32(0.2860) / np.float32(0.3530)
    x = images.reshape(len(images), 784).astype(np.float32) * scale - shift
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64)))


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


class FmnistMlp(troupe.TorchTask):
    def initialize(self, seed, out):
        torch.frombuffer(out, dtype=torch.float32).copy_(torch.from_numpy(fmnist_parameters(seed)))


def make_task(flags):
    return FmnistMlp(mlp, normalised(flags["data"], "train", int(flags["train-limit"])),
                     normalised(flags["data"], "t10k", int(flags["test-limit"])))


sys.exit(troupe.run(make_task, flags=fmnist_cnn.FLAGS))
'''


class SameComputation(unittest.TestCase):
    def test_a_torch_mlp_steps_as_troupe_fmnists_hand_written_one(self):
        """20 dp steps, each an epoch of the same 64 examples (2 workers x 32): every step's
        loss, and the test loss after it, equal troupe-fmnist's to 1e-5 norm-relative."""
        job = ["--mode", "dp", "--workers", "2", "--batch", "32", "--train-limit", "64",
               "--test-limit", "500", "--epochs", "20", "--optimizer", "sgd", "--lr", "0.05",
               "--seed", "7", "--blas-threads", "1"]
        with tempfile.TemporaryDirectory() as cwd:
            script = os.path.join(cwd, "fmnist_mlp.py")
            with open(script, "w") as f:
                f.write(MLP_SCRIPT.format(examples=EXAMPLES))
            code, out, torch_run = run_cnn([*job, "--torch-threads", "1"], cwd, script)
            self.assertEqual(code, 0, out)
            code, out, hand = run_cnn(job, cwd, (os.path.join(BIN, "troupe-fmnist"),))
            self.assertEqual(code, 0, out)
        for key in ("train_loss", "test_loss"):
            a = torch.tensor([e[key] for e in torch_run["epochs"]], dtype=torch.float64)
            b = torch.tensor([e[key] for e in hand["epochs"]], dtype=torch.float64)
            self.assertEqual(len(a), 20)
            self.assertLess(float((a - b).norm() / b.norm()), 1e-5, (key, a, b))
        self.assertLess(float(b[-1]), float(b[0]))  # it learned


BN_DEFS = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset


class BnNet(nn.Module):
    """BatchNorm between two linear layers: running statistics, and a step count (int64)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.norm = nn.BatchNorm1d(8)
        self.b = nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.relu(self.norm(self.a(x))))


def bn_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g) * 3 + 1  # far from BatchNorm's initial statistics
    return TensorDataset(x, (x[:, 0] > 1).long() + (x[:, 1] > 1).long())
'''

BN_SCRIPT = '''
import sys
import troupe
{defs}
sys.exit(troupe.run(troupe.TorchTask(BnNet, bn_data(256, 1), bn_data(200, 2))))
'''


def ddp_reference(task, seed, epochs, members, batch, lr, accumulate=1):
    """What DDP computes for BnNet: each member's share of a step through the model in train
    mode (its own batch statistics; under `accumulate`, in that many micro-batches, each
    starting from the buffers the one before left, their gradients averaged by size), the
    gradients averaged by examples, plain SGD, and every member's buffers set to the first
    member's after each step. Test loss after each epoch."""
    total = sum(torch.Size(shape).numel() for _, shape, *_ in task.parameters())
    state = torch.zeros(total)
    task.initialize(seed, memoryview(state.numpy()).cast("B").cast("f"))
    order = task.make_replica(members * batch, seed)
    model = task.model()
    tensors = [*model.buffers(), *model.parameters()]

    def load(flat):
        at = 0
        with torch.no_grad():
            for t in tensors:
                t.copy_(flat[at:at + t.numel()].view_as(t))
                at += t.numel()

    def buffers():
        return torch.cat([b.detach().reshape(-1).float() for b in model.buffers()])

    losses = []
    x, y = task.train.tensors
    for epoch in range(epochs):
        perm = order._epoch_order(epoch)
        for begin in range(0, len(perm), members * batch):
            step = perm[begin:begin + members * batch]
            cuts = [len(step) * r // members for r in range(members + 1)]
            grad, first_buffers = torch.zeros(total), None
            for r in range(members):
                share = step[cuts[r]:cuts[r + 1]]
                local = state.clone()
                n = len(share)
                sizes = [n // accumulate + (k < n % accumulate) for k in range(accumulate)]
                at = 0
                for size in filter(None, sizes):
                    load(local)
                    model.zero_grad()
                    part = share[at:at + size]
                    nn.functional.cross_entropy(model(x[part]), y[part]).backward()
                    g = torch.cat([torch.zeros(len(buffers()))] +
                                  [p.grad.reshape(-1) for p in model.parameters()])
                    grad += g * (size / len(step))
                    local[:len(buffers())] = buffers()
                    at += size
                if r == 0:
                    first_buffers = local[:len(buffers())].clone()
            state -= lr * grad
            state[:len(first_buffers)] = first_buffers
        load(state)
        losses.append(task.evaluate(memoryview(state.numpy()).cast("B").cast("f"))[1])
    return losses


class ModelBuffers(unittest.TestCase):
    def setUp(self):
        scope = {}
        exec(BN_DEFS, scope)
        self.task = troupe.TorchTask(scope["BnNet"], scope["bn_data"](256, 1),
                                     scope["bn_data"](200, 2))

    def test_buffers_lead_the_flat_vector_and_their_values_come_back_after_forward(self):
        specs = self.task.parameters()
        self.assertEqual(specs[:3], [("norm.running_mean", (8,), "buffer"),
                                     ("norm.running_var", (8,), "buffer"),
                                     ("norm.num_batches_tracked", (), "buffer")])
        self.assertEqual([s[0] for s in specs[3:]], ["a.weight", "a.bias", "norm.weight",
                                                     "norm.bias", "b.weight", "b.bias"])
        total = 8 + 8 + 1 + 6 * 8 + 8 + 8 + 8 + 8 * 3 + 3
        params, grad = flat(total), flat(total)
        self.task.initialize(4, params)
        state = torch.frombuffer(params, dtype=torch.float32)
        self.assertTrue(torch.equal(state[8:16], torch.ones(8)))  # running_var starts at 1
        replica = self.task.make_replica(32, 4)
        replica.gradient_range(params, 0, 0, 32, grad, None)
        out = torch.frombuffer(grad, dtype=torch.float32)
        self.assertGreater(float(out[:8].abs().sum()), 0)  # the mean moved off 0
        self.assertEqual(float(out[16]), 1.0)  # one batch tracked, as float32
        replica.gradient_range(params, 0, 32, 32, grad, None)
        self.assertEqual(float(out[16]), 1.0)  # from the parameters it was given: 0 + 1

    def run_bn(self, cwd, args):
        script = os.path.join(cwd, "bn.py")
        with open(script, "w") as f:
            f.write(BN_SCRIPT.format(defs=BN_DEFS))
        return run_cnn(["--torch-threads", "1", "--blas-threads", "1", "--optimizer", "sgd",
                        "--lr", "0.1", "--seed", "3", "--batch", "16", *args], cwd, script)

    def test_dp_takes_the_first_members_buffers_each_step_as_ddp_does(self):
        # whether the optimizer's state is whole on each member or sharded (--zero-stage 1),
        # and the gradient too, put tensor by tensor (--zero-stage 2)
        expected = ddp_reference(self.task, 3, 2, 2, 16, 0.1)
        for stage in ("0", "1", "2"):
            with self.subTest(zero_stage=stage), tempfile.TemporaryDirectory() as cwd:
                code, out, report = self.run_bn(cwd, ["--mode", "dp", "--workers", "2",
                                                      "--epochs", "2", "--zero-stage", stage])
                self.assertEqual(code, 0, out)
                self.assertEqual(report["zero_stage"], int(stage))
                got = [e["test_loss"] for e in report["epochs"]]
                for a, b in zip(got, expected):
                    self.assertLess(abs(a - b) / b, 1e-5, (got, expected))

    def test_a_sharded_checkpoint_resumes_at_another_stage(self):
        # 2 members at --batch 16 under stage 2 save every 3 steps (each member its own
        # pieces); 2 under stage 1 resume from the newest before the end and end where the
        # whole job and DDP do, BatchNorm's buffers and all. (Not at another size: BatchNorm's
        # statistics are over each member's batch, so 1 x 32 computes other gradients than
        # 2 x 16; dp_zero_test resumes the MLP at other sizes.)
        expected = ddp_reference(self.task, 3, 2, 2, 16, 0.1)
        with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryDirectory() as again:
            saved = os.path.join(cwd, "checkpoints")
            code, out, whole = self.run_bn(cwd, ["--mode", "dp", "--workers", "2", "--epochs",
                                                 "2", "--zero-stage", "2", "--checkpoint-dir",
                                                 saved, "--checkpoint-every", "3"])
            self.assertEqual(code, 0, out)
            self.assertGreater(whole["checkpoints"], 1, out)
            code, out, resumed = self.run_bn(again, ["--mode", "dp", "--workers", "2",
                                                     "--epochs", "2", "--zero-stage", "1",
                                                     "--resume", saved])
            self.assertEqual(code, 0, out)
        self.assertGreater(resumed["resumed_from_step"], 0, out)
        self.assertLess(resumed["resumed_from_step"], whole["steps"], out)
        got = [e["test_loss"] for e in resumed["epochs"]]
        for a, b in zip(got, expected):
            self.assertLess(abs(a - b) / b, 1e-5, (got, expected))

    def test_under_accumulate_each_micro_batch_starts_from_the_last_ones_buffers(self):
        # --accumulate 2: each member computes 2 micro-batches of --batch (16) a step
        expected = ddp_reference(self.task, 3, 2, 2, 32, 0.1, accumulate=2)
        with tempfile.TemporaryDirectory() as cwd:
            code, out, report = self.run_bn(cwd, ["--mode", "dp", "--workers", "2",
                                                  "--epochs", "2", "--accumulate", "2"])
            self.assertEqual(code, 0, out)
        got = [e["test_loss"] for e in report["epochs"]]
        for a, b in zip(got, expected):
            self.assertLess(abs(a - b) / b, 1e-5, (got, expected))

    def test_compressed_adam_refuses_a_model_with_buffers(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, _ = self.run_bn(cwd, ["--mode", "dp", "--workers", "2", "--epochs", "1",
                                             "--optimizer", "onebit-adam"])
            self.assertNotEqual(code, 0, out)
            self.assertIn("do not take a model with buffers", out)

    def test_a_checkpoint_holds_the_buffers(self):
        expected = ddp_reference(self.task, 3, 2, 2, 16, 0.1)
        with tempfile.TemporaryDirectory() as cwd:
            saved = os.path.join(cwd, "checkpoints")
            common = ["--mode", "dp", "--workers", "2", "--epochs", "2", "--checkpoint-dir", saved]
            code, out, _ = self.run_bn(cwd, [*common, "--checkpoint-every", "8"])
            self.assertEqual(code, 0, out)
            # the newest checkpoint left is the one after epoch 1 (step 8 of 16)
            files = sorted(os.listdir(saved))
            self.assertEqual(len(files), 2, files)
            os.remove(os.path.join(saved, files[-1]))
            code, out, report = self.run_bn(cwd, [*common, "--resume", saved])
            self.assertEqual(code, 0, out)
        self.assertEqual(report["resumed_from_step"], 8, out)
        final = report["epochs"][-1]["test_loss"]
        self.assertLess(abs(final - expected[1]) / expected[1], 1e-5, (final, expected))

    def test_mode_ps_refuses_a_model_with_buffers(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, _ = self.run_bn(cwd, ["--mode", "ps", "--epochs", "1"])
            self.assertEqual(code, 2, out)
            self.assertIn("this model has buffers", out)


CLICKS = os.path.join(EXAMPLES, "click_model.py")
CLICKS_SMALL = ["--train-examples", "20000", "--test-examples", "2000", "--torch-threads", "1",
                "--blas-threads", "1", "--epochs", "2"]


def rate_log_loss(output):
    """The log loss of always predicting the test set's click rate (the example prints it)."""
    return float(re.search(r"log loss of the rate ([0-9.]+)", output).group(1))


class ClickJobs(unittest.TestCase):
    def test_the_click_models_tables_train_on_the_servers_in_hybrid_and_ps(self):
        for mode in ("hybrid", "ps"):
            with self.subTest(mode=mode), tempfile.TemporaryDirectory() as cwd:
                code, out, report = run_cnn([*CLICKS_SMALL, "--mode", mode], cwd, CLICKS)
                self.assertEqual(code, 0, out)
                self.assertEqual(report["status"], "finished", out)
                self.assertEqual(report["mode"], mode)
                self.assertGreater(report["updates_applied"], 0)  # rows pushed to the buckets
                self.assertEqual(report["updates_lost"], 0)
                if mode == "hybrid":
                    self.assertGreater(report["allreduce_bytes"], 0)  # the tower, allreduced
                # it learned more than the click rate
                self.assertLess(report["epochs"][-1]["test_loss"], rate_log_loss(out) - 0.02, out)

    def test_a_hybrid_checkpoint_holds_the_tables_rows_and_a_job_resumes_from_it(self):
        with tempfile.TemporaryDirectory() as cwd:
            saved = os.path.join(cwd, "checkpoints")
            flags = [*CLICKS_SMALL, "--mode", "hybrid", "--checkpoint-dir", saved]
            code, out, first = run_cnn([*flags, "--checkpoint-every", "10"], cwd, CLICKS)
            self.assertEqual(code, 0, out)
            self.assertGreater(first["checkpoints"], 0, out)
            newest = sorted(f for f in os.listdir(saved) if f.endswith(".troupe"))[-1]
            step = int(newest[len("ckpt-"):-len(".troupe")])
            os.remove(os.path.join(saved, newest))  # resume from the one before the last
            code, out, resumed = run_cnn([*flags, "--resume", saved], cwd, CLICKS)
            self.assertEqual(code, 0, out)
            self.assertEqual(resumed["status"], "finished", out)
            self.assertGreater(resumed["resumed_from_step"], 0, out)
            self.assertLess(resumed["resumed_from_step"], step, out)
            self.assertEqual(resumed["steps"], first["steps"])
            # The tables came back: the rows' updates before the checkpoint are counted with
            # the ones after, as in the job that was not stopped.
            self.assertEqual(resumed["updates_applied"], first["updates_applied"], out)
            self.assertLess(resumed["epochs"][-1]["test_loss"], rate_log_loss(out) - 0.02, out)

    def test_tables_are_refused_in_mode_dp(self):
        with tempfile.TemporaryDirectory() as cwd:
            code, out, _ = run_cnn([*CLICKS_SMALL, "--mode", "dp"], cwd, CLICKS)
            self.assertEqual(code, 2, out)
            self.assertIn("run it with --mode ps, or --mode hybrid", out)


MAP_STYLE_SCRIPT = '''
import os
import sys
sys.path.insert(0, "{examples}")
import troupe
import fmnist_cnn

class MapStyle:
    """The CNN's examples as a map-style dataset that notes each process reading it."""
    def __init__(self, data, folder):
        self.data, self.folder, self.noted = data, folder, set()
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        if os.getpid() not in self.noted:
            self.noted.add(os.getpid())
            open(os.path.join(self.folder, str(os.getpid())), "w").close()
        return self.data[i]

def make_task(flags):
    task = fmnist_cnn.make_task(flags)
    task.train = MapStyle(task.train, "{readers}")
    return task

sys.exit(troupe.run(make_task, flags=fmnist_cnn.FLAGS))
'''

BROKEN_SCRIPT = '''
import sys
sys.path.insert(0, "{examples}")
import torch
import troupe
import fmnist_cnn

calls = [0]

def loss(output, target):
    calls[0] += 1
    if calls[0] == 3:
        raise ValueError("the user's loss broke at step 3")
    return torch.nn.functional.cross_entropy(output, target)

def make_task(flags):
    task = fmnist_cnn.make_task(flags)
    task.loss = loss
    return task

sys.exit(troupe.run(make_task, flags=fmnist_cnn.FLAGS))
'''

if __name__ == "__main__":
    unittest.main()
