"""TMA (the bulk tensor copy engine): tensor-map kernel parameters and copy instructions.

A tensor map is a 128-byte kernel parameter (``.param .align 64 .b8 name[128]``) encoded on the
host (tkjit/runtime/tensormap.py) from the metadata entry ``tensormap_entry`` makes. The copy
instruction wants its generic address, which ``cvta.param`` gives (passing the symbol itself
is a state-space mismatch). Coordinates are element indices, innermost first; boxes that run
past the tensor are zero-filled and still count their full bytes on the mbarrier.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frozen import Frozen

MAX_BOX = 256
"""Each box dimension is at most 256 elements."""


@dataclass(unsafe_hash=True)
class TensorMap(Frozen):
    """One tensor map: the kernel parameter ``param`` (its index in the argument list) seen in
    boxes of ``box`` elements (innermost first) with ``swizzle``-byte swizzling."""

    symbol: str
    param: int
    tensor: str
    dtype: str
    box: tuple[int, ...]
    swizzle: int
    fallback: bool = True
    """The kernel copies without TMA when the tensor's rows are not 16-byte multiples."""

    def declaration(self) -> str:
        return f".param .align 64 .b8 {self.symbol}[128]"

    def entry(self) -> dict:
        """The kernel-metadata parameter entry the launcher encodes the map from."""
        return {"kind": "tensormap", "name": f"{self.tensor}.tmap", "param": self.param,
                "tensor": self.tensor, "dtype": self.dtype, "box": list(self.box),
                "swizzle": self.swizzle, "fallback": self.fallback}

    @property
    def box_bytes(self) -> int:
        n = {"bf16": 2, "f16": 2, "e4m3": 1, "e5m2": 1}.get(self.dtype, 4)
        for b in self.box:
            n *= b
        return n


def generic_address(symbol: str, raw: str, out: str) -> list[str]:
    return [f"mov.b64 {raw}, {symbol};", f"cvta.param.u64 {out}, {raw};"]


def prefetch(tmap: str) -> str:
    return f"prefetch.tensormap [{tmap}];"


def store_nd(tmap: str, coords: list[str], src: str) -> str:
    """Copy one box of a rank-``len(coords)`` map (coordinates innermost first) from shared memory
    at ``src`` to the tensor (elements outside it are skipped)."""
    return (f"cp.async.bulk.tensor.{len(coords)}d.global.shared::cta.tile.bulk_group "
            f"[{tmap}, {{{', '.join(coords)}}}], [{src}];")


STORE_COMMIT = "cp.async.bulk.commit_group;"


def store_wait(pending: int, read_only: bool) -> str:
    """Wait until at most ``pending`` store groups are in flight (``.read``: until they have read
    their shared memory, which may then be written again)."""
    return f"cp.async.bulk.wait_group{'.read' if read_only else ''} {pending};"


def load_nd(dst: str, tmap: str, coords: list[str], bar: str) -> str:
    """Copy one box of a rank-``len(coords)`` map (coordinates innermost first) into shared memory
    at ``dst``, completing its bytes on mbarrier ``bar``."""
    return (f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            f"[{dst}], [{tmap}, {{{', '.join(coords)}}}], [{bar}];")


def load_nd_multicast(dst: str, tmap: str, coords: list[str], bar: str, mask: int) -> str:
    """``load_nd`` into shared offset ``dst`` of every CTA of the cluster in ``mask``, completing
    its bytes on the mbarrier at offset ``bar`` in each (TMA multicast)."""
    return (f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            f".multicast::cluster [{dst}], [{tmap}, {{{', '.join(coords)}}}], [{bar}], {mask};")
