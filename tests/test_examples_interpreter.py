"""Every example kernel, lowered by the front end and run by the CPU interpreter, matches a
float64 torch reference on fresh random inputs, at several shapes (tile multiples and not).

Each example needs an entry in ``CASES`` (its constants variants, shapes, inputs and reference);
an example without one fails ``test_every_example_has_a_reference``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from tkjit.errors import InterpreterError, LaunchError
from tkjit.frontend import lower_source
from tkjit.interpreter import run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BF16_TOL = 1e-2


@dataclass
class Case:
    """``make(shape, constants)`` returns (args, outputs, references) for one launch."""

    constants: list[dict]
    shapes: list[tuple]
    make: Callable


def _nan(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype)


def _bf16(*shape, scale=1.0, shift=0.0):
    return (torch.randn(*shape) * scale + shift).bfloat16()


def make_gemm(shape, constants):
    m, n, k = shape
    a, b, c = _bf16(m, k), _bf16(k, n), _nan(m, n)
    return [a, b, c], [c], [a.double() @ b.double()]


def make_attention(shape, constants):
    bsz, h, hkv, n = shape
    d, causal = constants.get("D", 128), constants.get("CAUSAL", False)
    q, k, v = _bf16(bsz, h, n, d), _bf16(bsz, hkv, n, d), _bf16(bsz, hkv, n, d)
    o, lse = _nan(bsz, h, n, d), _nan(bsz, h, n, dtype=torch.float32)
    scale = d ** -0.5
    kr = k.double().repeat_interleave(h // hkv, dim=1)
    vr = v.double().repeat_interleave(h // hkv, dim=1)
    ref_o = F.scaled_dot_product_attention(q.double(), kr, vr, is_causal=causal, scale=scale)
    scores = scale * q.double() @ kr.transpose(-1, -2)
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    ref_lse = torch.logsumexp(scores, dim=-1)
    return [q, k, v, o, lse, scale], [o, lse], [ref_o, ref_lse]


def make_layernorm(shape, constants):
    (rows,) = shape
    d = constants.get("D", 1024)
    x, w, bias = _bf16(rows, d, scale=2.0, shift=0.5), _bf16(d), _bf16(d)
    y = _nan(rows, d)
    ref = F.layer_norm(x.double(), (d,), w.double(), bias.double(), eps=1e-5)
    return [x, w, bias, y, 1e-5], [y], [ref]


def make_rotary(shape, constants):
    bsz, h, n = shape
    d = constants.get("D", 128)
    x = _bf16(bsz, h, n, d)
    freqs = torch.arange(n, dtype=torch.float64)[:, None] * 10000 ** (-torch.arange(d // 2) / (d // 2))
    cos, sin = freqs.cos().bfloat16(), freqs.sin().bfloat16()
    y = _nan(bsz, h, n, d)
    x1, x2 = x[..., :d // 2].double(), x[..., d // 2:].double()
    c, s = cos.double(), sin.double()
    ref = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    return [x, cos, sin, y], [y], [ref]


def make_softmax(shape, constants):
    (rows,) = shape
    c = constants.get("C", 1024)
    x = _bf16(rows, c, scale=3.0, shift=-4.0)
    y = _nan(rows, c)
    return [x, y], [y], [torch.softmax(x.double(), dim=1)]


def make_gemm_epilogue(act):
    def make(shape, constants):
        m, n, k = shape
        a, b, bias, c = _bf16(m, k), _bf16(k, n), _bf16(n), _nan(m, n)
        return [a, b, bias, c], [c], [act(a.double() @ b.double() + bias.double())]
    return make


def make_bmm(shape, constants):
    bt, m, n, k = shape
    a, b, c = _bf16(bt, m, k), _bf16(bt, k, n), _nan(bt, m, n)
    return [a, b, c], [c], [a.double() @ b.double()]


def make_gemm_alpha_beta(shape, constants):
    m, n, k = shape
    a, b, c = _bf16(m, k), _bf16(k, n), _bf16(m, n)
    ref = 1.5 * (a.double() @ b.double()) - 0.5 * c.double()
    return [a, b, c, 1.5, -0.5], [c], [ref]


def make_gemm_atb(shape, constants):
    m, n, k = shape
    a, b, c = _bf16(k, m), _bf16(k, n), _nan(m, n)
    return [a, b, c], [c], [a.double().T @ b.double()]


def make_mlp(shape, constants):
    m, f = shape
    d = constants.get("D", 128)
    x, w1, w2, y = _bf16(m, d), _bf16(d, f, scale=d ** -0.5), _bf16(f, d, scale=f ** -0.5), _nan(m, d)
    h = F.gelu(x.double() @ w1.double(), approximate="tanh")
    return [x, w1, w2, y], [y], [h @ w2.double()]


def make_gemm_fp8(shape, constants):
    m, n, k = shape
    a = (torch.randn(m, k) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k) * 2).to(torch.float8_e4m3fn)
    c = _nan(m, n)
    return [a, b, c, 0.5, 0.25], [c], [0.125 * (a.double() @ b.double().T)]


def make_rmsnorm(shape, constants):
    (rows,) = shape
    d = constants.get("D", 1024)
    x, w, y = _bf16(rows, d, scale=2.0, shift=0.5), _bf16(d), _nan(rows, d)
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    return [x, w, y, 1e-6], [y], [ref]


def make_residual_layernorm(shape, constants):
    (rows,) = shape
    d = constants.get("D", 1024)
    x, res, w, bias = _bf16(rows, d, scale=2.0, shift=0.5), _bf16(rows, d), _bf16(d), _bf16(d)
    h, y = _nan(rows, d), _nan(rows, d)
    hs = x.double() + res.double()
    ref = F.layer_norm(hs, (d,), w.double(), bias.double(), eps=1e-5)
    return [x, res, w, bias, h, y, 1e-5], [h, y], [hs, ref]


def _attention_inputs(shape, constants):
    bsz, h, hkv, n = shape
    d = constants.get("D", 128)
    q, k, v = _bf16(bsz, h, n, d), _bf16(bsz, hkv, n, d), _bf16(bsz, hkv, n, d)
    kr = k.double().repeat_interleave(h // hkv, dim=1)
    vr = v.double().repeat_interleave(h // hkv, dim=1)
    return q, k, v, kr, vr, _nan(bsz, h, n, d), d ** -0.5


def make_attention_nol(shape, constants):
    q, k, v, kr, vr, o, scale = _attention_inputs(shape, constants)
    causal = constants.get("CAUSAL", False)
    ref = F.scaled_dot_product_attention(q.double(), kr, vr, is_causal=causal, scale=scale)
    return [q, k, v, o, scale], [o], [ref]


def make_attention_window(shape, constants, window=100):
    q, k, v, kr, vr, o, scale = _attention_inputs(shape, constants)
    n = q.shape[2]
    pos = torch.arange(n)
    dist = pos[:, None] - pos[None, :]
    visible = (dist >= 0) & (dist < window)
    ref = F.scaled_dot_product_attention(q.double(), kr, vr, attn_mask=visible, scale=scale)
    return [q, k, v, o, scale, window], [o], [ref]


def make_attention_softcap(shape, constants, cap=5.0):
    q, k, v, kr, vr, o, scale = _attention_inputs(shape, constants)
    s = cap * torch.tanh(scale * (q.double() @ kr.transpose(-1, -2)) / cap)
    return [q, k, v, o, scale, cap], [o], [torch.softmax(s, -1) @ vr]


def make_attention_alibi(shape, constants):
    q, k, v, kr, vr, o, scale = _attention_inputs(shape, constants)
    h, n = q.shape[1], q.shape[2]
    slopes = 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=torch.float64) / h)
    pos = torch.arange(n, dtype=torch.float64)
    dist = pos[:, None] - pos[None, :]
    bias = (-slopes[:, None, None] * dist).masked_fill(dist < 0, float("-inf"))
    ref = F.scaled_dot_product_attention(q.double(), kr, vr, attn_mask=bias, scale=scale)
    return [q, k, v, o, scale], [o], [ref]


def make_attention_exp(shape, constants):
    return make_attention_nol(shape, constants)


def make_attention_mask(shape, constants):
    return make_attention_nol(shape, dict(constants, CAUSAL=True))


def make_attention_f16(shape, constants):
    bsz, h, hkv, n = shape
    d, causal = constants.get("D", 128), constants.get("CAUSAL", False)
    q, k, v = (torch.randn(bsz, x, n, d).half() for x in (h, hkv, hkv))
    o = _nan(bsz, h, n, d, dtype=torch.float16)
    kr, vr = (t.double().repeat_interleave(h // hkv, dim=1) for t in (k, v))
    ref = F.scaled_dot_product_attention(q.double(), kr, vr, is_causal=causal, scale=d ** -0.5)
    return [q, k, v, o, d ** -0.5], [o], [ref]


def _attention_backward(shape, constants):
    """Inputs of the backward kernels and their float64 truth: L and Di from the exact forward,
    the gradients from autograd."""
    bsz, h, hkv, n = shape
    d, causal = constants.get("D", 128), constants.get("CAUSAL", False)
    q, do = _bf16(bsz, h, n, d), _bf16(bsz, h, n, d)
    k, v = _bf16(bsz, hkv, n, d), _bf16(bsz, hkv, n, d)
    scale = d ** -0.5
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    kr, vr = (t.repeat_interleave(h // hkv, dim=1) for t in leaves[1:])
    scores = scale * leaves[0] @ kr.transpose(-1, -2)
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(scores, -1) @ vr
    o.backward(do.double())
    lse = torch.logsumexp(scores.detach(), -1).float()
    di = (do.double() * o.detach()).sum(-1)
    return dict(q=q, k=k, v=v, do=do, o=o.detach(), lse=lse, di=di, scale=scale,
                grads=[x.grad for x in leaves])


def make_attention_bwd_prep(shape, constants):
    t = _attention_backward(shape, constants)
    o = t["o"].bfloat16()
    di = _nan(*t["lse"].shape, dtype=torch.float32)
    return [o, t["do"], di], [di], [(t["do"].double() * o.double()).sum(-1)]


def make_attention_bwd_dkdv(shape, constants):
    t = _attention_backward(shape, constants)
    dk, dv = _nan(*t["k"].shape), _nan(*t["v"].shape)
    return ([t["q"], t["k"], t["v"], t["do"], t["lse"], t["di"].float(), dk, dv, t["scale"]], [dk, dv],
            t["grads"][1:])


def make_attention_bwd_dq(shape, constants):
    t = _attention_backward(shape, constants)
    dq = _nan(*t["q"].shape)
    return [t["q"], t["k"], t["v"], t["do"], t["lse"], t["di"].float(), dq, t["scale"]], [dq], t["grads"][:1]


def make_linear_attention(shape, constants):
    bsz, h, n = shape
    d, chunk = constants.get("D", 64), constants.get("C", 64)
    q, k, v = (_bf16(bsz, h, n, d, scale=d ** -0.5) for _ in range(3))
    o = _nan(bsz, h, n, d)
    ref = (q.double() @ k.double().transpose(-1, -2)).tril() @ v.double()
    return [q, k, v, o], [o], [ref]


CASES = {
    "gemm": Case([{}], [(256, 512, 128), (200, 300, 100), (129, 257, 65)], make_gemm),
    "attention": Case(
        [{"D": 64}, {"D": 64, "CAUSAL": True}, {"CAUSAL": True}, {"D": 64, "BQ": 64, "BKV": 32},
         {"D": 64, "CAUSAL": True, "BQ": 32, "BKV": 64}],
        [(1, 2, 2, 256), (2, 4, 2, 200), (1, 3, 1, 77)], make_attention),
    "layernorm": Case([{}, {"D": 256}], [(32,), (50,), (3,)], make_layernorm),
    "rotary": Case([{}, {"D": 64, "BN": 32}], [(1, 2, 128), (2, 3, 100)], make_rotary),
    "softmax": Case([{}, {"C": 256, "BR": 32}], [(16,), (50,)], make_softmax),
    "gemm_bias_gelu": Case([{"BM": 64, "BN": 64}], [(128, 192, 128), (70, 100, 72)],
                           make_gemm_epilogue(F.gelu)),
    "gemm_bias_silu": Case([{"BM": 64, "BN": 64}], [(70, 100, 72)], make_gemm_epilogue(F.silu)),
    "bmm": Case([{"BM": 64, "BN": 64}], [(3, 70, 100, 72)], make_bmm),
    "gemm_alpha_beta": Case([{"BM": 64, "BN": 64}], [(70, 100, 72)], make_gemm_alpha_beta),
    "gemm_atb": Case([{"BM": 64, "BN": 64}], [(70, 100, 72)], make_gemm_atb),
    "mlp": Case([{}, {"D": 64, "BF": 32}], [(70, 200), (64, 64)], make_mlp),
    "gemm_fp8": Case([{"BM": 64, "BN": 64, "BK": 64}], [(70, 100, 136)], make_gemm_fp8),
    "rmsnorm": Case([{}, {"D": 256}], [(20,), (3,)], make_rmsnorm),
    "residual_layernorm": Case([{}, {"D": 256}], [(20,)], make_residual_layernorm),
    "attention_nol": Case([{"D": 64, "BQ": 64, "BKV": 64}, {"D": 64, "CAUSAL": True, "BQ": 64, "BKV": 32},
                           {"D": 96, "CAUSAL": True, "BQ": 64, "BKV": 32}, {"D": 256, "BQ": 64}],
                          [(1, 2, 1, 150), (1, 4, 2, 40)], make_attention_nol),
    "attention_window": Case([{"D": 64, "BQ": 64, "BKV": 32}, {"D": 64, "BQ": 32, "BKV": 64}],
                             [(1, 2, 1, 300), (1, 1, 1, 50)], make_attention_window),
    "attention_softcap": Case([{"D": 64, "BQ": 64, "BKV": 64}], [(1, 2, 1, 150)], make_attention_softcap),
    "attention_alibi": Case([{"D": 64, "BQ": 64, "BKV": 64}, {"D": 64, "BQ": 32, "BKV": 64}],
                            [(1, 4, 2, 150)], make_attention_alibi),
    "attention_exp": Case([{"D": 64, "BQ": 64, "BKV": 64}, {"D": 64, "CAUSAL": True, "BQ": 64, "BKV": 32}],
                          [(1, 2, 1, 150), (1, 1, 1, 40)], make_attention_exp),
    "attention_mask": Case([{"D": 64, "BQ": 64, "BKV": 32}, {"D": 64, "BQ": 32, "BKV": 64}],
                           [(1, 4, 2, 150), (1, 1, 1, 40)], make_attention_mask),
    "attention_f16": Case([{"D": 64, "BQ": 64, "BKV": 64}, {"D": 96, "CAUSAL": True, "BQ": 64, "BKV": 32}],
                          [(1, 4, 2, 150), (1, 1, 1, 40)], make_attention_f16),
    "attention_bwd_prep": Case([{"D": 64}], [(1, 2, 2, 150)], make_attention_bwd_prep),
    "attention_bwd_dkdv": Case([{"D": 64, "BQ": 32, "BKV": 64}, {"D": 64, "CAUSAL": True, "BQ": 32, "BKV": 64},
                                {"D": 64, "CAUSAL": True, "BQ": 64, "BKV": 32}],
                               [(1, 4, 2, 150), (1, 1, 1, 40)], make_attention_bwd_dkdv),
    "linear_attention": Case([{}], [(1, 2, 150), (1, 1, 40)], make_linear_attention),
    "attention_bwd_dq": Case([{"D": 64, "BQ": 64, "BKV": 32}, {"D": 64, "CAUSAL": True, "BQ": 32, "BKV": 64},
                              {"D": 64, "CAUSAL": True, "BQ": 64, "BKV": 32}],
                             [(1, 4, 2, 150), (1, 1, 1, 40)], make_attention_bwd_dq),
}


def _params():
    for name, case in CASES.items():
        for constants in case.constants:
            for shape in case.shapes:
                yield pytest.param(name, constants, shape, id=f"{name}-{constants}-{shape}")


def test_every_example_has_a_reference():
    assert sorted(p.stem for p in EXAMPLES.glob("*.tk")) == sorted(CASES)


@pytest.mark.parametrize("name,constants,shape", list(_params()))
def test_example_matches_torch(name, constants, shape):
    path = EXAMPLES / f"{name}.tk"
    kernel = lower_source(path.read_text(), path.name, constants)
    args, outputs, refs = CASES[name].make(shape, constants)
    run(kernel, args)
    for out, ref in zip(outputs, refs):
        out = out.double()
        assert not torch.isnan(out).any(), "an output element was never written"
        err = ((out - ref).norm() / ref.norm()).item()
        assert err <= BF16_TOL, f"relative error {err:.3g}"


def test_an_out_of_range_tile_points_at_the_example_line():
    src = (EXAMPLES / "gemm.tk").read_text().replace("B.tile(k, n)", "B.tile(k + 1, n)")
    kernel = lower_source(src, "gemm.tk")
    a, b, c = _bf16(128, 128), _bf16(128, 256), _nan(128, 256)
    with pytest.raises(InterpreterError) as err:
        run(kernel, [a, b, c])
    assert err.value.render().splitlines() == [
        "gemm.tk:10:29: error: load: tile coordinate 2 of B is out of range: B has 2 tiles of 64 "
        "rows along dimension 0 (K = 128)",
        "          b: st<bf16>[BK, BN] = B.tile(k + 1, n)",
        "                                ^~~~~~~~~~~~~~~~",
    ]


def test_a_division_by_zero_points_at_the_example_line():
    """Refused at launch, as the GPU launcher refuses it (runtime/launch_checks.py)."""
    kernel = lower_source((EXAMPLES / "attention.tk").read_text(), "attention.tk", {"D": 64})
    q, kv = _bf16(1, 1, 64, 64), _bf16(1, 2, 64, 64)  # HKV > H: H // HKV is 0
    with pytest.raises(LaunchError) as err:
        run(kernel, [q, kv, kv, _nan(1, 1, 64, 64), _nan(1, 1, 64, dtype=torch.float32), 0.125])
    assert err.value.render() == (
        "error: attention: at attention.tk:22:9, `h // (H // HKV)` divides by `H // HKV`, which is 0 "
        "at this launch (H = 1, HKV = 2)")


def test_speed_of_the_gemm_and_attention_examples():
    """gemm.tk at 512^3 and attention.tk at 1x2x512x64 (full and causal) each in under 2 s."""
    import time
    times = {}
    for label, name, constants, shape in [("gemm 512^3", "gemm", {}, (512, 512, 512)),
                                          ("attention 1x2x512x64", "attention", {"D": 64}, (1, 2, 2, 512)),
                                          ("causal", "attention", {"D": 64, "CAUSAL": True}, (1, 2, 2, 512))]:
        kernel = lower_source((EXAMPLES / f"{name}.tk").read_text(), f"{name}.tk", constants)
        args, outputs, refs = CASES[name].make(shape, constants)
        t0 = time.perf_counter()
        run(kernel, args)
        times[label] = time.perf_counter() - t0
        assert ((outputs[0].double() - refs[0]).norm() / refs[0].norm()).item() <= BF16_TOL
    print("\ninterpreter, examples: " + "; ".join(f"{k} {v * 1e3:.1f} ms" for k, v in times.items()))
    assert max(times.values()) < 2.0
