"""Same-run A/B of source and schedule variants of the probe benchmarks/probes/bgemm_residual.tk
(GPU): each is checked once at a ragged shape against float64 torch (output poisoned), then
timed at 8x2048³ with torch.compile of the same expression and torch.bmm alone, over 4 rotating
input sets, in 15 interleaved batches of 12 launches (CUDA events). From the repository root:

    python3 benchmarks/probes/bgemm_residual_variants.py results.json

Variants: base (the probe as written, the schedule the passes choose), base_coop
(warp-spec{mode=cooperative}), base_bn256 (BN = 256), bf16 (the residual declared rt<bf16> and
widened with cvt<f32> at its use), nores (no residual add), plain (C = A·Bᵀ only), shared (the
residual loaded as a shared tile after the loop and read into registers), shared_general (the same
under lowering='general': persistent, two slots), shared_early_general (its load written before
the loop).
"""
import json
import statistics
import sys
from pathlib import Path

import torch

import tkjit
from tkjit.passes import default_pipeline

BASE = Path("benchmarks/probes/bgemm_residual.tk").read_text()
LOAD = "    r: rt<f32>[BM, BN] = R.tile(g, m, n)\n"
PIPELINE = str(default_pipeline("sm_90a"))
VARIANTS = {
    "base": (BASE, {}),
    "base_coop": (BASE, {"pipeline": PIPELINE.replace("warp-spec", "warp-spec{mode=cooperative}")}),
    "base_bn256": (BASE, {"constants": {"BN": 256}}),
    "bf16": (BASE.replace(LOAD, LOAD.replace("rt<f32>", "rt<bf16>")).replace("+ r)", "+ cvt<f32>(r))"), {}),
    "nores": (BASE.replace(LOAD, "").replace(" + r)", ")"), {}),
    "plain": (BASE.replace(LOAD, "").replace("cvt<bf16>(silu(acc * alpha) + r)", "cvt<bf16>(acc)"), {}),
}
SHARED = BASE.replace(LOAD, "    rs: st<bf16>[BM, BN] = R.tile(g, m, n)\n    r: rt<f32>[BM, BN] = rs\n")
VARIANTS["shared"] = (SHARED, {})
VARIANTS["shared_general"] = (SHARED, {"lowering": "general"})
VARIANTS["shared_early_general"] = (SHARED.replace("    for k in k0", "    rs: st<bf16>[BM, BN] = R.tile(g, m, n)\n    for k in k0", 1)
                                    .replace("    rs: st<bf16>[BM, BN] = R.tile(g, m, n)\n    r: rt", "    r: rt"), {"lowering": "general"})


def expected(name, a, b, r, alpha, k0):
    p = a[:, :, 64 * k0:].double() @ b[:, :, 64 * k0:].double().transpose(1, 2)
    if name == "plain":
        return p
    p = torch.nn.functional.silu(p * alpha)
    return p if name == "nores" else p + r.double()


def launcher(k):
    return lambda a, b, r, c: k(a, b, r, c, 0.5, 0)


def main(out: str) -> None:
    kernels = {n: tkjit.compile(src, require_hopper=True, **kw) for n, (src, kw) in VARIANTS.items()}
    G, M, N, K = 3, 1000, 600, 520
    a, b = (torch.randn(G, M, K, device="cuda").bfloat16(), torch.randn(G, N, K, device="cuda").bfloat16())
    r = torch.randn(G, M, N, device="cuda").bfloat16()
    for n, k in kernels.items():
        c = torch.full((G, M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        k(a, b, r, c, 0.5, 1)
        torch.cuda.synchronize()
        want = expected(n, a, b, r, 0.5, 1)
        err = ((c.double() - want).norm() / want.norm()).item()
        print(f"{n} rel err {err:.2e} nan {c.isnan().sum().item()}")
    G, M, N, K = 8, 2048, 2048, 2048
    comp = torch.compile(lambda a, b, r, alpha: (torch.nn.functional.silu(
        torch.bmm(a, b.transpose(1, 2)).float() * alpha) + r.float()).bfloat16())
    sets = [(torch.randn(G, M, K, device="cuda").bfloat16(), torch.randn(G, N, K, device="cuda").bfloat16(),
             torch.randn(G, M, N, device="cuda").bfloat16(), torch.empty(G, M, N, dtype=torch.bfloat16, device="cuda"))
            for _ in range(4)]
    fns = {n: launcher(k) for n, k in kernels.items()}
    fns["torch.compile"] = lambda a, b, r, c: comp(a, b, r, 0.5)
    fns["bmm"] = lambda a, b, r, c: torch.bmm(a, b.transpose(1, 2), out=c)
    for f in fns.values():
        for s in sets:
            f(*s)
    torch.cuda.synchronize()
    times = {n: [] for n in fns}
    order = list(fns)
    for i in range(15):
        for n in (order if i % 2 == 0 else order[::-1]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for j in range(12):
                fns[n](*sets[j % 4])
            end.record()
            end.synchronize()
            times[n].append(start.elapsed_time(end) / 12)
    med = {n: statistics.median(t) for n, t in times.items()}
    for n, v in med.items():
        print(f"{n:16s} {v * 1e3:8.1f} us  vs torch.compile {med['torch.compile'] / v:.3f}  vs bmm {med['bmm'] / v:.3f}")
    Path(out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "shape": [G, M, N, K],
                                     "median_ms": med}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bgemm_residual_variants.json")
