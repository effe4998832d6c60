#!/usr/bin/env python3
"""Kernels on strided views against the same kernels on contiguous copies, in the same run (GPU).

    python3 benchmarks/strided.py [--quick] [--out PATH]

Each case launches one kernel on views (q/k/v of a fused QKV projection, sliced GEMM operands, an
output window of a larger buffer, row slices) and on contiguous copies of the same tensors made
beforehand, timed in alternating rounds with CUDA events (tkbench.timing.measure_pair: per-call
events, the median over 8 rounds per side); the ratio is view time / contiguous time (the target:
at most 1.03). ``copy+kernel`` is what the user paid before views were taken: ``.contiguous()``
of each view, then the kernel (timed the same way, against the same contiguous launch). A case
also says how the views went: ``as is`` (TMA maps or stride parameters; no copy) or ``copied``
(the kernel's copying fallback warned). Outputs are checked against torch once per case.

The JSON goes to --out, else <date>-<gpu>-strided.json in $OUT when it is set, else in
benchmarks/results/.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import types
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (str(REPO), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tkjit  # noqa: E402
from tkbench.timing import measure_pair  # noqa: E402

EXAMPLES = REPO / "examples"
CTX = types.SimpleNamespace(cuda=True, have_triton=False, warmup_ms=50.0, rep_ms=400.0)
TARGET = 1.03


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, dtype=dtype, device="cuda")


def gemm_case(m, n, k, out_view: bool):
    a = rand(m, k + 64)[:, 64:]              # a column slice: row stride k + 64, offset 128 bytes
    b = rand(2 * k, n)[::2]                  # every other row
    c_base = torch.empty(m, n + 64, dtype=torch.bfloat16, device="cuda")
    c = c_base[:, :n] if out_view else torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    return (f"gemm {m}x{n}x{k}" + (" C view" if out_view else ""), tkjit.load(EXAMPLES / "gemm.tk"),
            [a, b, c], [2], lambda args: [args[0].float() @ args[1].float()], 2e-1)


def attention_case(bsz, h, n, d, causal):
    kernel = tkjit.load(EXAMPLES / "attention.tk", constants={"D": d, "CAUSAL": causal})
    qkv = rand(bsz, n, 3 * h * d)
    q, k, v = qkv.view(bsz, n, 3, h, d).permute(2, 0, 3, 1, 4)
    o = torch.empty(bsz, h, n, d, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(bsz, h, n, dtype=torch.float32, device="cuda")

    def ref(args):
        return [F.scaled_dot_product_attention(args[0], args[1], args[2], is_causal=causal,
                                               scale=d ** -0.5).float()]
    return (f"attention {bsz}x{h}x{n} D={d}{' causal' if causal else ''} (qkv views)", kernel,
            [q, k, v, o, lse, d ** -0.5], [3], ref, 2e-2)


def gelu_case(m, n, k):
    kernel = tkjit.load(EXAMPLES / "gemm_bias_gelu.tk")
    a = rand(m, 2 * k)[:, k:]
    b = rand(k, n + 64)[:, 64:]
    bias = rand(n)
    c = torch.empty(m, 2 * n, dtype=torch.bfloat16, device="cuda")[:, n:]
    return (f"gemm_bias_gelu {m}x{n}x{k} (general lowering)", kernel, [a, b, bias, c], [3],
            lambda args: [F.gelu(args[0].float() @ args[1].float() + args[2].float())], 2e-1)


def softmax_case(rows, cols):
    kernel = tkjit.load(EXAMPLES / "softmax.tk", constants={"C": cols})
    x = rand(rows, 2 * cols)[:, cols:]
    y = torch.empty(2 * rows, cols, dtype=torch.bfloat16, device="cuda")[::2]
    return (f"softmax {rows}x{cols} (register tiles)", kernel, [x, y], [1],
            lambda args: [torch.softmax(args[0].float(), -1)], 1e-2)


def cases(quick: bool):
    out = [gemm_case(4096, 4096, 4096, False), gemm_case(4096, 4096, 4096, True),
           gemm_case(4096, 4096, 1024, False),
           attention_case(4, 16, 4096, 128, False), attention_case(4, 16, 4096, 128, True),
           gelu_case(4096, 4096, 4096), softmax_case(65536, 1024)]
    if not quick:
        out.insert(5, attention_case(4, 16, 4096, 64, False))
    return out


def run_case(name, kernel, views, outputs, reference, atol) -> dict:
    contiguous = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in views]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        kernel(*views)
        torch.cuda.synchronize()
    copied = [str(w.message) for w in got if "copied to a contiguous tensor" in str(w.message)]
    for i, expected in zip(outputs, reference(views)):
        torch.testing.assert_close(views[i].float(), expected, rtol=2e-2, atol=atol)

    def on_views():
        kernel(*views)

    def on_copies():
        kernel(*contiguous)

    def copy_then_kernel():
        fresh = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in views]
        kernel(*fresh)
        for i in outputs:
            views[i].copy_(fresh[i])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_view, t_cont = measure_pair(on_views, on_copies, CTX)
        t_copy, t_cont2 = measure_pair(copy_then_kernel, on_copies, CTX)
    ratio = t_view.median_ms / t_cont.median_ms
    return {"case": name, "views": "copied" if copied else "as is", "copied": copied,
            "view_ms": t_view.median_ms, "contiguous_ms": t_cont.median_ms, "ratio": ratio,
            "copy_then_kernel_ms": t_copy.median_ms, "copy_ratio": t_copy.median_ms / t_cont2.median_ms,
            "within_target": ratio <= TARGET, "view": t_view.to_json(), "contiguous": t_cont.to_json()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the D=64 attention case")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/strided.py: no CUDA GPU here (it times kernels on one)", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name()
    rows = []
    for case in cases(args.quick):
        row = run_case(*case)
        rows.append(row)
        print(f"{row['case']:<52} {row['views']:>6}  view {row['view_ms']:.4f} ms  contiguous "
              f"{row['contiguous_ms']:.4f} ms  ratio {row['ratio']:.3f}  copy+kernel {row['copy_ratio']:.3f}x",
              flush=True)
    print(f"\n{'case':<52} {'views':>6} {'view/contig':>11} {'copy+kernel':>11}  target <= {TARGET}")
    for r in rows:
        print(f"{r['case']:<52} {r['views']:>6} {r['ratio']:>11.3f} {r['copy_ratio']:>11.3f}  "
              f"{'ok' if r['within_target'] else 'MISSED'}")
    date = datetime.date.today().isoformat()
    name = f"{date}-{gpu.lower().replace(' ', '-')}-strided.json"
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else HERE / "results") / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": date, "gpu": gpu, "torch": torch.__version__, "target": TARGET,
                               "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["within_target"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
