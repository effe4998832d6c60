"""Generality: the examples written as a new user would (issues 17 and 18), each timed against the
best torch equivalent in the same run (``measure_pair``, alternated), with the backend each kernel
took (the compile log's ``backend:`` decision: ``wgmma`` for the Hopper path, ``mma.sync`` for the
register-tile fallback; ``interpreter`` in the dry run).

References, one row each:
- fused GEMM epilogues (bias + gelu / silu) and the MLP block: ``torch.compile`` of the same
  expression, and cuBLAS's plain ``torch.matmul`` (the epilogue's target: free);
- ``bmm`` vs ``torch.bmm``; ``gemm_alpha_beta`` vs ``Tensor.addmm_`` (cuBLAS, in place);
  ``gemm_atb`` vs ``torch.matmul(A.t(), B)``; ``gemm_fp8`` vs ``torch._scaled_mm``;
- norms vs ``torch.compile`` of the expression (their share of the measured copy bandwidth is
  filled in by run.py, as for the other memory-bound families);
- attention variants vs FlexAttention (``torch.compile``d ``flex_attention`` with the equivalent
  ``score_mod``/``block_mask``), and the plain ones (``attention_nol`` at head dims 64 to 256 and
  with grouped-query heads, ``attention_exp``, ``attention_mask``, ``attention_f16``) also vs SDPA
  cuDNN; ``attention_bwd`` is the forward (``attention.tk``, for O and L) and the three backward
  kernels against FlexAttention's and cuDNN's forward + backward (autograd), dQ, dK and dV checked;
- ``linear_attention`` (chunked causal linear attention, a D x D state carried across the
  sequence) vs ``torch.compile`` of the same chunked computation (per-chunk K^T V, an exclusive
  prefix sum of the states, Q_c S + tril(Q_c K_c^T) V_c), checked in float64 on two heads.

In the dry run (CPU) ``torch.compile`` is replaced by the eager expression (the row's reference
name says so): compiling with Inductor on the CPU takes longer than the whole dry run.

Outputs are poisoned (NaN) before the checked call; C of ``gemm_alpha_beta`` is read and written,
so its truth is taken before the call. Attention is checked in float64 on two heads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .checks import check_row, rel_err, sync
from .compare import time_pair
from .rows import Row, first_line
from .timing import Rotation

NAME = "generality"
FLOAT64_LIMIT = 8192 ** 3


@dataclass
class Spec:
    """One example: how to make its arguments, its exact outputs and its references."""
    make: Callable            # (p, dev) -> list of kernel arguments (tensors and scalars)
    outputs: tuple            # indices of the outputs among the arguments
    exact: Callable           # (p, args) -> [float64 truth], taken before the call
    views: Callable | None = None   # (p, args) -> [the outputs' parts compared with the truth]
    refs: Callable = None     # (p, ctx) -> [(name, fn(*args) -> tensor or tuple)]
    flops: Callable | None = None
    bytes: Callable | None = None
    inout: tuple = ()         # outputs that are read too (not poisoned)
    load: Callable | None = None   # (p, kernels) -> (kernel, compile_s); default: the example p["kernel"]


# ------------------------------------------------------------------ the cases

DRY_RUN = ("gemm_bias_gelu", "gemm_alpha_beta", "residual_layernorm", "attention_window")
"""The dry run's cases: one of each path (a baseline reference, C read and written, two outputs,
attention checked on two heads). tests/test_bench_script.py checks every spec's references."""


def cases(mode) -> list[dict]:
    chosen = getattr(mode, "kernels", ())
    unknown = [k for k in chosen if k not in FULL]
    if unknown:
        raise ValueError(f"generality: no example {', '.join(unknown)}; choose from {', '.join(FULL)}")
    if mode.dry_run:
        return [dict(kernel=k, **DRY[k]) for k in (chosen or DRY_RUN)]
    out = []
    for kernel, shapes in FULL.items():
        if chosen and kernel not in chosen:
            continue
        for shape in shapes[:1] if mode.quick else shapes:
            out.append(dict(kernel=kernel, **shape))
    return out


GEMMS = ("gemm_bias_gelu", "gemm_bias_silu", "gemm_alpha_beta", "gemm_atb", "gemm_fp8")
ATTENTION = ("attention_nol", "attention_window", "attention_softcap", "attention_alibi", "attention_exp",
             "attention_mask", "attention_f16", "attention_bwd")
PLAIN_ATTENTION = ("nol", "exp", "mask", "f16")
"""Variants that compute plain softmax attention (causal or not): SDPA cuDNN computes them too."""
FULL = {
    **{k: [{"M": 4096, "N": 4096, "K": 4096}, {"M": 8192, "N": 8192, "K": 8192}]
       for k in ("gemm_bias_gelu", "gemm_bias_silu", "gemm_fp8")},
    "gemm_alpha_beta": [{"M": 4096, "N": 4096, "K": 4096}],
    "gemm_atb": [{"M": 4096, "N": 4096, "K": 4096}],
    "bmm": [{"BATCH": 8, "M": 2048, "N": 2048, "K": 2048}],
    "mlp": [{"M": 65536, "F": 512}],
    "rmsnorm": [{"R": 65536, "D": 1024}, {"R": 16384, "D": 4096}, {"R": 8192, "D": 8192}],
    "residual_layernorm": [{"R": 65536, "D": 1024}, {"R": 16384, "D": 4096}, {"R": 8192, "D": 8192}],
    "attention_nol": [{"B": 4, "H": 16, "N": 4096, "D": 128, "causal": True},
                      {"B": 4, "H": 16, "N": 4096, "D": 128, "causal": False}],
    "attention_window": [{"B": 4, "H": 16, "N": 4096, "D": 128, "window": 1024}],
    "attention_softcap": [{"B": 4, "H": 16, "N": 4096, "D": 128, "softcap": 50.0}],
    "attention_alibi": [{"B": 4, "H": 16, "N": 4096, "D": 128}],
    "attention_exp": [{"B": 4, "H": 16, "N": 4096, "D": 128, "causal": True},
                      {"B": 4, "H": 16, "N": 4096, "D": 128, "causal": False}],
    "attention_mask": [{"B": 4, "H": 16, "N": 4096, "D": 128}],
    "attention_f16": [{"B": 4, "H": 16, "N": 4096, "D": 128, "causal": False}],
    "attention_bwd": [{"B": 4, "H": 16, "N": 4096, "D": 128, "causal": True}],
    "linear_attention": [{"B": 8, "H": 16, "N": 4096, "D": 64}, {"B": 8, "H": 16, "N": 16384, "D": 64}],
}
FULL["attention_nol"] += [{"B": 4, "H": 32, "HKV": 8, "N": 4096, "D": 128, "causal": True},
                          {"B": 4, "H": 16, "N": 4096, "D": 64, "causal": False},
                          {"B": 4, "H": 16, "N": 4096, "D": 96, "causal": False},
                          {"B": 4, "H": 16, "N": 4096, "D": 256, "causal": False}]
DRY = {
    **{k: {"M": 96, "N": 80, "K": 64, "BM": 64, "BN": 64} for k in GEMMS},
    "bmm": {"BATCH": 2, "M": 64, "N": 80, "K": 64, "BM": 64, "BN": 64},
    "mlp": {"M": 80, "F": 96, "D": 64},
    "rmsnorm": {"R": 20, "D": 256},
    "residual_layernorm": {"R": 20, "D": 256},
    "attention_nol": {"B": 1, "H": 2, "N": 100, "D": 64, "causal": True},
    "attention_window": {"B": 1, "H": 2, "N": 100, "D": 64, "window": 40},
    "attention_softcap": {"B": 1, "H": 2, "N": 100, "D": 64, "softcap": 5.0},
    "attention_alibi": {"B": 1, "H": 2, "N": 100, "D": 64},
    "attention_exp": {"B": 1, "H": 2, "N": 100, "D": 64, "causal": True},
    "attention_mask": {"B": 1, "H": 4, "HKV": 2, "N": 100, "D": 64},
    "attention_f16": {"B": 1, "H": 2, "N": 100, "D": 64, "causal": False},
    "attention_bwd": {"B": 1, "H": 2, "N": 100, "D": 64, "causal": True},
    "linear_attention": {"B": 1, "H": 2, "N": 100, "D": 64},
}


def constants_of(p: dict) -> dict:
    """The kernel constants a case sets (tile sizes in the dry run, the width of norms and MLP)."""
    keys = {"BM", "BN", "BQ", "BKV"}
    if p["kernel"] in ("rmsnorm", "residual_layernorm", "mlp") or p["kernel"] in ATTENTION:
        keys.add("D")
    if p["kernel"] in ("attention_nol", "attention_exp", "attention_f16", "attention_bwd"):
        keys.add("causal")
    out = {k: v for k, v in p.items() if k in keys}
    if "causal" in out:
        out["CAUSAL"] = out.pop("causal")
    if p["kernel"] in ATTENTION and p["D"] < 128 and p["N"] < 1024 and p["kernel"] != "attention_bwd":
        out.update(BQ=64, BKV=64)   # the dry run's tiny shapes; the GPU rows keep the examples' tiles
    return out


def shape_of(p: dict) -> str:
    skip = {"kernel", "BM", "BN"}
    parts = [f"{k}={v}" for k, v in p.items() if k not in skip and k != "causal"]
    return " ".join(parts) + (" causal" if p.get("causal") else "")


def backend_of(kernel, ctx) -> str:
    """The backend the compile log names (``wgmma``, ``mma.sync``; ``, column chunks`` when
    stream-cols ran the kernel over column chunks), ``interpreter`` on the CPU."""
    if kernel is None:
        return "-"
    if not ctx.cuda:
        return "interpreter"
    decisions = list(getattr(kernel, "decisions", []))
    streamed = any(getattr(d, "pass_name", None) == "stream-cols" and str(d.decision).startswith("streamed")
                   for d in decisions)  # a row-wise program run over column chunks (D = 4096, 8192)
    for d in decisions:
        if getattr(d, "pass_name", None) == "codegen" and str(d.decision).startswith("backend"):
            name = str(d.data.get("value") or d.decision.split(":", 1)[-1].strip())
            return f"{name}, column chunks" if streamed else name
    return "?"


# ------------------------------------------------------------------ references

BASELINES = frozenset({"cuBLAS matmul (no epilogue)"})
"""References that compute less than the kernel (a speed bound, not the same result): no error."""


def _compiled(fn, ctx, name: str):
    """(name, fn) compiled by torch.compile on the GPU; the eager fn in the dry run."""
    if ctx.cuda:
        import torch
        return f"torch.compile {name}", torch.compile(fn)
    return f"eager {name} (dry run)", fn


def _gemm_epilogue(act_name: str):
    def make(p, dev):
        import torch
        m, n, k = p["M"], p["N"], p["K"]
        return [torch.randn(m, k, dtype=torch.bfloat16, device=dev), torch.randn(k, n, dtype=torch.bfloat16, device=dev),
                torch.randn(n, dtype=torch.bfloat16, device=dev), torch.empty(m, n, dtype=torch.bfloat16, device=dev)]

    def exact(p, args):
        import torch.nn.functional as F
        a, b, bias, _ = args
        act = getattr(F, act_name)
        return [act(_product(p, a, b) + bias.double())]

    def refs(p, ctx):
        import torch
        import torch.nn.functional as F
        act = getattr(F, act_name)
        name, fused = _compiled(lambda a, b, bias: act(a @ b + bias), ctx, f"{act_name}(A·B + bias)")
        return [(name, lambda a, b, bias, c: fused(a, b, bias)),
                ("cuBLAS matmul (no epilogue)", lambda a, b, bias, c: torch.matmul(a, b, out=c))]

    return Spec(make, (3,), exact, refs=refs, flops=_gemm_flops)


def _product(p, a, b):
    """The exact product: float64 up to FLOAT64_LIMIT, float32 above (bf16 products are exact there)."""
    if p["M"] * p["N"] * p["K"] <= FLOAT64_LIMIT:
        return a.double() @ b.double()
    return (a.float() @ b.float()).double()


def _gemm_flops(p):
    return 2.0 * p["M"] * p["N"] * p["K"] * p.get("BATCH", 1)


def _bmm():
    def make(p, dev):
        import torch
        bt, m, n, k = p["BATCH"], p["M"], p["N"], p["K"]
        return [torch.randn(bt, m, k, dtype=torch.bfloat16, device=dev),
                torch.randn(bt, k, n, dtype=torch.bfloat16, device=dev),
                torch.empty(bt, m, n, dtype=torch.bfloat16, device=dev)]

    def refs(p, ctx):
        import torch
        return [("torch.bmm", lambda a, b, c: torch.bmm(a, b, out=c))]

    return Spec(make, (2,), lambda p, args: [args[0].double() @ args[1].double()], refs=refs, flops=_gemm_flops)


ALPHA, BETA = 1.5, 0.5


def _alpha_beta():
    def make(p, dev):
        import torch
        m, n, k = p["M"], p["N"], p["K"]
        return [torch.randn(m, k, dtype=torch.bfloat16, device=dev), torch.randn(k, n, dtype=torch.bfloat16, device=dev),
                torch.randn(m, n, dtype=torch.bfloat16, device=dev), ALPHA, BETA]

    def exact(p, args):
        a, b, c = args[:3]
        return [ALPHA * _product(p, a, b) + BETA * c.double()]

    def refs(p, ctx):
        return [("cuBLAS addmm_ (in place)", lambda a, b, c, alpha, beta: c.addmm_(a, b, beta=beta, alpha=alpha))]

    return Spec(make, (2,), exact, refs=refs, flops=_gemm_flops, inout=(2,))


def _atb():
    def make(p, dev):
        import torch
        m, n, k = p["M"], p["N"], p["K"]
        return [torch.randn(k, m, dtype=torch.bfloat16, device=dev), torch.randn(k, n, dtype=torch.bfloat16, device=dev),
                torch.empty(m, n, dtype=torch.bfloat16, device=dev)]

    def refs(p, ctx):
        import torch
        return [("cuBLAS matmul(A.t(), B)", lambda a, b, c: torch.matmul(a.t(), b, out=c))]

    return Spec(make, (2,), lambda p, args: [_product(p, args[0].t(), args[1])], refs=refs, flops=_gemm_flops)


FP8_SCALES = (0.5, 0.25)


def _fp8():
    def make(p, dev):
        import torch
        m, n, k = p["M"], p["N"], p["K"]
        return [(torch.randn(m, k, device=dev) * 2).to(torch.float8_e4m3fn),
                (torch.randn(n, k, device=dev) * 2).to(torch.float8_e4m3fn),
                torch.empty(m, n, dtype=torch.bfloat16, device=dev), *FP8_SCALES]

    def exact(p, args):
        return [FP8_SCALES[0] * FP8_SCALES[1] * _product(p, args[0], args[1].t())]

    def refs(p, ctx):
        import torch
        dev = ctx.device
        sa, sb = (torch.tensor(s, dtype=torch.float32, device=dev) for s in FP8_SCALES)
        return [("torch._scaled_mm", lambda a, b, c, *_: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb,
                                                                          out_dtype=torch.bfloat16))]

    return Spec(make, (2,), exact, refs=refs, flops=_gemm_flops)


def _mlp():
    def make(p, dev):
        import torch
        m, d, f = p["M"], p.get("D", 128), p["F"]
        return [torch.randn(m, d, dtype=torch.bfloat16, device=dev),
                (torch.randn(d, f, device=dev) * d ** -0.5).bfloat16(),
                (torch.randn(f, d, device=dev) * f ** -0.5).bfloat16(),
                torch.empty(m, d, dtype=torch.bfloat16, device=dev)]

    def exact(p, args):
        import torch.nn.functional as F
        x, w1, w2, _ = args
        return [F.gelu(x.double() @ w1.double(), approximate="tanh") @ w2.double()]

    def refs(p, ctx):
        import torch.nn.functional as F

        def mlp(x, w1, w2):
            return F.gelu(x @ w1, approximate="tanh") @ w2
        name, fused = _compiled(mlp, ctx, "MLP")
        return [(name, lambda x, w1, w2, y: fused(x, w1, w2)),
                ("cuBLAS matmuls + eager gelu", lambda x, w1, w2, y: mlp(x, w1, w2))]

    return Spec(make, (3,), exact, refs=refs, flops=lambda p: 4.0 * p["M"] * p.get("D", 128) * p["F"])


def _rmsnorm():
    def make(p, dev):
        import torch
        r, d = p["R"], p["D"]
        return [(torch.randn(r, d, device=dev) * 2 + 0.5).bfloat16(), torch.randn(d, dtype=torch.bfloat16, device=dev),
                torch.empty(r, d, dtype=torch.bfloat16, device=dev), 1e-6]

    def rms(x, w, eps):
        import torch
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    def exact(p, args):
        import torch
        x, w, _, eps = args
        xd = x.double()
        return [xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()]

    def refs(p, ctx):
        name, fused = _compiled(rms, ctx, "RMSNorm")
        return [(name, lambda x, w, y, eps: fused(x, w, eps))]

    return Spec(make, (2,), exact, refs=refs, bytes=lambda p: 2.0 * (2 * p["R"] * p["D"] + p["D"]))


def _residual_layernorm():
    def make(p, dev):
        import torch
        r, d = p["R"], p["D"]
        bf = dict(dtype=torch.bfloat16, device=dev)
        return [(torch.randn(r, d, device=dev) * 2 + 0.5).bfloat16(), torch.randn(r, d, **bf),
                torch.randn(d, **bf), torch.randn(d, **bf), torch.empty(r, d, **bf), torch.empty(r, d, **bf), 1e-5]

    def add_norm(x, res, w, b, eps):
        import torch.nn.functional as F
        h = x.float() + res.float()
        return h.to(x.dtype), F.layer_norm(h, (h.shape[-1],), w.float(), b.float(), eps=eps).to(x.dtype)

    def exact(p, args):
        import torch.nn.functional as F
        x, res, w, b = args[:4]
        h = x.double() + res.double()
        return [h, F.layer_norm(h, (p["D"],), w.double(), b.double(), eps=args[6])]

    def refs(p, ctx):
        name, fused = _compiled(add_norm, ctx, "add + LayerNorm")
        return [(name, lambda x, res, w, b, h, y, eps: fused(x, res, w, b, eps))]

    return Spec(make, (4, 5), exact, refs=refs, bytes=lambda p: 2.0 * (4 * p["R"] * p["D"] + 2 * p["D"]))


# ---- attention: FlexAttention and SDPA references, float64 truth on two heads

def _attention(variant: str):
    def make(p, dev):
        import torch
        b, h, n, d = p["B"], p["H"], p["N"], p["D"]
        dt = torch.float16 if variant == "f16" else torch.bfloat16
        hkv = p.get("HKV", h)
        q = torch.randn(b, h, n, d, dtype=dt, device=dev)
        k, v = (torch.randn(b, hkv, n, d, dtype=dt, device=dev) for _ in range(2))
        args = [q, k, v, torch.empty(b, h, n, d, dtype=dt, device=dev), d ** -0.5]
        if variant == "window":
            args.append(p["window"])
        elif variant == "softcap":
            args.append(p["softcap"])
        return args

    def exact(p, args):
        q, k, v, _, scale = args[:5]
        g = p["H"] // p.get("HKV", p["H"])
        return [exact_scores_softmax(p, variant, q[b, i].double(), k[b, i // g].double(), v[b, i // g].double(),
                                     scale, i)
                for b, i in checked_heads(p)]

    def views(p, args):
        return [args[3][b, i] for b, i in checked_heads(p)]

    def refs(p, ctx):
        out = [flex_reference(p, variant, ctx)]
        if variant in PLAIN_ATTENTION:
            out.append(("SDPA cuDNN", _sdpa_cudnn(p, variant)))
        return out

    return Spec(make, (3,), exact, views=views, refs=refs, flops=attention_flops)


def checked_heads(p):
    """The (batch, head) pairs checked in float64: the first and the last."""
    return sorted({(0, 0), (p["B"] - 1, p["H"] - 1)})


def alibi_slopes(h: int):
    import torch
    return 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=torch.float64) / h)


def is_causal(p, variant: str) -> bool:
    """Whether the variant hides the keys after each query (besides what else it hides)."""
    return variant in ("alibi", "window", "mask") or (variant in ("nol", "exp", "f16", "bwd") and bool(p.get("causal")))


def exact_scores_softmax(p, variant: str, q, k, v, scale: float, head: int):
    """softmax(scores) · v of one head in float64, the scores as the variant defines them."""
    import torch
    n = q.shape[0]
    s = (q @ k.T) * scale
    pos = torch.arange(n, device=q.device, dtype=torch.float64)
    dist = pos[:, None] - pos[None, :]
    if variant == "softcap":
        s = p["softcap"] * torch.tanh(s / p["softcap"])
    if variant == "alibi":
        s = s - alibi_slopes(p["H"])[head].item() * dist
    hidden = torch.zeros_like(dist, dtype=torch.bool)
    if is_causal(p, variant):
        hidden |= dist < 0
    if variant == "window":
        hidden |= dist >= p["window"]
    return torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1) @ v


def attention_flops(p) -> float:
    full = 4.0 * p["B"] * p["H"] * p["N"] ** 2 * p["D"]
    if p["kernel"] == "attention_bwd":
        full *= 3.5   # forward (2 products) and backward (5 products)
    if p["kernel"] == "attention_window":
        return full * min(1.0, p["window"] / p["N"])
    if is_causal(p, p["kernel"].removeprefix("attention_")):
        return full / 2
    return full


def flex_mods(p, variant: str, device: str):
    """(score_mod, mask_mod) for FlexAttention: the variant's scores and visible keys."""
    import torch
    mask_mod = score_mod = None
    if is_causal(p, variant):
        window = p.get("window")

        def mask_mod(b, h, q_idx, kv_idx):
            visible = q_idx >= kv_idx
            return visible & (q_idx - kv_idx < window) if variant == "window" else visible
    if variant == "softcap":
        cap = p["softcap"]

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)
    if variant == "alibi":
        slopes = alibi_slopes(p["H"]).float().to(device)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx)
    return score_mod, mask_mod


def flex_reference(p, variant: str, ctx):
    if variant == "bwd" and not ctx.cuda:   # FlexAttention has no backward on the CPU
        return "SDPA math fwd + bwd (dry run: no FlexAttention backward on the CPU)", _with_backward(_sdpa_math(p))
    name = "FlexAttention" + (" fwd + bwd" if variant == "bwd" else "") + ("" if ctx.cuda else " (eager, dry run)")
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as exc:  # noqa: BLE001 - an older torch: the row says so
        return name, _raiser(exc)
    score_mod, mask_mod = flex_mods(p, variant, ctx.device)
    if ctx.cuda:  # every variant recompiles flex_attention: past dynamo's cache limit (8) it would
        # run eagerly, tens of times slower, and the row would flatter tkjit (session 11 saw 33 ms)
        import torch._dynamo
        cfg = torch._dynamo.config
        cfg.cache_size_limit = max(cfg.cache_size_limit, 256)
        if hasattr(cfg, "accumulated_cache_size_limit"):
            cfg.accumulated_cache_size_limit = max(cfg.accumulated_cache_size_limit, 4096)
        if hasattr(cfg, "recompile_limit"):
            cfg.recompile_limit = max(cfg.recompile_limit, 256)
    fn = torch.compile(flex_attention) if ctx.cuda else flex_attention
    gqa = {"enable_gqa": True} if p.get("HKV", p["H"]) != p["H"] else {}
    state = {}

    def call(q, k, v, o, scale, *rest):
        if mask_mod is not None and "mask" not in state:   # built once, outside the timed calls
            state["mask"] = create_block_mask(mask_mod, None, None, p["N"], p["N"], device=ctx.device)
        return fn(q, k, v, score_mod=score_mod, block_mask=state.get("mask"), scale=scale, **gqa)
    if variant == "bwd":
        return name, _with_backward(call)
    return name, call


def _sdpa_cudnn(p, variant: str = "nol"):
    def call(q, k, v, o, scale, *rest):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal(p, variant), scale=scale, **gqa)
    if variant == "bwd":
        return _with_backward(call)
    return call


def _sdpa_math(p):
    def call(q, k, v, o, scale, *rest):
        import torch.nn.functional as F
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(p.get("causal")), scale=scale)
    return call


# ---- the attention backward: the forward for O and L, then Di, dK/dV and dQ

class _Backward:
    """examples/attention.tk's forward and the three backward kernels as one call, over the
    arguments ``q, k, v, do, scale, o, lse, di, dq, dk, dv`` (the last six written)."""

    def __init__(self, kernels, p):
        c = {"D": p["D"], "CAUSAL": bool(p.get("causal"))}
        self.parts = [kernels.get("attention", c), kernels.get("attention_bwd_prep", {"D": p["D"]}),
                      kernels.get("attention_bwd_dkdv", c), kernels.get("attention_bwd_dq", c)]
        self.fwd, self.prep, self.dkdv, self.dq = (k for k, _ in self.parts)
        self.decisions = list(getattr(self.dkdv, "decisions", []))   # the backend the row names

    @property
    def compile_s(self) -> float:
        return sum(s for _, s in self.parts)

    def __call__(self, q, k, v, do, scale, o, lse, di, dq, dk, dv):
        self.fwd(q, k, v, o, lse, scale)
        self.prep(o, do, di)
        self.dkdv(q, k, v, do, lse, di, dk, dv, scale)
        self.dq(q, k, v, do, lse, di, dq, scale)


def _with_backward(forward):
    """A reference's forward + autograd backward over the backward's arguments: (dq, dk, dv)."""
    def call(q, k, v, do, scale, *outs):
        import torch
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = forward(*leaves, None, scale)
        return torch.autograd.grad(out, leaves, do)
    return call


def _attention_backward():
    def make(p, dev):
        import torch
        b, h, n, d = p["B"], p["H"], p["N"], p["D"]
        bf = dict(dtype=torch.bfloat16, device=dev)
        q, k, v, do = (torch.randn(b, h, n, d, **bf) for _ in range(4))
        grads = [torch.empty(b, h, n, d, **bf) for _ in range(3)]
        rows = [torch.empty(b, h, n, dtype=torch.float32, device=dev) for _ in range(2)]
        return [q, k, v, do, d ** -0.5, torch.empty(b, h, n, d, **bf), *rows, *grads]

    def exact(p, args):
        """dV, then dK, then dQ of the checked heads (dV first: a reference's last output)."""
        import torch
        q, k, v, do, scale = args[:5]
        out = {"dq": [], "dk": [], "dv": []}
        for b, i in checked_heads(p):
            leaves = [t[b, i].double().requires_grad_() for t in (q, k, v)]
            o = exact_scores_softmax(p, "bwd", *leaves, scale, i)
            for name, g in zip(("dq", "dk", "dv"), torch.autograd.grad(o, leaves, do[b, i].double())):
                out[name].append(g)
        return out["dv"] + out["dk"] + out["dq"]

    def views(p, args):
        dq, dk, dv = args[8:11]
        return [t[b, i] for t in (dv, dk, dq) for b, i in checked_heads(p)]

    def refs(p, ctx):
        return [flex_reference(p, "bwd", ctx), ("SDPA cuDNN fwd + bwd", _sdpa_cudnn(p, "bwd"))]

    return Spec(make, (5, 6, 7, 8, 9, 10), exact, views=views, refs=refs, flops=attention_flops,
                load=lambda p, kernels: _loaded(_Backward(kernels, p)))


# ---- chunked causal linear attention: a D x D state carried across the sequence

LINEAR_CHUNK = 64
"""examples/linear_attention.tk's chunk C (its rows per trip)."""


def linear_attention_chunked(q, k, v, chunk: int = LINEAR_CHUNK):
    """The kernel's computation in torch, vectorized over the chunks: per chunk K_c^T V_c (f32),
    the state before each chunk (an exclusive prefix sum, f32, used in the inputs' dtype as the
    kernel uses it in bf16), O_c = Q_c S + tril(Q_c K_c^T) V_c. N is padded to whole chunks."""
    import torch
    import torch.nn.functional as F
    b, h, n, d = q.shape
    pad = -n % chunk
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    qc, kc, vc = (t.reshape(b, h, -1, chunk, d) for t in (q, k, v))
    kv = (kc.transpose(-1, -2) @ vc).float()
    state = (torch.cumsum(kv, dim=2) - kv).to(q.dtype)
    scores = (qc @ kc.transpose(-1, -2)).tril()
    out = qc @ state + scores @ vc
    return out.reshape(b, h, -1, d)[:, :, :n]


def linear_attention_exact(q, k, v, chunk: int = LINEAR_CHUNK):
    """One head's causal linear attention in float64, chunk by chunk (nothing rounded):
    O[i] = sum over j <= i of (q_i . k_j) v_j."""
    import torch
    q, k, v = (t.double() for t in (q, k, v))
    state = torch.zeros(q.shape[-1], v.shape[-1], dtype=torch.float64, device=q.device)
    out = torch.empty(q.shape[0], v.shape[-1], dtype=torch.float64, device=q.device)
    for c0 in range(0, q.shape[0], chunk):
        qc, kc, vc = q[c0:c0 + chunk], k[c0:c0 + chunk], v[c0:c0 + chunk]
        out[c0:c0 + chunk] = qc @ state + (qc @ kc.T).tril() @ vc
        state = state + kc.T @ vc
    return out


def _linear_attention():
    def make(p, dev):
        import torch
        b, h, n, d = p["B"], p["H"], p["N"], p["D"]
        q, k, v = ((torch.randn(b, h, n, d, device=dev) * d ** -0.5).bfloat16() for _ in range(3))
        return [q, k, v, torch.empty(b, h, n, d, dtype=torch.bfloat16, device=dev)]

    def exact(p, args):
        q, k, v = args[:3]
        return [linear_attention_exact(q[b, i], k[b, i], v[b, i]) for b, i in checked_heads(p)]

    def views(p, args):
        return [args[3][b, i] for b, i in checked_heads(p)]

    def refs(p, ctx):
        name, fused = _compiled(linear_attention_chunked, ctx, "chunked linear attention")
        return [(name, lambda q, k, v, o: fused(q, k, v))]

    def flops(p):  # per chunk of C rows: Q K^T and A V (2 C^2 D each), Q S and K^T V (2 C D^2 each)
        return 4.0 * p["B"] * p["H"] * p["N"] * p["D"] * (LINEAR_CHUNK + p["D"])

    return Spec(make, (3,), exact, views=views, refs=refs, flops=flops)


def _loaded(kernel):
    return kernel, kernel.compile_s


def _raiser(exc: Exception):
    def call(*args):
        raise exc
    return call


SPECS: dict[str, Spec] = {
    "gemm_bias_gelu": _gemm_epilogue("gelu"), "gemm_bias_silu": _gemm_epilogue("silu"), "bmm": _bmm(),
    "gemm_alpha_beta": _alpha_beta(), "gemm_atb": _atb(), "gemm_fp8": _fp8(), "mlp": _mlp(),
    "rmsnorm": _rmsnorm(), "residual_layernorm": _residual_layernorm(),
    **{f"attention_{v}": _attention(v) for v in ("nol", "window", "softcap", "alibi", "exp", "mask", "f16")},
    "attention_bwd": _attention_backward(),
    "linear_attention": _linear_attention(),
}


# ------------------------------------------------------------------ running a case

def set_bytes(args) -> int:
    return sum(a.numel() * a.element_size() for a in args if hasattr(a, "numel"))


def run(p: dict, ctx, kernels) -> list[Row]:
    spec = SPECS[p["kernel"]]
    kernel, compile_s, failure = None, None, None
    try:
        kernel, compile_s = spec.load(p, kernels) if spec.load else kernels.get(p["kernel"], constants_of(p) or None)
    except Exception as exc:  # noqa: BLE001
        failure = exc
    backend = backend_of(kernel, ctx)
    refs = spec.refs(p, ctx)
    rows = [Row(NAME, f"{p['kernel']} vs {name}", shape_of(p), ref_name=name, params=p,
                flops=spec.flops(p) if spec.flops else None, bytes=spec.bytes(p) if spec.bytes else None,
                extra={"kernel": p["kernel"], "backend": backend}) for name, _ in refs]

    args = spec.make(p, ctx.device)
    pristine = [a.clone() if hasattr(a, "clone") else a for a in args]
    truth = spec.exact(p, args)
    if kernel is not None:
        for i in spec.outputs:
            if i not in spec.inout:
                args[i].fill_(float("nan"))
        try:
            kernel(*args)
            sync(ctx)
        except Exception as exc:  # noqa: BLE001
            failure = exc
    views = spec.views(p, args) if spec.views else [args[i] for i in spec.outputs]
    for row in rows:
        row.compile_s = compile_s
        if failure is not None:
            row.fail(failure)
        elif kernel is not None:
            check_row(row, list(zip(views, truth)), outputs=tuple(args[i] for i in spec.outputs))
    del args, views
    for row, (name, ref) in zip(rows, refs):
        if name not in BASELINES:
            _reference_error(row, ref, pristine, p, spec, truth)
    del pristine, truth

    def make_set():
        return tuple(spec.make(p, ctx.device))

    probe = make_set()
    rotation = Rotation(make_set, set_bytes(probe), ctx)
    del probe

    def tkjit_call(*inputs):
        kernel(*inputs)

    for row, (_, ref) in zip(rows, refs):
        time_pair(row, ctx, rotation, tkjit_call if kernel is not None else None, ref)
    return rows


def _reference_error(row: Row, ref, pristine: list, p: dict, spec: Spec, truth: list) -> None:
    try:
        row.ref_rel_err = reference_error(ref, pristine, p, spec, truth)
    except Exception as exc:  # noqa: BLE001
        row.ref_error = first_line(exc)


def reference_error(ref, pristine: list, p: dict, spec: Spec, truth: list) -> float:
    """The reference's own error against the truth (its last output against the last truth;
    for attention, the checked heads), on copies of the arguments."""
    args = [a.clone() if hasattr(a, "clone") else a for a in pristine]
    out = ref(*args)
    out = out[-1] if isinstance(out, tuple) else out
    if spec.views is not None:
        parts = [out[b, i] for b, i in checked_heads(p)]
        return max(rel_err(x, t) for x, t in zip(parts, truth))
    return rel_err(out, truth[-1])


# ------------------------------------------------------------------ the README's table

def generality_table(rows: list[dict]) -> str:
    """Markdown: kernel → backend → reference → ratio (reference time / tkjit time) → status."""
    lines = ["| kernel | shape | backend | reference | ratio | status |", "|---|---|---|---|---|---|"]
    for row in rows:
        if row["family"] != NAME:
            continue
        ratio = "-" if row.get("ratio") is None else f"{row['ratio']:.2f}×"
        extra = row.get("extra") or {}
        lines.append(f"| {extra.get('kernel', '?')} | {row['shape']} | {extra.get('backend', '?')} | "
                     f"{row['ref_name']} | {ratio} | {row['status']} |")
    return "\n".join(lines) if len(lines) > 2 else ""

