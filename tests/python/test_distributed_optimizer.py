"""troupe.DistributedOptimizer and troupe.elastic: a data-parallel loop of one's own.

In one process (a group of one): the optimizer steps exactly as the plain one, and a step whose
gradient has NaN changes nothing. In several processes, the elastic_loop example: a driver and
two loops; a third joins once the first has committed 10 steps (the group re-forms to 3); once
the third has committed a step, the second is killed (kill -9; the group re-forms to 2); the
loops carry on to the end with the same parameters (checksums), and every epoch's examples were
used once (the commits' positions follow each other by size x batch). Each act waits for a log
line, on a job with a floor under each step (--step-delay-ms), never for a time."""
import math
import os
import re
import tempfile
import unittest
import warnings

import torch
from torch import nn

import troupe
from processes import grow_then_lose

EXAMPLES = os.environ.get("TROUPE_EXAMPLES", "")
LOOP = os.path.join(EXAMPLES, "elastic_loop.py")
SECRET = "a-long-random-secret-for-tests"
TRAIN, BATCH, EPOCHS = 4000, 32, 2


COMMIT = re.compile(r"commit epoch (\d+) position (\d+) size (\d+) generation (\d+)")


def commits(*outputs):
    """(epoch, position) -> size, over every loop's committed steps."""
    seen = {}
    for text in outputs:
        for epoch, position, size, _ in COMMIT.findall(text):
            seen[(int(epoch), int(position))] = int(size)
    return seen


class InOneProcess(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.group = troupe.elastic.GroupService(listen="127.0.0.1:0", min_size=1, secret=SECRET)
        troupe.elastic.init(cls.group.address, secret=SECRET)

    @classmethod
    def tearDownClass(cls):
        troupe.elastic.shutdown()
        cls.group.stop()

    def test_a_group_of_one_steps_as_the_plain_optimizer(self):
        torch.manual_seed(3)
        model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        twin = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        twin.load_state_dict(model.state_dict())
        opt = troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          model.named_parameters(), bucket_mb=0.00001)
        plain = torch.optim.SGD(twin.parameters(), lr=0.1)
        self.assertGreater(len(opt.buckets), 1)
        state = troupe.elastic.State(model, opt, step=0)

        @troupe.elastic.run
        def train(state):
            x = torch.randn(8, 4, generator=torch.Generator().manual_seed(5))
            for _ in range(3):  # the first step learns the hooks; the others overlap
                for net, o in ((model, opt), (twin, plain)):
                    o.zero_grad()
                    net(x).square().sum().backward()
                    o.step()
                state.step += 1
                state.commit()
            return state.step

        self.assertEqual(train(state), 3)
        for a, b in zip(model.parameters(), twin.parameters()):
            self.assertTrue(torch.allclose(a, b, atol=1e-6))
        self.assertEqual(troupe.elastic.size(), 1)

    def test_zero_stage_0_is_taken_and_a_sharded_stage_refused_saying_why(self):
        model = nn.Linear(4, 2)
        opt = troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          model.named_parameters(), zero_stage=0)
        self.assertEqual(len(opt.params), 2)
        for stage in (1, 2):
            with self.assertRaisesRegex(ValueError, f"zero_stage={stage} is not built yet"):
                troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                            model.named_parameters(), zero_stage=stage)
        with self.assertRaisesRegex(ValueError, "must be 0, 1 or 2"):
            troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        model.named_parameters(), zero_stage=3)

    def test_a_non_finite_gradient_changes_nothing(self):
        model = nn.Linear(2, 1)
        before = [p.detach().clone() for p in model.parameters()]
        opt = troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          model.named_parameters())
        troupe.elastic.run(lambda state: None)(troupe.elastic.State())
        (model(torch.tensor([[math.nan, 1.0]])).sum()).backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
        self.assertTrue(any("NaN or Inf" in str(w.message) for w in caught))
        for a, b in zip(model.parameters(), before):
            self.assertTrue(torch.equal(a, b))


class Elastic(unittest.TestCase):
    def test_loops_go_on_as_members_join_and_are_lost(self):
        flags = ["--epochs", str(EPOCHS), "--batch", str(BATCH), "--train-limit", str(TRAIN),
                 "--test-limit", "500", "--step-delay-ms", "30", "--timeout", "20"]
        with tempfile.TemporaryDirectory() as tmp:
            a, b, c = grow_then_lose(self, LOOP, flags, tmp, SECRET, first_commits=10)
            done_a = re.search(r"done: checksum (\S+)", a.output())
            done_c = re.search(r"done: checksum (\S+)", c.output())
            self.assertEqual(done_a.group(1), done_c.group(1))
            self.assertIn("size 2", a.output().split("size 3")[-1])  # back to two after the kill
            seen = commits(a.output(), b.output(), c.output())
            for epoch in range(EPOCHS):
                position, walked = 0, set()
                while position < TRAIN:  # each step's examples follow the last one's
                    self.assertIn((epoch, position), seen, f"epoch {epoch}: a gap at {position}")
                    walked.add(position)
                    position += seen[(epoch, position)] * BATCH
                # and no commit started anywhere else (no example used twice)
                self.assertEqual({p for e, p in seen if e == epoch}, walked)


if __name__ == "__main__":
    unittest.main()
