"""A kernel none of the examples is: a batched GEMM with B transposed, the K loop from a runtime
tile k0, scaled, silu, plus a residual tile loaded into registers (benchmarks/probes/bgemm_residual.tk).
Checks it at ragged shapes against float64 torch, then times it against torch.compile of the same
expression and cuBLAS's bmm alone, interleaved (GPU). Run from the repository root:

    python3 benchmarks/probes/bgemm_residual.py
"""
import statistics

import torch

import tkjit

k = tkjit.load("benchmarks/probes/bgemm_residual.tk", require_hopper=True)


def ref_fn(a, b, r, alpha, k0):
    prod = torch.bmm(a[:, :, 64 * k0:], b[:, :, 64 * k0:].transpose(1, 2)).float()
    return (torch.nn.functional.silu(prod * alpha) + r.float()).bfloat16()


for (G, M, N, K) in [(3, 1000, 600, 520), (2, 200, 300, 320)]:
    a = torch.randn(G, M, K, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(G, N, K, dtype=torch.bfloat16, device="cuda")
    r = torch.randn(G, M, N, dtype=torch.bfloat16, device="cuda")
    c = torch.full((G, M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    k(a, b, r, c, 0.5, 1)
    torch.cuda.synchronize()
    want = torch.nn.functional.silu((a[:, :, 64:].double() @ b[:, :, 64:].double().transpose(1, 2)) * 0.5) + r.double()
    print("ragged", (G, M, N, K), "rel err", ((c.double() - want).norm() / want.norm()).item(), "nan", c.isnan().sum().item())
G, M, N, K = 8, 2048, 2048, 2048
comp = torch.compile(ref_fn)
a = torch.randn(G, M, K, dtype=torch.bfloat16, device="cuda")
b = torch.randn(G, N, K, dtype=torch.bfloat16, device="cuda")
r = torch.randn(G, M, N, dtype=torch.bfloat16, device="cuda")
c = torch.empty(G, M, N, dtype=torch.bfloat16, device="cuda")
fns = {"tkjit": lambda: k(a, b, r, c, 0.5, 0), "torch.compile": lambda: comp(a, b, r, 0.5, 0),
       "bmm only": lambda: torch.bmm(a, b.transpose(1, 2))}
for f in fns.values():
    for _ in range(3):
        f()
times = {n: [] for n in fns}
for i in range(15):
    for n, f in (list(fns.items()) if i % 2 == 0 else list(fns.items())[::-1]):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            f()
        e.record()
        e.synchronize()
        times[n].append(s.elapsed_time(e) / 10)
med = {n: statistics.median(t) for n, t in times.items()}
print({n: round(v, 4) for n, v in med.items()}, "vs torch.compile %.3f, vs bmm alone %.3f"
      % (med["torch.compile"] / med["tkjit"], med["bmm only"] / med["tkjit"]))
