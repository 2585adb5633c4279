"""troupe.DistributedOptimizer and troupe.elastic: a data-parallel loop of one's own.

In one process (a group of one): the optimizer steps exactly as the plain one, and a step whose
gradient has NaN changes nothing; with sharded state (zero_stage 1 and 2) it steps alike, each
parameter owned by one member. In several processes, the elastic_loop example: sharded state
takes zero_stage 0's steps bit for bit (Adam, two loops); and a driver and
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
from processes import Process, grow_then_lose

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

    def beside_plain(self, optimizer_class, zero_stage=0):
        """A model stepped 3 times by DistributedOptimizer (in a group of one, each step
        committed) beside its twin stepped by the plain optimizer; the two models agree.
        Returns (model, optimizer, state)."""
        torch.manual_seed(3)
        model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        twin = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        twin.load_state_dict(model.state_dict())
        opt = troupe.DistributedOptimizer(optimizer_class(model.parameters(), lr=0.1),
                                          model.named_parameters(), bucket_mb=0.00001,
                                          zero_stage=zero_stage)
        plain = optimizer_class(twin.parameters(), lr=0.1)
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
        return model, opt, state

    def test_a_group_of_one_steps_as_the_plain_optimizer(self):
        self.beside_plain(torch.optim.SGD)
        self.assertEqual(troupe.elastic.size(), 1)

    def test_sharded_stages_in_a_group_of_one_step_as_the_plain_optimizer(self):
        # one member owns every parameter: Adam's state is all its own, stepped as the plain one
        for stage in (1, 2):
            with self.subTest(zero_stage=stage):
                model, opt, state = self.beside_plain(torch.optim.Adam, stage)
                self.assertEqual(len(opt.state), 4)  # every parameter's state, as its owner's
                self.assertEqual(set(opt.state_dict()["state"]), {n for n, _ in
                                                                   model.named_parameters()})
                # Cut anew from the commit (as after a re-form), then stepped: the commit
                # itself stays as it was.
                committed = state._committed["optimizer"]["state"]
                before = {n: e["exp_avg"].clone() for n, e in committed.items()}
                opt._after_sync(state._committed["optimizer"], state.commits)
                opt.zero_grad()
                model(torch.ones(2, 4)).sum().backward()
                opt.step()
                for n, e in committed.items():
                    self.assertTrue(torch.equal(e["exp_avg"], before[n]), n)
                opt.param_groups[0]["lr"] = 0.5  # the hyper-parameters come back with a commit
                state.restore()
                self.assertEqual(opt.param_groups[0]["lr"], 0.1)
                with self.assertRaisesRegex(ValueError, "its own state_dict"):
                    opt.load_state_dict(torch.optim.Adam(model.parameters()).state_dict())

    def test_each_parameter_has_one_owner_and_the_values_are_spread(self):
        params = [torch.zeros(n) for n in (100, 10, 60, 50, 5)]
        self.assertEqual(troupe.zero.owners(params, 1), [0] * 5)
        owners = troupe.zero.owners(params, 2)
        self.assertEqual(owners, [0, 0, 1, 1, 0])  # 100 + 10 + 5 | 60 + 50
        self.assertEqual(troupe.zero.owners(params, 3), [0, 2, 1, 2, 1])

    def test_a_zero_stage_other_than_0_1_or_2_is_refused(self):
        model = nn.Linear(4, 2)
        opt = troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          model.named_parameters(), zero_stage=0)
        self.assertEqual(len(opt.params), 2)
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


def two_loops(test, flags, tmp):
    """The elastic_loop example as a driver and two loops with `flags`, run to their end; their
    outputs."""
    driver = Process(LOOP, ["--serve", "127.0.0.1:0", "--min-size", "2"],
                     os.path.join(tmp, "driver.log"), SECRET)
    try:
        test.assertTrue(driver.wait_for(r"serving at \S+"), driver.output())
        address = re.search(r"serving at (\S+)", driver.output()).group(1)
        loops = [Process(LOOP, ["--join", address, *flags], os.path.join(tmp, f"{n}.log"), SECRET)
                 for n in ("a", "b")]
        for loop in loops:
            test.assertEqual(loop.finish(), 0, loop.output())
        return [loop.output() for loop in loops]
    finally:
        driver.stop()


class Elastic(unittest.TestCase):
    def test_sharded_state_takes_the_steps_of_whole_state(self):
        # Adam over two loops: each member steps the parameters it owns and the values are
        # gathered (exactly), so the parameters are those of zero_stage 0, bit for bit.
        flags = ["--epochs", "1", "--batch", str(BATCH), "--train-limit", "1600",
                 "--test-limit", "200", "--optimizer", "adam", "--lr", "0.01", "--timeout", "20",
                 "--hidden", "64,32"]
        sums = {}
        for stage in ("0", "1", "2"):
            with tempfile.TemporaryDirectory() as tmp:
                a, b = two_loops(self, [*flags, "--zero-stage", stage], tmp)
            done = [re.search(r"done: checksum (\S+) .* state of (\d+)", out) for out in (a, b)]
            self.assertEqual(done[0].group(1), done[1].group(1), stage)
            sums[stage] = done[0].group(1)
            held = [int(d.group(2)) for d in done]  # of the MLP's 6 parameters
            self.assertEqual(held, [6, 6] if stage == "0" else [held[0], 6 - held[0]], held)
            self.assertTrue(0 < held[0] < 6 or stage == "0", held)
        self.assertEqual(sums["1"], sums["0"])
        self.assertEqual(sums["2"], sums["0"])

    def test_sharded_loops_go_on_as_members_join_and_are_lost(self):
        # zero_stage=2 with Adam: the third loop's arrival cuts the shards anew (each handed to
        # its new owner); the second's loss takes its shard with it, whose parameters' state
        # starts again, with a warning; the two left end with the same parameters.
        with tempfile.TemporaryDirectory() as tmp:
            a, _, c = self.grow_then_lose(tmp, ["--optimizer", "adam", "--lr", "0.005",
                                                "--zero-stage", "2"])
            accuracy = re.search(r"done: checksum \S+ accuracy (\S+)", a.output()).group(1)
            self.assertGreater(float(accuracy), 0.7, a.output()[-2000:])
            lost = "left with a member that was lost; it starts again"
            self.assertTrue(lost in a.output() or lost in c.output(), c.output()[-3000:])

    def grow_then_lose(self, tmp, more=()):
        """processes.grow_then_lose with the elastic_loop example and `more` flags; the first
        and third loops end with the same parameters, the group back to two after the kill."""
        flags = ["--epochs", str(EPOCHS), "--batch", str(BATCH), "--train-limit", str(TRAIN),
                 "--test-limit", "500", "--step-delay-ms", "30", "--timeout", "20", *more]
        a, b, c = grow_then_lose(self, LOOP, flags, tmp, SECRET, first_commits=10)
        done_a = re.search(r"done: checksum (\S+)", a.output())
        done_c = re.search(r"done: checksum (\S+)", c.output())
        self.assertEqual(done_a.group(1), done_c.group(1))
        self.assertIn("size 2", a.output().split("size 3")[-1])  # back to two after the kill
        return a, b, c

    def test_loops_go_on_as_members_join_and_are_lost(self):
        with tempfile.TemporaryDirectory() as tmp:
            a, b, c = self.grow_then_lose(tmp)
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
