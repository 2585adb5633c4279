"""Hooks that say when a parameter's gradient has been accumulated in a backward pass: what
tells Troupe a tensor is final (TorchTask's overlap, DistributedOptimizer's buckets)."""


def on_accumulated(params, callback):
    """Calls callback(i) each time parameter i's gradient is accumulated. On torch 2.1 and
    later, post-accumulate-grad hooks; before, a hook on each parameter's AccumulateGrad node
    (kept in the returned list: the hook lives as long as it does)."""
    keep = []
    for i, p in enumerate(params):
        if hasattr(p, "register_post_accumulate_grad_hook"):
            keep.append(p.register_post_accumulate_grad_hook(lambda _p, i=i: callback(i)))
        else:
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(lambda *_, i=i: callback(i))
            keep.append(accumulator)
    return keep
