"""troupe.ParameterService and troupe.ParameterClient: a loop of one's own on the parameter
service. In one process: pulls into a module, pushes its gradients (SGD applied exactly),
staleness, and bad input refused with nothing sent. In three processes, the ps_loop example,
asynchronous: a serving process and two loops that join once it says it serves (a log line,
not a time). A wrong secret refused. On three server processes with two copies of each bucket,
a server killed mid-loop: the loop goes on, every push applied once. Run by ctest (python_parameter_client_test) with the
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
from processes import Process, free_port

EXAMPLES = os.environ.get("TROUPE_EXAMPLES", "")
PS_LOOP = os.path.join(EXAMPLES, "ps_loop.py")
SECRET = "a-long-random-secret-for-tests"
SERVER = (os.path.join(os.environ.get("TROUPE_BIN", ""), "troupe-fmnist"),)


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

    def test_a_model_five_times_a_messages_cap_is_cut_into_buckets(self):
        # 784-4096-4096-10: 20 M parameters, 80 MB; the codec caps a message at 16 MiB.
        def wide():
            torch.manual_seed(2)
            return nn.Sequential(nn.Linear(784, 4096), nn.Linear(4096, 4096), nn.Linear(4096, 10))
        model = wide()
        start = torch.nn.utils.parameters_to_vector(model.parameters()).clone()
        with troupe.ParameterService(model, clients=1, optimizer="sgd", lr=0.5) as service:
            client, copy = service.client(0), wide()
            with torch.no_grad():
                for p in copy.parameters():
                    p.zero_()
            self.assertGreaterEqual(len(client.pull(copy).clocks), 20)  # a clock per bucket
            self.assertTrue(torch.equal(torch.nn.utils.parameters_to_vector(copy.parameters()),
                                        start))
            for p in copy.parameters():
                p.grad = torch.ones_like(p)
            self.assertEqual(client.push(copy), 0)
            client.pull(copy)
            self.assertTrue(torch.equal(torch.nn.utils.parameters_to_vector(copy.parameters()),
                                        start - 0.5))

    def test_a_tensor_whose_rows_outgrow_a_message_is_cut_inside_them(self):
        torch.manual_seed(4)
        wide = torch.randn(2, 5 << 20)  # each row 20 MiB, over the codec's 16 MiB cap
        with troupe.ParameterService({"wide": wide, "b": torch.zeros(3)}, clients=1,
                                     optimizer="sgd", lr=0.5) as service:
            client = service.client(0)
            got = client.pull()
            self.assertGreaterEqual(len(got.clocks), 10)  # buckets of 1 Mi values
            self.assertTrue(np.array_equal(got.values[:wide.numel()], wide.reshape(-1).numpy()))
            self.assertEqual(client.push(np.ones(wide.numel() + 3, np.float32)), 0)
            after = client.pull().values
            self.assertTrue(np.allclose(after[:wide.numel()], wide.reshape(-1).numpy() - 0.5))

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

    def test_a_service_and_client_left_alive_at_exit_end_with_the_process(self):
        """Nothing stopped by hand: they end before the process's actor system does, and the
        process exits with the script's own code, its system not left behind."""
        script = """
import sys
from torch import nn
import troupe
model = nn.Linear(4, 2)
service = troupe.ParameterService(model, clients=1, optimizer="sgd", lr=0.05,
                                  listen="127.0.0.1:0")
client = service.client(0)
client.pull(model)
print("left alive at exit", flush=True)
sys.exit(3)
"""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "alive.py")
            with open(path, "w") as f:
                f.write(script)
            alive = Process(path, [], os.path.join(tmp, "alive.log"), SECRET)
            self.assertEqual(alive.finish(), 3, alive.output())
            self.assertIn("left alive at exit", alive.output())
            self.assertNotIn("did not shut down", alive.output())

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


class OnServers(unittest.TestCase):
    def test_a_killed_server_s_backups_take_over_and_the_loop_goes_on(self):
        at = f"127.0.0.1:{free_port()}"
        model = tiny()
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        with tempfile.TemporaryDirectory() as folder:
            servers = [Process(SERVER, ["--role", "server", "--coordinator", at, "--listen",
                                        "127.0.0.1:0", "--name", f"s{i}"],
                               os.path.join(folder, f"s{i}.log"), SECRET) for i in range(3)]
            try:
                with troupe.ParameterService(model, clients=1, optimizer="sgd", lr=1.0,
                                             buckets=3, listen=at, secret=SECRET, servers=3,
                                             replication=2) as service:
                    client = service.client(0)
                    for _ in range(3):
                        client.pull()
                        client.push(np.ones(11, np.float32))
                    self.assertEqual(client.routes, ["lane"] * 3)
                    servers[0].stop()  # killed: its primary's backup takes over
                    for _ in range(3):
                        client.pull()
                        client.push(np.ones(11, np.float32))
                    after = client.pull()
                    np.testing.assert_array_equal(after.values, np.full(11, -6, np.float32))
                for s in servers[1:]:  # stopped by the service's coordinator
                    self.assertEqual(s.finish(), 0, s.output())
            finally:
                for s in servers:
                    s.stop()

    def test_a_service_on_servers_needs_an_address_to_be_joined_at(self):
        with self.assertRaisesRegex(ValueError, "listen="):
            troupe.ParameterService(tiny(), clients=1, servers=2)


if __name__ == "__main__":
    unittest.main()
