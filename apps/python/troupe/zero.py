"""Sharded optimizer state for troupe.DistributedOptimizer (zero_stage=1 and 2), as PyTorch's
ZeroRedundancyOptimizer shards it: each parameter is owned by one member of the generation
(whole tensors, spread by size); a member's wrapped optimizer steps, and keeps state for, only
the parameters it owns, and the new values are then gathered to every member. For
DistributedOptimizer and troupe.elastic.State only.

When the group re-forms, ownership is cut anew. Every member that holds its shard of the agreed
commit hands it to the others (one member at a time, over the group's sync), and each keeps the
entries of the parameters it owns now. A shard that left with a lost member is gone: the
optimizer state of its parameters starts again (from zero moments), with a warning, as no
member keeps a copy of another's.
"""
import io
import warnings

import torch

from . import elastic

# Tags of the gathers' reductions (the gradients' use 0, 1, ... per bucket).
GATHER_TAG = 1 << 20


def _copied(entry):
    """A state entry (a parameter's: step, exp_avg, ...) with its tensors cloned."""
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in entry.items()}


def owners(params, size):
    """The member that owns each parameter in a generation of `size`: the largest first, each
    to the member that owns the fewest values so far (the lowest rank among equals)."""
    load = [0] * size
    out = [0] * len(params)
    for i in sorted(range(len(params)), key=lambda i: (-params[i].numel(), i)):
        r = min(range(size), key=lambda r: (load[r], r))
        out[i] = r
        load[r] += params[i].numel()
    return out


# Buckets of a gather in flight at once: each holds a bucket's values twice (here and in the
# reduction), so a few in flight keep the gather's memory to a few buckets.
GATHER_WINDOW = 2


def gather(opt, generation, owned):
    """Every member's new values of the parameters it owns, to every member: each bucket summed
    over the group with the values a member owns and zeros elsewhere (exact: one member adds
    each value), GATHER_WINDOW buckets in flight. MembershipChanged if the group re-formed."""
    in_flight = []

    def take_oldest():
        values, pending, members = in_flight.pop(0)
        try:
            pending.wait(opt.timeout)  # (the sums are written back into `values`)
        except RuntimeError as e:
            raise elastic.MembershipChanged(str(e)) from None
        flat = torch.from_numpy(values)
        offset = 0
        with torch.no_grad():
            for i in members:
                p = opt.params[i]
                n = p.numel()
                if not owned[i]:
                    p.copy_(flat[offset:offset + n].view_as(p).to(p.dtype))
                offset += n

    for b, members in enumerate(opt.buckets):
        parts = [opt.params[i].detach().reshape(-1).to(torch.float32).cpu() if owned[i]
                 else torch.zeros(opt.params[i].numel(), dtype=torch.float32)
                 for i in members]
        values = torch.cat(parts).numpy()
        del parts
        in_flight.append((values, elastic.member().reduce(generation, values, GATHER_TAG + b),
                          members))
        if len(in_flight) >= GATHER_WINDOW:
            take_oldest()
    while in_flight:
        take_oldest()


def shard_of(opt):
    """What this member's commit keeps of the optimizer: its shard (state by parameter name),
    the ranks that owned each parameter then, and its own rank then."""
    by_param = {p: n for n, p in zip(opt.names, opt.params)}
    state = {by_param[p]: _copied(s) for p, s in opt.optimizer.state.items() if p in by_param}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.optimizer.param_groups]
    size = elastic.size()
    return {"state": state, "groups": groups,
            "owners": dict(zip(opt.names, owners(opt.params, size))),
            "rank": elastic.rank(), "size": size}


def load_shard(opt, shard):
    """This member's shard_of() back into the wrapped optimizer (its hyper-parameters too)."""
    if not isinstance(shard, dict) or "owners" not in shard or "state" not in shard:
        raise ValueError("a DistributedOptimizer with zero_stage 1 or 2 loads its own "
                         "state_dict() (its shard, by parameter name), not a whole optimizer's")
    by_name = dict(zip(opt.names, opt.params))
    opt.optimizer.state.clear()
    for name, entry in shard["state"].items():
        if name in by_name:
            opt.optimizer.state[by_name[name]] = _copied(entry)
    for group, saved in zip(opt.optimizer.param_groups, shard.get("groups", [])):
        group.update(saved)


def reshard(opt, mine, commits):
    """After the members agreed on a commit (`commits` of them): `mine` is this member's shard
    of it (shard_of), or None when it took another member's commit (it holds no shard of it).
    Each member in turn hands its shard to the others; this member keeps the entries of the
    parameters it owns in the current generation. Returns the names whose state was lost."""
    rank, size = elastic.rank(), elastic.size()
    now = owners(opt.params, size)
    index = {n: i for i, n in enumerate(opt.names)}
    kept = {}
    senders, old_owners = set(), {}
    for k in range(size):
        data = b""
        if k == rank and mine is not None:
            buffer = io.BytesIO()
            torch.save(mine, buffer)
            data = buffer.getvalue()
        try:
            _, _, got = elastic.member().sync(elastic.generation(), 1 if k == rank else 0, data,
                                              float(opt.timeout))
        except RuntimeError as e:
            raise elastic.MembershipChanged(str(e)) from None
        shard = mine if k == rank else (torch.load(io.BytesIO(got), weights_only=False)
                                       if got else None)
        if not shard:
            continue
        senders.add(shard["rank"])
        old_owners.update(shard["owners"])
        for name, entry in shard["state"].items():
            if name in index and now[index[name]] == rank:  # (mine is the commit's: copied)
                kept[name] = _copied(entry) if k == rank else entry
    opt.optimizer.state.clear()
    for name, entry in kept.items():
        opt.optimizer.state[opt.params[index[name]]] = entry
    if commits == 0:
        return []
    return [n for i, n in enumerate(opt.names)
            if now[i] == rank and n not in kept and old_owners.get(n, -1) not in senders]


def warn_lost(names):
    if names:
        some = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        warnings.warn(f"troupe.DistributedOptimizer: the optimizer state of {len(names)} "
                      f"parameter{'s' if len(names) > 1 else ''} ({some}) left with a member "
                      "that was lost; it starts again")
