#!/usr/bin/env python3
"""The autotuner checked as issue 19 asks (GPU): on the GEMM example at M=N=4096 with K in
{64, 1024, 8192} and at M=1000, N=3000, K=520, tune, report the tuning time and the chosen
candidate, time the chosen candidate against the @fill_sms choice in the same run (ratio
fill_sms / tuned, >= 1.0 expected: the space holds @fill_sms's own candidates), then check that a
second process reuses every choice from the disk cache without timing anything.

    python3 benchmarks/autotune_check.py [--out PATH]

Both processes use one fresh TKJIT_CACHE_DIR. The timer the autotuner is given counts its
calls (each call times one candidate); the second process must make none. Timing the two
choices: tkbench.timing.measure_pair (per-call CUDA events, alternating rounds, medians).
The JSON goes to --out, else <date>-<gpu>-autotune.json in $OUT when it is set, else in
benchmarks/results/.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (str(REPO), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

SHAPES = [(4096, 4096, 64), (4096, 4096, 1024), (4096, 4096, 8192), (1000, 3000, 520)]
SPACE = {"BM": [64, 128], "BN": [64, 128, 256], "SPLIT": [1, 2]}
"""Every candidate @fill_sms weighs (examples/gemm.tk: @fill_sms(BM, BN, SPLIT); fill_sms.halvings
of 128, 256 and 1): the tuner can then pick whatever @fill_sms picks."""


def tune_all(measure: bool) -> list[dict]:
    """Tune every shape in this process; with ``measure``, also time the choice against @fill_sms."""
    import torch

    import tkjit
    from tkjit.autotune import cuda_event_timer
    timings = {"count": 0}
    inner = cuda_event_timer()

    def counting(launch):
        timings["count"] += 1
        return inner(launch)
    rows = []
    for m, n, k in SHAPES:
        gemm = tkjit.load(REPO / "examples" / "gemm.tk")
        tuned = gemm.autotune(SPACE, timer=counting)
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        before = timings["count"]
        begin = time.perf_counter()
        tuned(a, b, c)
        torch.cuda.synchronize()
        wall = time.perf_counter() - begin
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
        (tuning,) = tuned.tunings
        row = {"shape": f"{m}x{n}x{k}", "choice": tuning.winner, "from_disk": tuning.from_disk,
               "timed_candidates": timings["count"] - before, "tuning_s": tuning.seconds, "first_call_s": wall,
               "dropped": {" ".join(f"{k_}={v}" for k_, v in t.constants.items()): t.dropped
                           for t in tuning.trials if t.dropped}}
        if measure:
            from tkbench.timing import measure_pair
            ctx = types.SimpleNamespace(cuda=True, have_triton=False, warmup_ms=30.0, rep_ms=200.0)
            gemm(a, b, c)  # @fill_sms chooses here (compiling its variant), outside the timing
            # the two kernels themselves, each through its own fast path (not the dispatchers':
            # at K=64 a launch is ~10 us, where a few us of Python would decide the ratio)
            fill_variant = gemm._gpu_fast._by_shape[tuple(x.shape for x in (a, b, c))]
            tuned_variant = tuned._variant(tuning.winner)
            t_tuned, t_fill = measure_pair(lambda: tuned_variant(a, b, c), lambda: fill_variant(a, b, c), ctx)
            torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
            fill_choice = {n_: v for n_, v in fill_variant.options.constants if n_ in SPACE}
            row.update(tuned_ms=t_tuned.median_ms, fill_sms_ms=t_fill.median_ms,
                       ratio=t_fill.median_ms / t_tuned.median_ms, fill_sms_choice=fill_choice)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--second", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.second:  # the second process: its rows as JSON on stdout
        print("ROWS " + json.dumps(tune_all(measure=False)))
        return 0
    import torch
    if not torch.cuda.is_available():
        print("benchmarks/autotune_check.py: no CUDA GPU here (it times kernels on one)", file=sys.stderr)
        return 2
    cache = tempfile.mkdtemp(prefix="tkjit-autotune-check-")
    os.environ["TKJIT_CACHE_DIR"] = cache
    from tkjit.config import reset_config
    reset_config()
    begin = time.perf_counter()
    first = tune_all(measure=True)
    env = {**os.environ, "TKJIT_CACHE_DIR": cache,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.run([sys.executable, __file__, "--second"], capture_output=True, text=True, env=env,
                          timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS ")), None)
    second = json.loads(line[5:]) if line else []
    print(f"\n{'shape':<16} {'tuned choice':<24} {'fill_sms choice':<24} {'tuning s':>8} {'tuned ms':>9} "
          f"{'fill_sms ms':>11} {'fill/tuned':>10}  second process")
    ok = proc.returncode == 0 and len(second) == len(first)
    for row, again in zip(first, second or [{}] * len(first)):
        choice = " ".join(f"{k}={v}" for k, v in row["choice"].items())
        reused = again.get("from_disk") and again.get("timed_candidates") == 0 and again.get("choice") == row["choice"]
        ok = ok and bool(reused) and row["ratio"] >= 0.99
        fill = " ".join(f"{k}={v}" for k, v in (row["fill_sms_choice"] or {}).items()) or "defaults"
        print(f"{row['shape']:<16} {choice:<24} {fill:<24} {row['tuning_s']:>8.1f} {row['tuned_ms']:>9.4f} "
              f"{row['fill_sms_ms']:>11.4f} {row['ratio']:>10.3f}  "
              + ("reused, 0 timings" if reused else f"NOT reused: {again or proc.stderr[-500:]}"))
    print(f"total {time.perf_counter() - begin:.1f} s (both processes)")
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    name = f"{date}-{gpu.lower().replace(' ', '-')}-autotune.json"
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else HERE / "results") / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": date, "gpu": gpu, "space": SPACE, "first": first, "second": second,
                               "second_returncode": proc.returncode, "ok": ok}, indent=1, default=str) + "\n")
    print(f"wrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
