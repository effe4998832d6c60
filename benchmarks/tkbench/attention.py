"""Attention forward, ``examples/attention.tk`` (Q, K, V, O [B, H, N, D], L [B, H, N], scale;
constants D and CAUSAL) against PyTorch's SDPA with the cuDNN backend and with the flash
backend: 16k tokens (B·N = 16384), H = 16, N from 1024 to 16384, D 64 and 128, causal and not.
FLOPs = 4·B·H·N²·D, halved when causal.

Every output element is checked for being written; the values are compared with a float64
reference on two heads (the first and the last): a float64 score matrix for all heads at
N = 16384 would not fit on the card."""
from __future__ import annotations

import math

from .checks import check_row, poisoned, rel_err, sync
from .compare import time_pair
from .rows import Row, first_line
from .timing import Rotation

NAME = "attention"
TOKENS = 16384
HEADS = 16
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
BACKENDS = (("cuDNN", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION"))


def cases(mode) -> list[dict]:
    if mode.dry_run:
        return [_case(1, 2, 128, 64, causal) for causal in (False, True)]
    return [_case(TOKENS // n, HEADS, n, d, causal)
            for d in HEAD_DIMS for causal in (False, True) for n in SEQ_LENS]


def _case(b: int, h: int, n: int, d: int, causal: bool) -> dict:
    return {"B": b, "H": h, "N": n, "D": d, "causal": causal}


def shape_of(p: dict) -> str:
    kind = " causal" if p["causal"] else ""
    return f"B={p['B']} H={p['H']} N={p['N']} D={p['D']}{kind}"


def flops_of(p: dict) -> float:
    full = 4.0 * p["B"] * p["H"] * p["N"] ** 2 * p["D"]
    return full / 2 if p["causal"] else full


def exact_head(q, k, v, scale: float, causal: bool):
    """O and the natural-log log-sum-exp of one head ([N, D] inputs), in float64."""
    import torch
    s = (q.double() @ k.double().T) * scale
    if causal:
        above = torch.ones(s.shape, dtype=torch.bool, device=s.device).triu(1)
        s.masked_fill_(above, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.exp(s - lse[:, None]) @ v.double()
    return o, lse


def run(p: dict, ctx, kernels) -> list[Row]:
    import torch
    import torch.nn.functional as F
    bsz, h, n, d, causal = p["B"], p["H"], p["N"], p["D"], p["causal"]
    scale = 1.0 / math.sqrt(d)
    bf16, dev = torch.bfloat16, ctx.device
    rows = [Row(NAME, f"attn fwd vs SDPA {label}", shape_of(p), ref_name=f"SDPA {label}", params=p,
                flops=flops_of(p)) for label, _ in BACKENDS]
    kernel, compile_s, failure = None, None, None
    try:
        kernel, compile_s = kernels.get("attention", {"D": d, "CAUSAL": causal})
    except Exception as exc:  # noqa: BLE001
        failure = exc

    q, k, v = (torch.randn(bsz, h, n, d, dtype=bf16, device=dev) for _ in range(3))
    heads = sorted({(0, 0), (bsz - 1, h - 1)})
    exact = [exact_head(q[b, i], k[b, i], v[b, i], scale, causal) for b, i in heads]
    checked = None
    if kernel is not None:
        o, lse = poisoned((bsz, h, n, d), bf16, dev), poisoned((bsz, h, n), torch.float32, dev)
        try:
            kernel(q, k, v, o, lse, scale)
            sync(ctx)
            checked = (o, lse)
        except Exception as exc:  # noqa: BLE001
            failure = exc
    for row in rows:
        row.compile_s = compile_s
        if failure is not None:
            row.fail(failure)
        elif checked is not None:
            o, lse = checked
            pairs = [(o[b, i], ref_o) for (b, i), (ref_o, _) in zip(heads, exact)]
            pairs += [(lse[b, i], ref_l) for (b, i), (_, ref_l) in zip(heads, exact)]
            check_row(row, pairs, outputs=(o, lse))
    checked = None
    backends = [_backend(name) for _, name in BACKENDS]
    for row, backend in zip(rows, backends):
        _reference_error(row, backend, q, k, v, heads, exact, causal, scale)
    del q, k, v, exact

    def make_set():
        return (*(torch.randn(bsz, h, n, d, dtype=bf16, device=dev) for _ in range(3)),
                torch.empty(bsz, h, n, d, dtype=bf16, device=dev),
                torch.empty(bsz, h, n, dtype=torch.float32, device=dev))

    rotation = Rotation(make_set, 2 * 4 * bsz * h * n * d + 4 * bsz * h * n, ctx)

    def tkjit_call(q_, k_, v_, o_, l_):
        kernel(q_, k_, v_, o_, l_, scale)

    def ref_call(q_, k_, v_, o_, l_):
        F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal, scale=scale)

    for row, backend in zip(rows, backends):
        if isinstance(backend, Exception):
            row.ref_error = row.ref_error or first_line(backend)
            time_pair(row, ctx, rotation, tkjit_call if kernel is not None else None, None)
            continue
        with _sdpa_kernel(backend):   # the backend is chosen once, outside the timed calls
            time_pair(row, ctx, rotation, tkjit_call if kernel is not None else None, ref_call)
    return rows


def _backend(name: str):
    """The SDPBackend member, or the exception that says this torch has none."""
    try:
        from torch.nn.attention import SDPBackend
        return getattr(SDPBackend, name)
    except Exception as exc:  # noqa: BLE001
        return exc


def _sdpa_kernel(backend):
    if isinstance(backend, Exception):
        raise backend
    from torch.nn.attention import sdpa_kernel
    return sdpa_kernel(backend)


def _reference_error(row: Row, backend, q, k, v, heads, exact, causal: bool, scale: float) -> None:
    import torch.nn.functional as F
    try:
        with _sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        row.ref_rel_err = max(rel_err(out[b, i], ref_o) for (b, i), (ref_o, _) in zip(heads, exact))
    except Exception as exc:  # noqa: BLE001
        row.ref_error = first_line(exc)
