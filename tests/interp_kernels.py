"""Hand-written textual tile IR for the interpreter tests (``$NAME`` placeholders are filled in).

Each builder returns a verified ``Kernel``; the test files hold the references.
"""
from __future__ import annotations

from string import Template

from tkjit.ir.core import Kernel
from tkjit.ir.parser import parse_kernel


def kernel(text: str, filename: str = "<test>", **subs) -> Kernel:
    return parse_kernel(Template(text).substitute({k: str(v) for k, v in subs.items()}), filename)


GEMM = """\
kernel @gemm(%A: gl<$AT>[$ASHAPE], %B: gl<$BT>[$BSHAPE], %C: gl<$CT>[M, N]) {
  %M = dim {name = "M"} : i32
  %N = dim {name = "N"} : i32
  %K = dim {name = "K"} : i32
  %cm = const {value = $BM} : i32
  %cn = const {value = $BN} : i32
  %ck = const {value = $BK} : i32
  %c0 = const {value = 0} : i32
  %c1 = const {value = 1} : i32
  %nm = cdiv %M, %cm : i32
  %nn = cdiv %N, %cn : i32
  %nk = cdiv %K, %ck : i32
  blocks {schedule = "$SCHEDULE", group = 8} %nm, %nn {
  ^(%m: i32, %n: i32):
    %acc = zeros : rt<$ACC>[$BM, $BN]
    %acc.1 = for {stages = 4} %c0, %nk, %c1, %acc : rt<$ACC>[$BM, $BN] {
    ^(%k: i32, %acc.2: rt<$ACC>[$BM, $BN]):
      %a = load %A, $ACOORDS : st<$AT>[$ATILE]
      %b = load %B, $BCOORDS : st<$BT>[$BTILE]
      %acc.3 = $MMA %a, %b, %acc.2 : rt<$ACC>[$BM, $BN]
      yield %acc.3
    }
    %c = cvt {dtype = "$CT"} %acc.1 : rt<$CT>[$BM, $BN]
    store %C, %c, %m, %n
  }
}
"""

_LAYOUTS = {  # mma -> (A dims, A coords, A tile, B dims, B coords, B tile)
    "mma_AB": ("M, K", "%m, %k", "$BM, $BK", "K, N", "%k, %n", "$BK, $BN"),
    "mma_ABt": ("M, K", "%m, %k", "$BM, $BK", "N, K", "%n, %k", "$BN, $BK"),
    "mma_AtB": ("K, M", "%k, %m", "$BK, $BM", "K, N", "%k, %n", "$BK, $BN"),
    "mma_AtBt": ("K, M", "%k, %m", "$BK, $BM", "N, K", "%n, %k", "$BN, $BK"),
}


def gemm(mma: str = "mma_AB", bm: int = 128, bn: int = 256, bk: int = 64, at: str = "bf16",
         bt: str = "bf16", ct: str = "bf16", acc: str = "f32", schedule: str = "persistent"):
    ashape, acoords, atile, bshape, bcoords, btile = _LAYOUTS[mma]
    text = Template(GEMM).safe_substitute(ASHAPE=ashape, ACOORDS=acoords, ATILE=atile,
                                          BSHAPE=bshape, BCOORDS=bcoords, BTILE=btile)
    return kernel(text, f"{mma}.tkir", MMA=mma, BM=bm, BN=bn, BK=bk, AT=at, BT=bt, CT=ct, ACC=acc,
                  SCHEDULE=schedule)


SOFTMAX = """\
kernel @softmax(%X: gl<f32>[R, C], %Y: gl<bf16>[R, C]) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %c0 = const {value = 0} : i32
  %nr = cdiv %R, %c16 : i32
  blocks %nr {
  ^(%i: i32):
    %x = load %X, %i, %c0 : rt<f32>[16, $BC]
    %m = row_max %x : cv<f32>[16]
    %d = sub_row %x, %m : rt<f32>[16, $BC]
    %e = exp %d : rt<f32>[16, $BC]
    %s = row_sum %e : cv<f32>[16]
    %y = div_row %e, %s : rt<f32>[16, $BC]
    %yb = cvt {dtype = "bf16"} %y : rt<bf16>[16, $BC]
    store %Y, %yb, %i, %c0
  }
}
"""


def softmax(bc: int = 128):
    return kernel(SOFTMAX, "softmax.tkir", BC=bc)


LAYERNORM = """\
kernel @layernorm(%X: gl<bf16>[R, D], %W: gl<bf16>[D], %Bias: gl<bf16>[D], %Y: gl<bf16>[R, D], %eps: f32) {
  %R = dim {name = "R"} : i32
  %D = dim {name = "D"} : i32
  %c16 = const {value = 16} : i32
  %c0 = const {value = 0} : i32
  %nr = cdiv %R, %c16 : i32
  %df = cvt {dtype = "f32"} %D : f32
  blocks %nr {
  ^(%i: i32):
    %x = load %X, %i, %c0 : rt<f32>[16, $BD]
    %w = load %W, %c0 : rv<f32>[$BD]
    %b = load %Bias, %c0 : rv<f32>[$BD]
    %s = row_sum %x : cv<f32>[16]
    %mean = div %s, %df : cv<f32>[16]
    %xc = sub_row %x, %mean : rt<f32>[16, $BD]
    %sq = mul %xc, %xc : rt<f32>[16, $BD]
    %ss = row_sum %sq : cv<f32>[16]
    %var = div %ss, %df : cv<f32>[16]
    %ve = add %var, %eps : cv<f32>[16]
    %rstd = rsqrt %ve : cv<f32>[16]
    %xn = mul_row %xc, %rstd : rt<f32>[16, $BD]
    %xw = mul_col %xn, %w : rt<f32>[16, $BD]
    %y = add_col %xw, %b : rt<f32>[16, $BD]
    %yb = cvt {dtype = "bf16"} %y : rt<bf16>[16, $BD]
    store %Y, %yb, %i, %c0
  }
}
"""


def layernorm(bd: int = 256):
    return kernel(LAYERNORM, "layernorm.tkir", BD=bd)


ATTENTION = """\
kernel @attn(%Q: gl<bf16>[B, H, N, $D], %K: gl<bf16>[B, HK, N, $D], %V: gl<bf16>[B, HK, N, $D], %O: gl<bf16>[B, H, N, $D], %scale: f32) {
  %B = dim {name = "B"} : i32
  %H = dim {name = "H"} : i32
  %HK = dim {name = "HK"} : i32
  %N = dim {name = "N"} : i32
  %cq = const {value = $BQ} : i32
  %ck = const {value = $BKV} : i32
  %c0 = const {value = 0} : i32
  %c1 = const {value = 1} : i32
  %nq = cdiv %N, %cq : i32
  %nk = cdiv %N, %ck : i32
  %group = floordiv %H, %HK : i32
  %log2e = const {value = 1.4426950408889634} : f32
  %sl = mul %scale, %log2e : f32
  blocks %B, %H, %nq {
  ^(%b: i32, %h: i32, %i: i32):
    %hk = floordiv %h, %group : i32
    %q = load %Q, %b, %h, %i, %c0 : st<bf16>[$BQ, $D]
    %o = zeros : rt<f32>[$BQ, $D]
    %mx = fill {value = -inf} : cv<f32>[$BQ]
    %l = zeros : cv<f32>[$BQ]
    %q0 = mul %i, %cq : i32
    %qe = add %q0, %cq : i32
    %kq = cdiv %qe, %ck : i32
    %causal = const {value = $CAUSAL} : bool
    %end = select %causal, %kq, %nk : i32
    %end.1 = min %end, %nk : i32
    %o.1, %mx.1, %l.1 = for %c0, %end.1, %c1, %o, %mx, %l : rt<f32>[$BQ, $D], cv<f32>[$BQ], cv<f32>[$BQ] {
    ^(%j: i32, %oa: rt<f32>[$BQ, $D], %ma: cv<f32>[$BQ], %la: cv<f32>[$BQ]):
      %k = load %K, %b, %hk, %j, %c0 : st<bf16>[$BKV, $D]
      %v = load %V, %b, %hk, %j, %c0 : st<bf16>[$BKV, $D]
      %s0 = mma_ABt %q, %k : rt<f32>[$BQ, $BKV]
      %s1 = mul %s0, %sl : rt<f32>[$BQ, $BKV]
      %k0 = mul %j, %ck : i32
      %s = if %causal : rt<f32>[$BQ, $BKV] {
        %sm = causal_mask %s1, %q0, %k0 : rt<f32>[$BQ, $BKV]
        yield %sm
      } {
        yield %s1
      }
      %rm = row_max %s : cv<f32>[$BQ]
      %mn = max %ma, %rm : cv<f32>[$BQ]
      %sd = sub_row %s, %mn : rt<f32>[$BQ, $BKV]
      %p = exp2 %sd : rt<f32>[$BQ, $BKV]
      %dm = sub %ma, %mn : cv<f32>[$BQ]
      %c = exp2 %dm : cv<f32>[$BQ]
      %lc = mul %la, %c : cv<f32>[$BQ]
      %rs = row_sum %p : cv<f32>[$BQ]
      %ln = add %lc, %rs : cv<f32>[$BQ]
      %pb = cvt {dtype = "bf16"} %p : rt<bf16>[$BQ, $BKV]
      %os = mul_row %oa, %c : rt<f32>[$BQ, $D]
      %on = mma_AB %pb, %v, %os : rt<f32>[$BQ, $D]
      yield %on, %mn, %ln
    }
    %out = div_row %o.1, %l.1 : rt<f32>[$BQ, $D]
    %ob = cvt {dtype = "bf16"} %out : rt<bf16>[$BQ, $D]
    store %O, %ob, %b, %h, %i, %c0
  }
}
"""


def attention(d: int = 64, bq: int = 64, bkv: int = 64, causal: bool = False):
    return kernel(ATTENTION, "attn.tkir", D=d, BQ=bq, BKV=bkv, CAUSAL="true" if causal else "false")


MAP = """\
kernel @map(%X: gl<f32>[R, C], %Z: gl<f32>[R, C], %Y: gl<f32>[R, C], %s: f32) {
  %R = dim {name = "R"} : i32
  %C = dim {name = "C"} : i32
  %c16 = const {value = 16} : i32
  %c32 = const {value = 32} : i32
  %nr = cdiv %R, %c16 : i32
  %nc = cdiv %C, %c32 : i32
  blocks %nr, %nc {
  ^(%i: i32, %j: i32):
    %x = load %X, %i, %j : rt<$T>[16, 32]
    %z = load %Z, %i, %j : rt<$T>[16, 32]
    %y = $BODY : rt<$T>[16, 32]
    store %Y, %y, %i, %j
  }
}
"""


def elementwise(body: str, dtype: str = "f32"):
    """``body`` combines %x, %z (tiles of ``dtype``) and %s (an f32 scalar), e.g. ``add %x, %s``."""
    return kernel(MAP, "map.tkir", BODY=body, T=dtype)


VECTORS = """\
kernel @vectors(%X: gl<f32>[R, C], %Vr: gl<f32>[R], %Vc: gl<f32>[C], %Y: gl<f32>[R, C], %Yr: gl<f32>[R], %Yc: gl<f32>[C]) {
  %c0 = const {value = 0} : i32
  %c1 = const {value = 1} : i32
  blocks %c1 {
  ^(%i: i32):
    %x = load %X, %c0, %c0 : rt<f32>[32, 32]
    %vr = load %Vr, %c0 : cv<f32>[32]
    %vc = load %Vc, %c0 : rv<f32>[32]
    %y = $BCAST_OP %x, $V : rt<f32>[32, 32]
    %r = $ROW_OP %x : cv<f32>[32]
    %c = $COL_OP %x : rv<f32>[32]
    store %Y, %y, %c0, %c0
    store %Yr, %r, %c0
    store %Yc, %c, %c0
  }
}
"""


def vectors(bcast_op: str, fn: str):
    """One broadcast (``sub_row`` takes %vr, ``sub_col`` %vc), and row_/col_``fn`` of the tile."""
    v = "%vr" if bcast_op.endswith("_row") else "%vc"
    return kernel(VECTORS, "vectors.tkir", BCAST_OP=bcast_op, V=v, ROW_OP=f"row_{fn}",
                  COL_OP=f"col_{fn}")


LOG_MMA = """\
kernel @log_mma(%X: gl<f32>[M, K], %Y: gl<bf16>[KY, N], %Z: gl<f32>[M, N]) {
  %c0 = const {value = 0} : i32
  %c1 = const {value = 1} : i32
  blocks %c1 {
  ^(%i: i32):
    %x = load %X, %c0, %c0 : rt<f32>[32, 64]
    %lx = log %x : rt<f32>[32, 64]
    %a = cvt {dtype = "bf16"} %lx : rt<bf16>[32, 64]
    %y = load %Y, %c0, %c0 : st<bf16>[64, 32]
    %z = mma_AB %a, %y : rt<f32>[32, 32]
    store %Z, %z, %c0, %c0
  }
}
"""
"""Z = log(X) · Y[:K]: X's padding columns become log(0) = -inf, Y's rows K..KY are valid data."""


COPY_OUT = """\
kernel @copy_out(%X: gl<f32>[R, C], %Y: gl<f32>[RY, CY]) {
  %c0 = const {value = 0} : i32
  %c1 = const {value = 1} : i32
  blocks %c1 {
  ^(%i: i32):
    %x = load %X, %c0, %c0 : rt<f32>[32, 32]
    %e = exp %x : rt<f32>[32, 32]
    store %Y, %e, %c0, %c0
  }
}
"""
"""Y's top-left block = exp(X); the rest of Y's 32x32 corner (X's padding) stays untouched."""


STRIDED = """\
kernel @strided(%X: gl<f32>[R, C], %Y: gl<f32>[R, 16], %lo: i32, %hi: i32, %step: i32) {
  %c0 = const {value = 0} : i32
  %c1 = const {value = 1} : i32
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %nr = cdiv %R, %c16 : i32
  blocks %nr {
  ^(%i: i32):
    %acc = zeros : rt<f32>[16, 16]
    %acc.1 = for %lo, %hi, %step, %acc : rt<f32>[16, 16] {
    ^(%k: i32, %a: rt<f32>[16, 16]):
      %x = load %X, %i, %k : rt<f32>[16, 16]
      %a2 = add %a, %x : rt<f32>[16, 16]
      yield %a2
    }
    store %Y, %acc.1, %i, %c0
  }
}
"""
"""Y = the sum of X's column tiles lo, lo+step, ... < hi (loop bounds from the arguments)."""


PICK = """\
kernel @pick(%X: gl<bf16>[B, H, N, 64], %Y: gl<bf16>[B, H, N, 64], %b: i32, %h: i32, %t: i32, %u: i32) {
  %c0 = const {value = 0} : i32
  %c1 = const {value = 1} : i32
  blocks %c1 {
  ^(%i: i32):
    %x = load %X, %b, %h, %t, %c0 : st<bf16>[64, 64]
    store %Y, %x, %b, %h, %u, %c0
  }
}
"""
"""Copy tile t of X[b, h] to tile u of Y[b, h] (line 6: the load, line 7: the store)."""


def scalar_probe(lines: list[str], results: list[tuple[str, str]]):
    """Scalar code in ``lines`` (over i32 params %a, %b and f32 %x); each (value, type) in
    ``results`` is written, as f32, to row r of Y (all 16 columns)."""
    body = ["  %c0 = const {value = 0} : i32", "  %c1 = const {value = 1} : i32",
            "  %one = const {value = 1.0} : f32", "  %zero = const {value = 0.0} : f32",
            *("  " + line for line in lines), "  blocks %c1 {", "  ^(%blk: i32):",
            "    %z = zeros : rv<f32>[16]"]
    for r, (value, typ) in enumerate(results):
        body.append(f"    %row{r} = const {{value = {r}}} : i32")
        if typ == "i32":
            body.append(f"    %f{r} = cvt {{dtype = \"f32\"}} {value} : f32")
        elif typ == "bool":
            body.append(f"    %f{r} = select {value}, %one, %zero : f32")
        else:
            body.append(f"    %f{r} = add {value}, %zero : f32")
        body.append(f"    %v{r} = add %z, %f{r} : rv<f32>[16]")
        body.append(f"    store %Y, %v{r}, %row{r}, %c0")
    body.append("  }")
    text = "kernel @probe(%Y: gl<f32>[P, 16], %a: i32, %b: i32, %x: f32) {\n" + \
        "\n".join(body) + "\n}\n"
    return kernel(text, "probe.tkir")
