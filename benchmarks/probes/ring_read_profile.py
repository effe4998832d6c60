"""ncu target for the ring-read kernels (session 18): runs rms_linear as written (a ring tile read
into registers each trip), the same product without the read (rms_linear with the sum of squares
taken from a second load of X: rms_linear_twice), and the same tiles' plain GEMM (gemm128), 3 launches each at 4096^3.

    ncu --section WarpStateStats --section SpeedOfLight -k regex:'rms|gemm' python3 benchmarks/probes/ring_read_profile.py
    python3 benchmarks/probes/ring_read_profile.py --time   (median ms, and cuBLAS's over each)
"""
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent
M = N = K = 4096
x = torch.randn(M, K, device="cuda").bfloat16()
w = (torch.randn(K, N, device="cuda") * K ** -0.5).bfloat16()
y = torch.empty(M, N, device="cuda").bfloat16()
for name in ("rms_linear", "rms_linear_twice"):
    k = tkjit.load(HERE / "unseen" / f"{name}.tk")
    for _ in range(3):
        k(x, w, y, 1e-5)
PLAIN = """
kernel gemm128<BM = 128, BN = 128, BK = 64>(X: gl<bf16>[M, K], W: gl<bf16>[K, N], Y: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / BK {
      x: st<bf16>[BM, BK] = X.tile(m, k)
      w: st<bf16>[BK, BN] = W.tile(k, n)
      acc = mma_AB(x, w, acc)
    }
    Y.tile(m, n) = cvt<bf16>(acc)
  }
}
"""
g = tkjit.compile(PLAIN)  # the same tiles and schedule without the read
for _ in range(3):
    g(x, w, y)
torch.cuda.synchronize()


def timed(fn, n=50):
    """Median ms of ``fn`` over ``n`` launches (CUDA events, after warm-up: norm_schedules._events)."""
    import sys
    sys.path.insert(0, str(HERE.parent))
    from norm_schedules import _events
    _events(fn, 5)
    return sorted(_events(fn, n))[n // 2]


if __name__ == "__main__":
    import sys
    if "--time" in sys.argv:  # the three kernels and cuBLAS, alternating rounds
        rms = tkjit.load(HERE / "unseen" / "rms_linear.tk")
        src = (HERE / "unseen" / "rms_linear.tk").read_text()
        from tkjit.passes import DEFAULT_PIPELINE
        coop = tkjit.compile(src, pipeline=DEFAULT_PIPELINE.replace("warp-spec", "warp-spec{mode=cooperative}", 1))
        print(coop.metadata["protocol"].splitlines()[0])
        kernels = {"rms_linear": lambda: rms(x, w, y, 1e-5), "rms_linear_coop": lambda: coop(x, w, y, 1e-5),
                   "gemm128": lambda: g(x, w, y), "cublas": lambda: x @ w}
        out = {name: [] for name in kernels}
        for r in range(6):
            for name, fn in (list(kernels.items()) if r % 2 == 0 else list(kernels.items())[::-1]):
                out[name].append(timed(fn))
        med = {name: sorted(v)[len(v) // 2] for name, v in out.items()}
        print({name: round(v, 4) for name, v in med.items()},
              {f"cublas/{name}": round(med["cublas"] / v, 3) for name, v in med.items()})
