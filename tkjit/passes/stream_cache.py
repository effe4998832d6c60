"""stream-cols' cache (``cache=shared`` / ``auto``): which loaded tiles a later pass reads again, and
how many of their first chunks the budget keeps in shared memory (``cache_plan``)."""
from __future__ import annotations

from ..ir.core import Op
from ..ir.ops import Load
from ..ir.types import TileType
from .stream_plan import StreamPlan

CACHE_BYTES = 160 * 1024
"""The most bytes of whole row blocks ``cache=shared`` keeps in shared memory (of the 227 KB a
block may use: the chunk loops' store staging and the reductions' scratch need the rest)."""
AUTO_REREAD_WARPS = 8
AUTO_REREAD_STAGES = 4
"""What ``cache=auto`` takes when the row block is over its budget and later chunks are read again
(with ``reduce=tile``): the best of the options measured at D = 4096 / 8192 (docs/codegen.md)."""
AUTO_CACHE_BYTES = 64 * 1024
"""The cache budget ``cache=auto`` takes (three 64 KB blocks fit one SM's shared memory)."""
CACHED_CHUNK_BYTES = 16 * 1024
"""The most bytes of one chunk tile under ``cache=auto`` (16 x 256 f32 for BR = 16): the passes
read their chunks from shared memory, so a narrow chunk costs no extra global load, and its
registers are few."""


def cache_plan(plan: StreamPlan, budget: int) -> tuple[list[Op], int, str]:
    """The wide tile loads ``cache=shared`` keeps in shared memory (those more than one pass
    reads), how many chunks of each from the first (as many as budget holds; the rest are
    re-read), and why."""
    phases_of = {}
    for op in plan.body.ops:  # the passes that need a load: those of every op its value reaches
        if isinstance(op, Load) and op.result in plan.wide and isinstance(op.result.type, TileType):
            seen, todo, ph = set(), [op], set()
            while todo:
                o = todo.pop()
                if o in seen:
                    continue
                seen.add(o)
                ph.add(plan.phase.get(o, 0))
                todo += [u for u in plan.body.ops if any(v in plan.wide and v.owner is o for v in u.operands)]
            phases_of[op] = ph
    reread = [op for op, ph in phases_of.items() if len(ph) > 1]
    if not reread:
        return [], 0, "no pass re-reads a loaded tile"
    last = [op.operands[0].type.dims[-1] for op in reread]
    if any(not isinstance(d, int) or d % plan.width for d in last):
        return [], 0, "a re-read tensor's rows are not a constant multiple of the width: its chunks have padding columns"
    n = plan.width // plan.chunk
    per_chunk = sum(op.result.type.rows * plan.chunk * op.operands[0].type.dtype.nbytes for op in reread)
    chunks = min(n, budget // per_chunk)
    if chunks == 0:
        return [], 0, f"one chunk of the re-read row blocks takes {per_chunk:,} B, over the {budget:,} B kept"
    if chunks == n:
        return reread, n, f"{per_chunk * n:,} B of row blocks kept in shared memory for the passes that re-read them"
    return reread, chunks, (f"the row blocks take {per_chunk * n:,} B, so the first {chunks} of {n} chunks "
                            f"({per_chunk * chunks:,} B, within {budget:,} B) are kept in shared memory and "
                            "the rest are read again (the backward passes start with them: L2 likely still holds them)")
