"""troupe.ParameterService and troupe.ParameterClient: a loop of one's own on the parameter
service. In one process: pulls into a module, pushes its gradients (SGD applied exactly),
staleness, and bad input refused with nothing sent. In three processes, the ps_loop example,
asynchronous: a serving process and two loops that join once it says it serves (a log line,
not a time). A wrong secret refused. Run by ctest (python_parameter_client_test) with the
build's package and the examples on PYTHONPATH."""
import math
import os
import re
import tempfile
import unittest

import numpy as np
import torch
from torch import nn

import troupe
from processes import Process

EXAMPLES = os.environ.get("TROUPE_EXAMPLES", "")
PS_LOOP = os.path.join(EXAMPLES, "ps_loop.py")
SECRET = "a-long-random-secret-for-tests"


def tiny():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))


class InOneProcess(unittest.TestCase):
    def test_a_pushed_gradient_is_applied_by_the_service_optimizer(self):
        model = tiny()
        start = {k: v.clone() for k, v in model.state_dict().items()}
        with troupe.ParameterService(model, clients=2, optimizer="sgd", lr=0.5) as service:
            mine, other = service.client(0), service.client(1)
            copy = tiny()
            with torch.no_grad():
                for p in copy.parameters():
                    p.zero_()
            mine.pull(copy)
            for k, v in copy.state_dict().items():
                self.assertTrue(torch.equal(v, start[k]), k)
            copy(torch.ones(4, 3)).sum().backward()
            grads = {k: p.grad.clone() for k, p in copy.named_parameters()}
            other.pull()
            self.assertEqual(other.push(np.zeros(11, np.float32)), 0)
            staleness = mine.push(copy)  # read before the other's push: one update since
            self.assertEqual(staleness, 1)
            self.assertEqual(mine.pushes, 1)
            after = mine.pull(copy)
            for k, p in copy.named_parameters():
                self.assertTrue(torch.allclose(p, start[k] - 0.5 * grads[k]), k)
            self.assertEqual(after.values.dtype, np.float32)
            self.assertEqual(len(after.clocks), 1)

    def test_bad_input_is_refused_and_changes_nothing(self):
        model = tiny()
        with troupe.ParameterService(model, clients=1, optimizer="sgd", lr=0.5) as service:
            client = service.client(0)
            with self.assertRaisesRegex(ValueError, "before any pull"):
                client.push(model)
            before = client.pull().values.copy()
            with self.assertRaisesRegex(ValueError, "do not match"):
                client.pull(nn.Linear(3, 2))
            with self.assertRaises(ValueError):
                client.push(np.zeros(4, np.float32))
            with self.assertRaisesRegex(ValueError, "NaN"):
                client.push(np.full(11, math.nan, np.float32))
            self.assertEqual(client.pushes, 0)
            self.assertTrue(np.array_equal(client.pull().values, before))
            with self.assertRaisesRegex(ValueError, "client 1 of a service for 1"):
                service.client(1)
        with self.assertRaises(ValueError):
            troupe.ParameterService(model, clients=1, consistency="sometimes")


def loop(args, log):
    return Process(PS_LOOP, args, log, SECRET)


class InTwoProcesses(unittest.TestCase):
    LOOP = ["--epochs", "2", "--train-limit", "4000", "--test-limit", "1000", "--lr", "0.1"]

    def test_two_plain_loops_train_one_model_asynchronously(self):
        with tempfile.TemporaryDirectory() as tmp:
            server = loop(["--serve", "127.0.0.1:0", "--clients", "2", *self.LOOP],
                          os.path.join(tmp, "server.log"))
            serving = server.wait_for(r"serving at (\S+)")
            self.assertIsNotNone(serving, server.output())
            loops = [loop(["--join", serving.group(1), "--client", str(k), "--clients", "2",
                           *self.LOOP], os.path.join(tmp, f"client{k}.log")) for k in (0, 1)]
            for k, client in enumerate(loops):
                self.assertEqual(client.finish(), 0, client.output())
                self.assertIn(f"client {k} epoch 2", client.output())
                self.assertIn("routes ['lane']", client.output())  # the server's data lane
            self.assertEqual(server.finish(), 0, server.output())
            accuracy = float(re.search(r"test accuracy (\S+)", server.output()).group(1))
            self.assertGreater(accuracy, 0.6, server.output())

    def test_a_wrong_secret_is_refused(self):
        model = tiny()
        with troupe.ParameterService(model, clients=1, listen="127.0.0.1:0",
                                     secret=SECRET) as service:
            with self.assertRaises(PermissionError):
                troupe.ParameterClient(service.address, client=0, secret="not-" + SECRET,
                                       timeout=5)
            client = troupe.ParameterClient(service.address, client=0, secret=SECRET)
            client.pull()
            self.assertEqual(client.routes, ["in-process"])  # this process serves it
            self.assertEqual(client.tensors, [("0.weight", (2, 3)), ("0.bias", (2,)),
                                              ("1.weight", (1, 2)), ("1.bias", (1,))])


if __name__ == "__main__":
    unittest.main()
