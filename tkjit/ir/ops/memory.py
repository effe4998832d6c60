"""Data movement: global ↔ tile loads and stores, and copies between shared and registers."""
from __future__ import annotations

from ..core import Op
from ..types import (I32, GlobalType, ScalarType, TileType, Type, VectorType, describe)


def _check_coords(op: Op, g: Type, coords, value_t: Type, verb: str) -> None:
    if not isinstance(g, GlobalType):
        raise op.error(f"{verb} needs a global tensor, got {describe(g)}")
    for i, c in enumerate(coords):
        if c.type != ScalarType(I32):
            raise op.error(f"coordinate {i} expected i32, got {describe(c.type)}")
    if len(coords) != g.rank:
        raise op.error(f"{g} has {g.rank} dimensions, so it takes {g.rank} tile coordinates, "
                       f"got {len(coords)}")
    if isinstance(value_t, TileType) and g.rank < 2:
        raise op.error(f"a 2-D tile needs a global of rank 2 or more, got {g}")
    if not isinstance(value_t, (TileType, VectorType)):
        raise op.error(f"expected a tile or vector, got {describe(value_t)}")
    if not value_t.dtype.is_float:
        raise op.error(f"tiles hold floats, got {value_t.dtype}")
    if (isinstance(value_t, TileType) and value_t.space == "st") and value_t.dtype != g.dtype:
        raise op.error(f"a shared tile copies bytes: its dtype {value_t.dtype} must be the "
                       f"tensor's {g.dtype} (load into a register tile to convert)")


class Load(Op):
    """``%a = load %A, %m, %k : st<bf16>[128, 64]`` — the tile at tile coordinates (m, k).

    A tile covers the last two dimensions (a vector the last one); earlier coordinates are plain
    indices. Elements outside the tensor are padding: zero, never reduced or stored.
    Set by smem-plan for shared tiles: ``smem`` (byte offset; stage 0's in a pipelined loop) and,
    for a load outside any loop, ``bars`` (offset of its mbarrier words). Set by the pipeline pass
    on a load outside any loop of a persistent block loop: ``slots`` (2: two copies used tile
    after tile, ``slot_stride`` bytes apart, set by smem-plan). Set by stream-cols on a shared
    tile it keeps on chip: ``wait = "deferred"`` -- the register-tile backend issues the copies
    and does not wait for them here; the next load's wait (or, at the latest, the first op that
    reads the tile or holds a region) waits for them, so that several row blocks loaded one after
    another are in flight together. Set by async-schedule on a shared tile's load: ``ring`` and
    ``box`` (the ring stage it reads, the name the producer's ``tma_load`` issues it by) and, for a
    load a multicast pair shares, ``halves`` ("panels" or "rows": how the pair splits the box). Set by
    warp-spec on a row block the consumers fill themselves (no producer): ``fill = "cp.async"``."""

    NAME = "load"
    OPERANDS = ("src", "coords*")
    ATTRS = {"smem": int, "bars": int, "slots": int, "slot_stride": int, "wait": str, "ring": str, "box": str,
             "halves": str, "fill": str}
    OPTIONAL_ATTRS = frozenset(ATTRS)

    def infer(self):
        if not self.results:
            raise self.error("needs a result type")
        t = self.results[0].type
        _check_coords(self, self.operands[0].type, self.variadic(), t, "load")
        if "wait" in self.attrs and (self.attrs["wait"] != "deferred" or not isinstance(t, TileType)
                                     or t.space != "st"):
            raise self.error(f"wait = \"deferred\" is the only wait a load takes, on a shared tile; "
                             f"got {self.attrs['wait']!r} on {describe(t)}")
        if "fill" in self.attrs and (self.attrs["fill"] != "cp.async" or not isinstance(t, TileType)
                                     or t.space != "st"):
            raise self.error(f"fill = \"cp.async\" is the only fill a load takes, on a shared tile; "
                             f"got {self.attrs['fill']!r} on {describe(t)}")
        return [t]


class Store(Op):
    """``store %C, %c, %m, %n`` — write tile %c at tile coordinates (m, n), clipped to the tensor.
    Set by smem-plan for a register tile: ``smem`` (offset of the shared staging buffer it goes
    through) and ``staging`` ("tile": the whole tile; "chunks": 64-row x 128-byte chunks, one
    buffer per consumer warpgroup, reused chunk after chunk; ``staging_cols``, when set, widens a
    chunk to that many columns). Set by the epilogue pass: ``epilogue`` ("staged": through that
    staging and TMA stores; "deferred": staged under the next tile's first wgmma group; absent:
    from registers) and ``epilogue_cols`` (columns of a consumer's staging per round). Set by the
    pipeline pass: ``unstaged`` (no staging planned: in a persistent loop it would cost a ring a
    stage; stored from registers) or ``staging_in`` (n: the staging goes in the one slot of the
    block body's n-th tile loaded once per tile, dead by the store: ``pipeline{staging=slot}``)."""

    NAME = "store"
    OPERANDS = ("dst", "value", "coords*")
    ATTRS = {"smem": int, "staging": str, "staging_cols": int, "epilogue": str, "epilogue_cols": int,
             "unstaged": bool, "staging_in": int}
    OPTIONAL_ATTRS = frozenset(ATTRS)
    NUM_RESULTS = 0

    def infer(self):
        _check_coords(self, self.operands[0].type, self.variadic(), self.operands[1].type, "store")
        if self.attrs.get("staging", "tile") not in ("tile", "chunks"):
            raise self.error(f"staging expected \"tile\" or \"chunks\", got {self.attrs['staging']!r}")
        if self.attrs.get("epilogue", "staged") not in ("staged", "deferred"):
            raise self.error(f"epilogue expected \"staged\" or \"deferred\", got {self.attrs['epilogue']!r}")
        return []


class Copy(Op):
    """``%x = copy %a : rt<f32>[64, 64]`` — shared ↔ register, optionally converting the dtype.
    ``smem`` (set by smem-plan): the byte offset of a shared result."""

    NAME = "copy"
    OPERANDS = ("x",)
    ATTRS = {"smem": int}
    OPTIONAL_ATTRS = frozenset(ATTRS)

    def infer(self):
        if not self.results:
            raise self.error("needs a result type")
        src, dst = self.operands[0].type, self.results[0].type
        same_kind = (isinstance(src, TileType) and isinstance(dst, TileType)) or \
            (isinstance(src, VectorType) and isinstance(dst, VectorType) and src.kind == dst.kind)
        if not same_kind or src.shape != dst.shape:
            raise self.error(f"cannot copy {describe(src)} into {describe(dst)}")
        if isinstance(dst, TileType) and dst.space == "st" and dst.dtype != src.dtype:
            raise self.error(f"copying into shared memory keeps the dtype ({src.dtype}), got {dst.dtype}")
        return [dst]


class CopyCols(Op):
    """``%x = copy_cols %s, %c : rt<f32>[16, 512]`` — column chunk ``c`` of shared tile %s (its
    columns c*512 .. c*512+511, the result's width) copied into a register tile, optionally
    converting the dtype. stream-cols reads a row block it keeps in shared memory chunk by chunk
    with it (``cache=shared``) instead of loading the chunk again from global memory."""

    NAME = "copy_cols"
    OPERANDS = ("x", "chunk")

    def infer(self):
        if not self.results:
            raise self.error("needs a result type")
        src, chunk = self.operands[0].type, self.operands[1].type
        dst = self.results[0].type
        if not (isinstance(src, TileType) and src.space == "st"):
            raise self.error(f"copies from a shared tile, got {describe(src)}")
        if not (isinstance(dst, TileType) and dst.space == "rt"):
            raise self.error(f"copies into a register tile, got {describe(dst)}")
        if chunk != ScalarType(I32):
            raise self.error(f"the chunk index must be i32, got {describe(chunk)}")
        if dst.rows != src.rows or src.cols % dst.cols:
            raise self.error(f"{describe(dst)} is not a column chunk of {describe(src)}")
        return [dst]
