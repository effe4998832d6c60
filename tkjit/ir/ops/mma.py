"""Tensor-core matrix multiply-accumulate on tiles."""
from __future__ import annotations

from ..core import Op
from ..types import F16, F32, FP8, MMA_INPUT_DTYPES, TileType, describe


class Mma(Op):
    """``%d = mma_AB %a, %b[, %acc] : rt<f32>[M, N]`` — D = A·B (+ acc). ``TA``/``TB`` say
    whether an operand is given transposed: mma_ABt takes B as [N, K], mma_AtB takes A as [K, M]."""

    OPERANDS = ("a", "b", "acc?")
    ATTRS = {"a_major": str, "b_major": str, "transpose": str}
    OPTIONAL_ATTRS = frozenset(ATTRS)
    """Chosen by the layout pass: how each shared operand is stored ("K": K contiguous, "MN": M
    or N contiguous; wgmma's tA/tB bits), and ``transpose`` ("A", "B" or "AB"): operands that
    must be made K-major before the wgmma because their dtype (fp8) cannot be read MN-major."""
    TA = False
    TB = False

    def infer(self):
        for key in ("a_major", "b_major"):
            if self.attrs.get(key, "K") not in ("K", "MN"):
                raise self.error(f"{key} expected \"K\" or \"MN\", got {self.attrs[key]!r}")
        if self.attrs.get("transpose", "A") not in ("A", "B", "AB"):
            raise self.error(f"transpose expected \"A\", \"B\" or \"AB\", got {self.attrs['transpose']!r}")
        a, b = self.operands[0].type, self.operands[1].type
        for name, t in (("A", a), ("B", b)):
            if not isinstance(t, TileType):
                raise self.error(f"{name} must be a tile, got {describe(t)}")
            if t.dtype not in MMA_INPUT_DTYPES:
                raise self.error(f"{name} is {t.dtype}, but tensor cores take bf16, f16 or fp8 "
                                 f"operands; convert it with cvt<bf16>")
        if a.dtype != b.dtype and not (a.dtype in FP8 and b.dtype in FP8):
            raise self.error(f"A is {a.dtype} but B is {b.dtype}")
        m, k = (a.cols, a.rows) if self.TA else (a.rows, a.cols)
        kb, n = (b.cols, b.rows) if self.TB else (b.rows, b.cols)
        if k != kb:
            ashape, bshape = f"{a.rows}x{a.cols}", f"{b.rows}x{b.cols}"
            raise self.error(f"A is {ashape} but B is {bshape}: the inner dimensions "
                             f"({k} and {kb}) must agree")
        acc = self.operand("acc")
        out_dt = F32
        if acc is not None:
            c = acc.type
            if not (isinstance(c, TileType) and c.space == "rt"):
                raise self.error(f"the accumulator must be a register tile, got {describe(c)}")
            if c.shape != (m, n):
                raise self.error(f"the accumulator is {c.rows}x{c.cols} but A·B is {m}x{n}")
            if c.dtype not in (F32, F16) or (c.dtype == F16 and a.dtype != F16):
                raise self.error(f"accumulates in f32{' or f16' if a.dtype == F16 else ''}, "
                                 f"got a {c.dtype} accumulator")
            out_dt = c.dtype
        return [TileType("rt", out_dt, m, n)]


class MmaAB(Mma):
    """``mma_AB``: D = A·B with A [M, K], B [K, N]."""
    NAME = "mma_AB"


class MmaABt(Mma):
    """``mma_ABt``: D = A·Bᵀ with A [M, K], B [N, K] (attention's Q·Kᵀ)."""
    NAME = "mma_ABt"
    TB = True


class MmaAtB(Mma):
    """``mma_AtB``: D = Aᵀ·B with A [K, M], B [K, N]."""
    NAME = "mma_AtB"
    TA = True


class MmaAtBt(Mma):
    """``mma_AtBt``: D = Aᵀ·Bᵀ with A [K, M], B [N, K]."""
    NAME = "mma_AtBt"
    TA = True
    TB = True


MMA_OPS = (MmaAB, MmaABt, MmaAtB, MmaAtBt)
