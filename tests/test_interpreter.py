"""The CPU interpreter runs hand-written tile IR and matches float64 torch references.

Fresh random inputs every run; shapes include sizes that are not multiples of the tile, so the
padding rules (zero loads, skipped reductions, masked mma inner dimension, clipped stores) are
exercised on every kernel.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import interp_kernels as ik
from tkjit.errors import InterpreterError, LaunchError, NotAvailableError
from tkjit.interpreter import run
from tkjit.interpreter.handlers import HANDLERS
from tkjit.ir import ops

BF16_TOL = 1e-2


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in the output"
    return ((out - ref).norm() / ref.norm()).item()


def poisoned(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype)


# -- GEMM ----------------------------------------------------------------------------------
def _operands(mma: str, m: int, n: int, k: int, dtype=torch.bfloat16):
    a = torch.randn(k, m) if mma.startswith("mma_At") else torch.randn(m, k)
    b = torch.randn(n, k) if mma.endswith("Bt") else torch.randn(k, n)
    a, b = a.to(dtype), b.to(dtype)
    ref = (a.double().T if mma.startswith("mma_At") else a.double()) @ \
        (b.double().T if mma.endswith("Bt") else b.double())
    return a, b, ref


@pytest.mark.parametrize("mma", ["mma_AB", "mma_ABt", "mma_AtB", "mma_AtBt"])
@pytest.mark.parametrize("m,n,k", [(128, 128, 128), (100, 70, 50), (33, 129, 97), (16, 16, 300)])
def test_gemm_matches_torch(mma, m, n, k):
    kern = ik.gemm(mma, bm=64, bn=64, bk=32)
    a, b, ref = _operands(mma, m, n, k)
    c = poisoned(m, n)
    run(kern, [a, b, c])
    assert rel_err(c, ref) < BF16_TOL


def test_gemm_f32_output_is_the_f32_accumulator():
    """bf16 products are exact; the sum over K is float64 rounded once per mma to float32."""
    kern = ik.gemm(bm=64, bn=64, bk=64, ct="f32")
    a, b, _ = _operands("mma_AB", 96, 80, 64)
    c = poisoned(96, 80, dtype=torch.float32)
    run(kern, [a, b, c])
    assert torch.equal(c, (a.double() @ b.double()).float())


def test_fp8_gemm_mixes_e4m3_and_e5m2():
    kern = ik.gemm(bm=64, bn=64, bk=64, at="e4m3", bt="e5m2", ct="f32")
    a = (torch.randn(70, 130) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(130, 90) * 4).to(torch.float8_e5m2)
    c = poisoned(70, 90, dtype=torch.float32)
    run(kern, [a, b, c])
    ref = a.double() @ b.double()
    assert rel_err(c, ref) < 1e-6


def test_f16_accumulator_rounds_per_mma():
    kern = ik.gemm(bm=64, bn=64, bk=32, at="f16", bt="f16", ct="f16", acc="f16")
    a, b, ref = _operands("mma_AB", 64, 64, 96, torch.float16)
    c = poisoned(64, 64, dtype=torch.float16)
    run(kern, [a, b, c])
    assert 0 < rel_err(c, ref) < 5e-3
    partial = torch.zeros(64, 64, dtype=torch.float64)
    for k0 in range(0, 96, 32):  # what the kernel does: round the accumulator to f16 per mma
        partial = (partial + a[:, k0:k0 + 32].double() @ b[k0:k0 + 32].double()).float().half().double()
    assert torch.equal(c.double(), partial)


def test_grid_and_persistent_schedules_agree():
    a, b, _ = _operands("mma_AB", 150, 200, 70)
    outs = []
    for schedule in ("grid", "persistent"):
        c = poisoned(150, 200)
        run(ik.gemm(bm=64, bn=64, bk=32, schedule=schedule), [a, b, c])
        outs.append(c)
    assert torch.equal(outs[0], outs[1])


# -- softmax, layernorm ----------------------------------------------------------------------
@pytest.mark.parametrize("rows,cols", [(64, 128), (50, 100), (17, 1)])
def test_softmax_skips_padded_columns(rows, cols):
    x = torch.randn(rows, cols) - 5.0  # all negative: a zero pad would win the row max
    y = poisoned(rows, cols)
    run(ik.softmax(128), [x.numpy(), y])
    assert rel_err(y, torch.softmax(x.double(), dim=1)) < BF16_TOL


@pytest.mark.parametrize("rows,d", [(32, 256), (45, 200), (3, 77)])
def test_layernorm_statistics_ignore_padding(rows, d):
    x = (torch.randn(rows, d) * 3 + 1).bfloat16()
    w, bias = torch.randn(d).bfloat16(), torch.randn(d).bfloat16()
    y = poisoned(rows, d)
    run(ik.layernorm(256), [x, w, bias, y, 1e-5])
    ref = F.layer_norm(x.double(), (d,), w.double(), bias.double(), eps=1e-5)
    assert rel_err(y, ref) < BF16_TOL


# -- attention -------------------------------------------------------------------------------
def _sdpa(q, k, v, scale, causal):
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    v = v.double().repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q.double(), k, v, is_causal=causal, scale=scale)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("b,h,hk,n", [(1, 2, 2, 128), (2, 4, 2, 100), (1, 3, 1, 77)])
def test_attention_forward(causal, b, h, hk, n):
    d = 64
    q, k, v = (torch.randn(b, heads, n, d).bfloat16() for heads in (h, hk, hk))
    o = poisoned(b, h, n, d)
    scale = d ** -0.5
    run(ik.attention(d, bq=64, bkv=32, causal=causal), [q, k, v, o, scale])
    assert rel_err(o, _sdpa(q, k, v, scale, causal)) < BF16_TOL


# -- speed -----------------------------------------------------------------------------------
def test_speed_gemm_512_and_attention_512():
    a, b = torch.randn(512, 512).bfloat16(), torch.randn(512, 512).bfloat16()
    c = poisoned(512, 512)
    gemm = ik.gemm(bm=128, bn=256, bk=64)
    t0 = time.perf_counter()
    run(gemm, [a, b, c])
    t_gemm = time.perf_counter() - t0
    q, k, v = (torch.randn(1, 2, 512, 64).bfloat16() for _ in range(3))
    times = {}
    for causal in (False, True):
        o = poisoned(1, 2, 512, 64)
        attn = ik.attention(64, bq=192, bkv=128, causal=causal)
        t0 = time.perf_counter()
        run(attn, [q, k, v, o, 0.125])
        times[causal] = time.perf_counter() - t0
        assert rel_err(o, _sdpa(q, k, v, 0.125, causal)) < BF16_TOL
    print(f"\ninterpreter: gemm 512^3 (128x256x64 tiles) {t_gemm * 1e3:.1f} ms; attention 1x2x512x64 "
          f"(192x128 tiles) {times[False] * 1e3:.1f} ms, causal {times[True] * 1e3:.1f} ms")
    assert rel_err(c, a.double() @ b.double()) < BF16_TOL
    assert t_gemm < 2.0 and times[False] < 2.0 and times[True] < 2.0


# -- coverage --------------------------------------------------------------------------------
def test_every_op_has_a_handler():
    from tkjit.ir.ops.async_ops import AsyncOp  # the schedule's steps: interpreter/roles.py runs them
    missing = [cls.NAME for cls in ops.ALL_OPS if cls not in HANDLERS and cls is not ops.Yield
               and not issubclass(cls, AsyncOp)]
    assert not missing


def test_an_op_without_a_handler_is_named():
    table = {cls: h for cls, h in HANDLERS.items() if cls is not ops.CausalMask}
    kern = ik.attention(64, causal=True)
    q = torch.zeros(1, 1, 64, 64).bfloat16()
    with pytest.raises(NotAvailableError, match="cannot run 'causal_mask'") as err:
        run(kern, [q, q, q, q.clone(), 1.0], handlers=table)
    assert err.value.span is not None and "causal_mask %s1" in err.value.render()


# -- every elementwise map, reduction and broadcast --------------------------------------------
UNARY = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2,
         "abs": torch.abs, "relu": torch.relu, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
         "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "neg": torch.neg}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "max": torch.maximum, "min": torch.minimum}


def _map_inputs(rows=40, cols=50):
    x = torch.rand(rows, cols) * 4 + 0.25  # positive: log, sqrt, rsqrt are defined
    z = torch.randn(rows, cols)
    return x, z, torch.full((rows, cols), float("nan"))


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_unary_maps(name, dtype):
    x, z, y = _map_inputs()
    run(ik.elementwise(f"{name} %x", dtype), [x.numpy(), z.numpy(), y, 0.0])
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    ref = UNARY[name](x.to(tdt).double())
    tol = 1e-6 if dtype == "f32" else 4e-3  # one bf16 rounding of the result
    assert torch.allclose(y.double(), ref, rtol=tol, atol=1e-7)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("form", ["tiles", "scalar_right", "scalar_left"])
def test_binary_maps_round_like_torch(name, form):
    """On bf16 tiles every op rounds its float32 result to bf16: bit-equal to torch's bf16 ops."""
    x, z, y = _map_inputs()
    s = 1.3
    body = {"tiles": f"{name} %x, %z", "scalar_right": f"{name} %x, %s",
            "scalar_left": f"{name} %s, %x"}[form]
    run(ik.elementwise(body, "bf16"), [x.numpy(), z.numpy(), y, s])
    xb, zb, sb = x.bfloat16(), z.bfloat16(), torch.tensor(s).bfloat16()
    args = {"tiles": (xb, zb), "scalar_right": (xb, sb), "scalar_left": (sb.expand_as(xb), xb)}[form]
    assert torch.equal(y, BINARY[name](*args).float())


@pytest.mark.parametrize("bcast", ["add", "sub", "mul", "div", "max", "min"])
@pytest.mark.parametrize("axis", ["row", "col"])
@pytest.mark.parametrize("fn", ["max", "min", "sum"])
def test_broadcasts_and_reductions(bcast, axis, fn):
    rows, cols = 20, 27
    x = torch.randn(rows, cols) - 3.0
    vr, vc = torch.rand(rows) + 0.5, torch.rand(cols) + 0.5
    y, yr, yc = (torch.full(s, float("nan")) for s in ((rows, cols), (rows,), (cols,)))
    run(ik.vectors(f"{bcast}_{axis}", fn), [x.numpy(), vr.numpy(), vc.numpy(), y, yr, yc])
    v = vr[:, None] if axis == "row" else vc[None, :]
    assert torch.allclose(y, BINARY[bcast](x, v.expand_as(x)), rtol=1e-6)
    reduce = {"max": torch.amax, "min": torch.amin, "sum": torch.sum}[fn]
    assert torch.allclose(yr, reduce(x.double(), dim=1).float(), rtol=1e-6)
    assert torch.allclose(yc, reduce(x.double(), dim=0).float(), rtol=1e-6)


@pytest.mark.parametrize("fn,identity", [("max", -np.inf), ("min", np.inf), ("sum", 0.0)])
def test_a_row_with_no_valid_element_reduces_to_the_identity(fn, identity):
    from tkjit.interpreter.handlers.reduce import run_reduce
    from tkjit.interpreter.values import TileValue
    from tkjit.ir.core import Value
    from tkjit.ir.types import F32, TileType
    op = ops.OPS[f"row_{fn}"]([Value(TileType("rt", F32, 16, 32))])
    data = np.full((16, 32), np.nan, np.float32)  # padding may hold anything
    tile = TileValue(data, np.ones(16, bool), np.zeros(32, bool), F32)
    (out,) = run_reduce(None, op, [tile])
    assert (out.data == identity).all() and out.valid.all()


# -- padding ---------------------------------------------------------------------------------
def test_mma_inner_padding_is_exact_zero_even_when_it_holds_inf():
    m, k, ky, n = 20, 40, 64, 30
    x = torch.rand(m, k) + 0.1
    y = torch.randn(ky, n).bfloat16()
    z = torch.full((m, n), float("nan"))
    run(ik.kernel(ik.LOG_MMA), [x.numpy(), y, z])
    ref = torch.log(x).bfloat16().double() @ y[:k].double()
    assert rel_err(z, ref) < 1e-6


def test_store_writes_only_valid_elements():
    x = torch.randn(10, 20)
    y = torch.full((40, 40), 7.0)
    run(ik.kernel(ik.COPY_OUT), [x.numpy(), y])
    assert torch.allclose(y[:10, :20], torch.exp(x))
    y[:10, :20] = 7.0
    assert (y == 7.0).all(), "padding was stored"


# -- control flow and scalars ----------------------------------------------------------------
@pytest.mark.parametrize("lo,hi,step", [(0, 5, 1), (1, 5, 2), (3, 3, 1), (4, 2, 1), (0, 4, 3), (2, 1, 0)])
def test_loop_bounds_and_steps(lo, hi, step):
    x = torch.randn(20, 70)  # 5 column tiles of 16, the last one partial
    y = torch.full((20, 16), float("nan"))
    run(ik.kernel(ik.STRIDED), [x.numpy(), y, lo, hi, step])
    ref = torch.zeros(20, 16)
    for t in range(lo, hi, step) if step > 0 else ():
        part = x[:, 16 * t:16 * t + 16]
        ref[:, :part.shape[1]] += part
        ref[:, part.shape[1]:] = float("nan")  # a sum with padding is padding: never stored
    assert torch.allclose(y, ref, atol=1e-6, equal_nan=True)


def test_a_loop_with_a_non_positive_step_that_would_run_is_an_error():
    x, y = torch.randn(20, 70), torch.zeros(20, 16)
    with pytest.raises(InterpreterError, match="the loop step must be positive, got 0"):
        run(ik.kernel(ik.STRIDED, "strided.tkir"), [x.numpy(), y, 0, 3, 0])


SCALAR_LINES = [
    "%q1 = cdiv %a, %b : i32", "%q2 = floordiv %a, %b : i32", "%q3 = mod %a, %b : i32",
    "%q4 = div %a, %b : i32", "%sq = mul %a, %a : i32", "%ng = neg %a : i32", "%ab = abs %a : i32",
    "%rl = relu %a : i32", "%mx = max %a, %b : i32", "%lt = lt %a, %b : bool",
    "%ge = ge %a, %b : bool", "%ne = ne %a, %b : bool", "%nt = not %lt : bool",
    "%an = and %lt, %ne : bool", "%or = or %lt, %ne : bool", "%sel = select %lt, %a, %b : i32",
    "%xi = cvt {dtype = \"i32\"} %x : i32", "%ex = exp2 %x : f32", "%xb = cvt {dtype = \"bf16\"} %x : bf16",
    "%xf = cvt {dtype = \"f32\"} %xb : f32", "%dz = div %x, %zero : f32",
    "%le = le %a, %b : bool", "%gt = gt %a, %b : bool", "%eq = eq %a, %a : bool",
]
SCALAR_RESULTS = [("%q1", "i32"), ("%q2", "i32"), ("%q3", "i32"), ("%q4", "i32"), ("%sq", "i32"),
                  ("%ng", "i32"), ("%ab", "i32"), ("%rl", "i32"), ("%mx", "i32"), ("%lt", "bool"),
                  ("%ge", "bool"), ("%ne", "bool"), ("%nt", "bool"), ("%an", "bool"),
                  ("%or", "bool"), ("%sel", "i32"), ("%xi", "i32"), ("%ex", "f32"), ("%xf", "f32"),
                  ("%dz", "f32"), ("%le", "bool"), ("%gt", "bool"), ("%eq", "bool")]


def _wrap(v):
    return (v + 2**31) % 2**32 - 2**31


@pytest.mark.parametrize("a,b,x", [(-7, 2, 2.5), (7, -2, -3.5), (65537, 3, 1.00390625), (-2**31, 5, 0.7)])
def test_scalar_semantics(a, b, x):
    kern = ik.scalar_probe(SCALAR_LINES, SCALAR_RESULTS)
    y = torch.full((len(SCALAR_RESULTS), 16), float("nan"))
    run(kern, [y, a, b, x])
    trunc = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
    xb = torch.tensor(x).bfloat16().item()
    want = [-(-a // b), a // b, a % b, trunc, _wrap(a * a), _wrap(-a), _wrap(abs(a)), max(a, 0),
            max(a, b), a < b, a >= b, a != b, not a < b, a < b and a != b, a < b or a != b,
            a if a < b else b, round(x), np.float32(2.0) ** np.float32(x), xb,
            float("inf") if x > 0 else float("-inf"), a <= b, a > b, True]
    got = y[:, 0].tolist()
    assert (y == y[:, :1]).all()
    assert got == [float(np.float32(w)) for w in want]


def test_integer_division_by_zero_points_at_the_op():
    kern = ik.scalar_probe(["%q = floordiv %a, %b : i32"], [("%q", "i32")])
    with pytest.raises(InterpreterError) as err:
        run(kern, [torch.zeros(1, 16), 5, 0, 1.0])
    assert "floordiv: integer division by zero (5 // 0)" in err.value.message
    assert err.value.span.line == 6  # the kernel line, 4 constants, then the floordiv


def test_constant_dimensions_are_checked_and_read():
    text = ik.MAP.replace("gl<f32>[R, C]", "gl<f32>[R, W]").replace('name = "C"', 'name = "W"')
    kern = ik.kernel(text, BODY="add %x, %z", T="f32")
    x, z, y = _map_inputs(40, 48)
    run(kern, [x.numpy(), z.numpy(), y, 0.0], constants={"W": 48})
    assert torch.equal(y, x + z)
    with pytest.raises(LaunchError, match=r"argument 0 \('X'\): dim 1 is 48 but the kernel requires 64"):
        run(kern, [x.numpy(), z.numpy(), y, 0.0], constants={"W": 64})


# -- runtime errors point at the kernel line -------------------------------------------------
def _pick(b=0, h=0, t=0, u=0, n=170, heads=2):
    x = torch.randn(1, heads, n, 64).bfloat16()
    y = torch.zeros(1, heads, n, 64).bfloat16()
    run(ik.kernel(ik.PICK, "pick.tkir"), [x, y, b, h, t, u])
    return x, y


@pytest.mark.parametrize("kw,line,message", [
    ({"t": 3}, 6, "load: tile coordinate 3 of X is out of range: X has 3 tiles of 64 rows along "
                  "dimension 2 (N = 170)"),
    ({"t": -1}, 6, "load: tile coordinate -1 of X is out of range"),
    ({"h": 2}, 6, "load: index 2 of X is out of range: X has 2 entries along dimension 1 (H = 2)"),
    ({"b": 1}, 6, "load: index 1 of X is out of range: X has 1 entry along dimension 0 (B = 1)"),
    ({"u": 5}, 7, "store: tile coordinate 5 of Y is out of range: Y has 3 tiles of 64 rows"),
])
def test_out_of_range_coordinates_are_reported_at_their_line(kw, line, message):
    with pytest.raises(InterpreterError) as err:
        _pick(**kw)
    assert message in err.value.message
    assert err.value.span.line == line
    rendered = err.value.render()
    assert rendered.startswith(f"pick.tkir:{line}:")
    assert ("%x = load" if line == 6 else "store %Y") in rendered and "^~~" in rendered


def test_column_coordinate_of_a_fixed_dimension():
    text = ik.PICK.replace("%t, %c0 : st", "%t, %t : st")
    with pytest.raises(InterpreterError, match=r"X has 1 tile of 64 columns along dimension 3 \(size 64\)"):
        run(ik.kernel(text), [torch.zeros(1, 1, 300, 64).bfloat16(), torch.zeros(1, 1, 300, 64).bfloat16(),
                              0, 0, 2, 0])


def test_a_partial_last_tile_is_in_range():
    x, y = _pick(t=2, u=2, n=170)
    assert torch.equal(y[:, 0, 128:], x[:, 0, 128:]) and (y[:, 0, :128] == 0).all()


# -- launch checks ---------------------------------------------------------------------------
def _gemm_args(**change):
    args = {"A": torch.randn(64, 32).bfloat16(), "B": torch.randn(32, 48).bfloat16(),
            "C": torch.zeros(64, 48).bfloat16()}
    args.update(change)
    return list(args.values())


@pytest.mark.parametrize("args,message", [
    (_gemm_args(C=torch.zeros(64, 48)), r"argument 2 \('C'\): expected dtype bf16 \(torch.bfloat16\), "
                                         r"got torch.float32"),
    (_gemm_args(B=torch.zeros(31, 48).bfloat16()), r"argument 1 \('B'\): dim 0 \(K\) is 31 but "
                                                    r"gemm: argument 0 \('A'\) dim 1 set K = 32"),
    (_gemm_args(C=torch.zeros(64, 48, 1).bfloat16()), r"argument 2 \('C'\): expected 2 dimensions "
                                                       r"\[M, N\], got 3 \(shape \[64, 48, 1\]\)"),
    (_gemm_args(A=torch.zeros(32, 64).bfloat16().T), r"argument 0 \('A'\): the tensor's last dimension must be "
                                                       r"contiguous \(stride 1\), got stride 64"),
    (_gemm_args(C=torch.zeros(1, 48).bfloat16().expand(64, 48)), r"argument 2 \('C'\): the kernel stores into "
                                                                  r"it, but its elements overlap"),
    (_gemm_args(A=3.0), r"argument 0 \('A'\): expected a tensor for gl<bf16>\[M, K\], got float"),
    (_gemm_args(C=np.zeros((64, 48), np.float16)), r"argument 2 \('C'\): expected dtype bf16 \(torch.bfloat16\), got numpy float16"),
    (_gemm_args()[:2], r"gemm: expected 3 arguments \(A: bf16 tensor \[M, K\], B: bf16 tensor \[K, N\], "
                       r"C: bf16 tensor \[M, N\]\), got 2"),
])
def test_bad_launches_name_the_argument(args, message):
    with pytest.raises(LaunchError, match=message):
        run(ik.gemm(bm=64, bn=64, bk=32), args)


@pytest.mark.parametrize("value,message", [
    (1.5, r"argument 2 \('lo'\): expected a Python int \(i32\), got float"),
    (True, r"argument 2 \('lo'\): expected a Python int \(i32\), got bool"),
    (2**31, r"argument 2 \('lo'\): 2147483648 does not fit in i32"),
    ("0", r"argument 2 \('lo'\): expected a Python int \(i32\), got str"),
])
def test_bad_scalars_name_the_argument(value, message):
    with pytest.raises(LaunchError, match=message):
        run(ik.kernel(ik.STRIDED), [np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32),
                                    value, 1, 1])


def test_a_read_only_output_array_is_refused():
    out = np.zeros((16, 16), np.float32)
    out.flags.writeable = False
    with pytest.raises(LaunchError, match=r"argument 1 \('Y'\): the kernel stores into it"):
        run(ik.kernel(ik.STRIDED), [np.zeros((16, 16), np.float32), out, 0, 1, 1])


def test_numpy_arrays_are_written_in_place():
    x = np.random.default_rng(0).standard_normal((16, 48)).astype(np.float32)
    y = np.full((16, 16), np.nan, np.float32)
    run(ik.kernel(ik.STRIDED), [x, y, 0, 3, 1])
    assert np.allclose(y, x[:, :16] + x[:, 16:32] + x[:, 32:])


def test_gemm_with_empty_inner_dimension_is_zero():
    c = poisoned(64, 48)
    run(ik.gemm(bm=64, bn=64, bk=32), [torch.zeros(64, 0).bfloat16(), torch.zeros(0, 48).bfloat16(), c])
    assert (c == 0).all()
