"""Time each tile/split candidate of examples/gemm.tk against torch.matmul at a few shapes, in
one run: the evidence the @fill_sms model (tkjit/fill_sms.py) is checked against.

    python benchmarks/gemm_candidates.py --out results.json [--shapes 128x4096x4096,...]

Each candidate is a variant compiled with its constants pinned; each row also names the
variant @fill_sms picks for that shape. Timing: CUDA events around batches of launches over
input sets rotated past the L2, median of the batches; both sides in the same loop.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch

import tkjit

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gemm.tk"
SHAPES = ((128, 4096, 4096), (128, 14336, 4096), (128, 4096, 14336), (1024, 4096, 4096))
TILES = ((128, 256), (128, 128), (128, 64), (64, 256), (64, 128), (64, 64))
SPLITS = (1, 2, 4)
L2_BYTES = 60 << 20


def timed(fn, sets, batches=15, per_batch=10) -> float:
    """Median microseconds per call."""
    for s in sets[:2]:
        fn(*s)
    torch.cuda.synchronize()
    out = []
    for i in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for j in range(per_batch):
            fn(*sets[(i * per_batch + j) % len(sets)])
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1000 / per_batch)
    return statistics.median(out)


def input_sets(m, n, k):
    size = (m * k + k * n + m * n) * 2
    count = max(2, -(-2 * L2_BYTES // size))
    return [(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
             torch.randn(k, n, dtype=torch.bfloat16, device="cuda"),
             torch.empty(m, n, dtype=torch.bfloat16, device="cuda")) for _ in range(count)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    rows, t0 = [], time.time()
    auto = tkjit.load(EXAMPLE)
    for m, n, k in shapes:
        sets = input_sets(m, n, k)
        ref = timed(lambda a, b, c: torch.matmul(a, b, out=c), sets)
        a, b, c = sets[0]
        auto(a, b, c)
        pick = [line for line in auto.explain().splitlines() if f"M={m} N={n} K={k}" in line]
        t_auto = timed(auto, sets)
        row = {"M": m, "N": n, "K": k, "torch_us": ref, "auto_us": t_auto, "auto_ratio": ref / t_auto,
               "auto_choice": pick[-1].strip() if pick else None, "candidates": []}
        for (bm, bn), split in itertools.product(TILES, SPLITS):
            try:
                kernel = tkjit.load(EXAMPLE, constants={"BM": bm, "BN": bn, "SPLIT": split})
                kernel(a, b, c)
                torch.cuda.synchronize()
                err = ((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()
                us = timed(kernel, sets)
                row["candidates"].append({"BM": bm, "BN": bn, "SPLIT": split, "us": us,
                                          "ratio": ref / us, "rel_err": err})
            except Exception as e:  # noqa: BLE001 - a candidate that fails is recorded, not fatal
                row["candidates"].append({"BM": bm, "BN": bn, "SPLIT": split, "error": str(e)[:300]})
        best = min((r for r in row["candidates"] if "us" in r), key=lambda r: r["us"])
        row["best"] = best
        rows.append(row)
        print(f"{m}x{n}x{k}: torch {ref:.1f} us, auto {t_auto:.1f} ({ref / t_auto:.2f}x), best "
              f"{best['BM']}x{best['BN']}/{best['SPLIT']} {best['us']:.1f} ({best['ratio']:.2f}x)", flush=True)
        for r in row["candidates"]:
            print("   ", {kk: (round(v, 3) if isinstance(v, float) else v) for kk, v in r.items()}, flush=True)
    out = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(), "seconds": time.time() - t0,
           "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
