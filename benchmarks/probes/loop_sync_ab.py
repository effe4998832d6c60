"""A/B: the clustered row-block kernels (RMSNorm, LayerNorm, residual + LayerNorm, softmax at
D = 4096 / 8192: stream-cols splits the row block over a cluster) with the chunk loops' barrier
hoisted (``stream-cols{loop_sync=hoist}``) against one per trip (``loop_sync=trip``), and the
unclustered D = 1024 rows, same run, the generality table's method (``gemm_variants.timed_flushed``: do_bench, L2
flushed between calls, rounds alternating). Both sides must give bit-identical outputs (only barriers move), and
match float64 torch.

    python3 benchmarks/probes/loop_sync_ab.py [--json OUT] [--d 1024,4096,8192]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import tkjit
from tkjit.passes import default_pipeline

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gemm_variants import timed_flushed  # noqa: E402
from norm_schedules import FAMILIES, ROWS_OF_D  # noqa: E402

KERNELS = ("rmsnorm", "layernorm", "residual_layernorm", "softmax")


def pipeline(sync: str) -> str:
    return default_pipeline("sm_90a").replace("stream-cols", f"stream-cols{{loop_sync={sync}}}", 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--d", default="1024,4096,8192")
    args = ap.parse_args()
    rows = []
    for d in (int(x) for x in args.d.split(",")):
        r = ROWS_OF_D[d]
        for name in KERNELS:
            make, truth, tensors = FAMILIES[name]
            source = (ROOT / "examples" / f"{name}.tk").read_text()
            ks = {s: tkjit.compile(source, filename=f"{name}.tk", constants={"C" if name == "softmax" else "D": d},
                                   pipeline=pipeline(s))
                  for s in ("hoist", "trip")}
            a, outs = make(r, d)
            outputs = {}
            for s, k in ks.items():
                for i in outs:
                    a[i].fill_(float("nan"))
                k(*a)
                torch.cuda.synchronize()
                outputs[s] = [a[i].clone() for i in outs]
            same = all(torch.equal(x.nan_to_num(7), y.nan_to_num(7)) for x, y in zip(outputs["hoist"], outputs["trip"]))
            want = truth(a)
            err = max(((o.double() - w).norm() / w.norm()).item() for o, w in zip(outputs["hoist"], want))
            us = timed_flushed({s: k for s, k in ks.items()}, [tuple(a)], rep_ms=640.0)
            med = {s: v / 1e3 for s, v in us.items()}  # ms
            bars = {s: k.asm["ptx"].count("bar.sync") for s, k in ks.items()}
            row = {"kernel": name, "D": d, "R": r, "bit_identical": same, "err": err,
                   "hoist_us": med["hoist"] * 1e3, "trip_us": med["trip"] * 1e3,
                   "trip_over_hoist": med["trip"] / med["hoist"], "bar_sync": bars,
                   "GBps_hoist": tensors * 2.0 * r * d / med["hoist"] / 1e6,
                   "hoisted": "hoisted out of the loop" in str(ks["hoist"].explain())}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
