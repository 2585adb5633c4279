"""troupe.Table: an embedding table that lives on Troupe's parameter service.

A model holds Tables as modules and looks rows up by id in its forward pass, as it would an
nn.Embedding; but a Table is not a parameter of the model. Its rows are created on first use
on the servers' buckets (values uniform in [-init_scale, init_scale]), a step pulls only the
rows its batch names (TorchTask's `ids`), and their gradients are pushed back to the buckets,
asynchronously. Tables need --mode ps or --mode hybrid (the dense parameters on allreduce).
"""
import torch

from troupe import _native


class Table(torch.nn.Module):
    """Rows of `dim` float32 values keyed by 64-bit ids (0 <= id < 2**63 from Python).

    name:       the table's name, unique in the model (it names the table in logs and buckets).
    dim:        values per row.
    init_scale: a new row's values are uniform in [-init_scale, init_scale], drawn from
                (the job's seed, the table, the id): every bucket creates the same row.
    capacity:   the most rows the job keeps: without eviction, rows beyond it are refused (the
                memory bound); with it, the table keeps to about this many.
    evict:      "none", "lru" (drop the least recently read rows), "lfu" (the least often
                read) or "ttl:SECONDS" (rows not read for SECONDS, and the least recently read
                when full). An evicted id that comes back starts again from its initial value.
    admit_after: an id gets a row from its admit_after-th read on (1 to 255); before that it
                reads as its initial value and its gradients are dropped.
    dtype:      "fp32" (rows of 16-bit values, "bf16", are not built yet: it raises).

    table(ids) returns a tensor of shape ids.shape + (dim,); ids must be among the ones the
    task named for the batch (TorchTask's `ids`), or it raises KeyError.
    """

    def __init__(self, name, dim, init_scale=0.01, capacity=1 << 22, evict="none",
                 admit_after=1, dtype="fp32"):
        super().__init__()
        if not isinstance(name, str) or not name:
            raise ValueError("troupe.Table: the name must be a non-empty string")
        if int(dim) < 1:
            raise ValueError(f"troupe.Table '{name}': dim must be at least 1, not {dim}")
        if not float(init_scale) >= 0.0 or float(init_scale) == float("inf"):
            raise ValueError(f"troupe.Table '{name}': init_scale must be finite and >= 0")
        if int(capacity) < 1:
            raise ValueError(f"troupe.Table '{name}': capacity must be at least 1")
        if not isinstance(evict, str) or not _native.is_eviction(evict):
            raise ValueError(f"troupe.Table '{name}': evict must be 'none', 'lru', 'lfu' or "
                             f"'ttl:SECONDS', not {evict!r}")
        if not 1 <= int(admit_after) <= 255:
            raise ValueError(f"troupe.Table '{name}': admit_after must be in [1, 255]")
        if dtype != "fp32":
            raise ValueError(f"troupe.Table '{name}': dtype {dtype!r} is not built; rows are "
                             "'fp32' (bf16 rows are not built yet)")
        self.name = name
        self.dim = int(dim)
        self.init_scale = float(init_scale)
        self.capacity = int(capacity)
        self.evict = evict
        self.admit_after = int(admit_after)
        self.dtype = dtype
        self._ids = None  # the sorted unique ids of the rows this pass may read (int64)
        self._rows = None  # their values, len(_ids) x dim; a leaf whose grad is the rows'

    def spec(self):
        """(name, dim, init_scale, capacity, evict, admit_after): Troupe's table_spec."""
        return (self.name, self.dim, self.init_scale, self.capacity, self.evict,
                self.admit_after)

    def hold(self, ids, rows):
        """Makes `rows` (len(ids) x dim, ids sorted and unique) the rows this table reads."""
        self._ids, self._rows = ids, rows

    def release(self):
        self._ids, self._rows = None, None

    def forward(self, ids):
        if self._rows is None:
            raise RuntimeError(f"troupe.Table '{self.name}': no rows were pulled for this pass "
                               "(a Table is read only inside a Troupe step or evaluation)")
        flat = torch.as_tensor(ids).reshape(-1).to(torch.int64)
        held = self._ids
        at = torch.searchsorted(held, flat).clamp(max=max(len(held) - 1, 0))
        if len(held) == 0 and len(flat) or len(held) and not bool((held[at] == flat).all()):
            missing = flat[held[at] != flat] if len(held) else flat
            raise KeyError(f"troupe.Table '{self.name}': ids {missing[:5].tolist()} were not "
                           "named by the task's ids() for this batch")
        return self._rows[at].reshape(*torch.as_tensor(ids).shape, self.dim)


def tables_of(module):
    """The Tables of `module`, in modules() order; their names must be unique."""
    tables = [m for m in module.modules() if isinstance(m, Table)]
    names = [t.name for t in tables]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"TorchTask: two troupe.Tables are named '{name}'")
    return tables


def read_deltas(dir):
    """Every table a job wrote to --export-dir `dir`, as of the last complete files:
    {table: (ids, values)}, ids a sorted uint64 numpy array, values float32 of shape
    (len(ids), dim). Raises ValueError when `dir` cannot be read. A serving process that
    follows training polls a DeltaFollower instead (docs/tables.md)."""
    return _native.read_deltas(str(dir))


class DeltaFollower:
    """Follows a job's --export-dir: poll() applies the files that appeared since the last
    poll (and returns how many), tables() is {table: (ids, values)} as of them."""

    def __init__(self, dir):
        self._follower = _native.DeltaFollower(str(dir))

    def poll(self):
        return self._follower.poll()

    def tables(self):
        return self._follower.tables()
