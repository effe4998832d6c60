"""Differential testing of random valid kernels (issue 20, item 6), long runs.

Programs from tkjit/testing/gen.py, seeds S .. S+N-1, each run on the CPU interpreter and on a
target, outputs compared (tests/difftest.py):

  --target sim   the register-tile backend's PTX on the PTX simulator (CPU only; the default
                 pipeline must also compile each program to PTX)
  --target gpu   compiled normally (tkjit.compile: default pipeline, ptxas, disk cache) and
                 launched on CUDA tensors; exits 0 with a note when there is no GPU
  --hopper       programs shaped for the Hopper path (64-row tiles, no ragged K: the general
                 lowering's TMA + wgmma); with --target sim only compiled (the simulator has no
                 wgmma), with --target gpu run and compared

Prints the figures (generated, compiled, compared, refused, mismatches by stage) and each
finding with its seed; --show prints a program's source. Findings are written as JSON to --out.

    python benchmarks/difftest.py --count 2000 --seed 0                 # CPU, ~0.15 s a kernel
    python benchmarks/difftest.py --count 1000 --seed 0 --target gpu    # on a Hopper GPU
    python benchmarks/difftest.py --count 1 --seed 113 --show
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def gpu_present() -> bool:
    try:
        from tkjit.runtime.driver import gpu_available
        return gpu_available()
    except Exception:  # noqa: BLE001 -- no torch, no cuda-python, no device
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--target", choices=("sim", "gpu"), default="sim")
    ap.add_argument("--hopper", action="store_true", help="programs shaped for the Hopper general lowering")
    ap.add_argument("--show", action="store_true", help="print each program's source")
    ap.add_argument("--out", type=Path, default=None, help="findings JSON")
    args = ap.parse_args(argv)
    os.environ.setdefault("TKJIT_CACHE_DIR", "/tmp/tkcache-difftest")
    if args.target == "gpu" and not gpu_present():
        print("difftest: no CUDA GPU here; --target gpu skipped")
        return 0
    import difftest
    from tkjit.testing.gen import generate

    counts: Counter = Counter()
    features: Counter = Counter()
    findings = []
    start = time.time()
    for seed in range(args.seed, args.seed + args.count):
        if args.show:
            print(generate(seed, hopper=args.hopper).source)
        o = difftest.differential(seed, args.target, hopper=args.hopper)
        counts[o.stage] += 1
        features.update(o.features)
        if o.stage not in ("ok", "refused", "compiled"):
            findings.append({"seed": seed, "stage": o.stage, "detail": o.detail})
            print(f"seed {seed}: {o.stage}: {o.detail[:600]}", flush=True)
        elif args.show and o.detail:
            print(o.detail)
    elapsed = time.time() - start
    device = "CPU"
    if args.target == "gpu":
        import torch
        device = torch.cuda.get_device_name()
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, {device}",
        "target": args.target, "hopper": args.hopper, "seeds": [args.seed, args.seed + args.count - 1],
        "generated": args.count,
        "compiled": counts["ok"] + counts["mismatch"] + counts["run"] + counts["compiled"],
        "compared": counts["ok"] + counts["mismatch"],
        "refused (located NotAvailableError)": counts["refused"],
        "mismatches": counts["mismatch"],
        "other failures": {k: v for k, v in counts.items() if k in ("interpret", "compile", "run")},
        "seconds": round(elapsed, 1),
        "features": " ".join(f"{k}={v}" for k, v in sorted(features.items())),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "findings": findings}, indent=1))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
