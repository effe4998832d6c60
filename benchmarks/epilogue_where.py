"""Where a fused GEMM epilogue's time goes (GPU): the kernels of benchmarks/epilogue_variants.py
(examples/gemm_bias_gelu.tk with gelu / silu / relu / no epilogue, schedule variants) against
cuBLAS's plain matmul and torch.compile of the same expression, timed in one process by both
harnesses the project uses, plus the SM clock and board power while each runs back to back.

    python3 benchmarks/epilogue_where.py 4096x4096x4096 8192x8192x8192 --acts gelu,silu,relu,plain \\
        --variant pp128=BN=128 --torch-compile --clocks --out ab.json
    ncu --clock-control none -k regex:'gemm_bias|nvjet|sm90|gemm' \\
        python3 benchmarks/epilogue_where.py 4096x4096x4096 --launch-only ...

Timing methods, each a median, same functions, same input rotation (sets that together exceed
twice the L2), the functions interleaved:

* ``batched`` (benchmarks/epilogue_variants.py): CUDA events around batches of 20 back-to-back
  launches, 15 batches per function, the batches of all functions interleaved.
* ``flushed`` (benchmarks/tkbench, the generality table): ``triton.testing.do_bench`` per call
  -- it zeroes a 256 MB buffer (the L2 flush) before every call and times each call with its
  own events -- in 8 rounds whose order alternates (forward, backward).

``--clocks``: each function runs back to back for ``--clock-s`` seconds while nvidia-smi samples
the SM clock and the board power every 50 ms; the row gives the mean after the first 0.3 s and
the time per call over the whole period.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import torch
from epilogue_variants import ACTS, input_sets, kernel_of, schedule_of
from gemm_variants import timed_flushed, timed_together


class Sampler:
    """nvidia-smi's SM clock (MHz) and power (W), sampled every 50 ms on a thread, each sample
    stamped with time.time() when it arrived."""

    def __init__(self):
        self.samples: list[tuple[float, float, float]] = []
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                 "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
        except OSError:
            self.proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                clock, power, _ = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), clock, power))

    def between(self, t0: float, t1: float) -> dict:
        got = [(c, p) for t, c, p in self.samples if t0 <= t <= t1]
        if not got:
            return {"samples": 0}
        return {"samples": len(got), "sm_mhz": round(statistics.mean(c for c, _ in got)),
                "sm_mhz_min": min(c for c, _ in got), "power_w": round(statistics.mean(p for _, p in got), 1)}

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()


def sustained(fn, sets, seconds: float, sampler: Sampler) -> dict:
    """``fn`` back to back for ``seconds``: us per call over the period, and the clock and
    power after the first 0.3 s."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    start.record()
    calls = 0
    while time.time() - t0 < seconds:
        for i in range(20):
            fn(*sets[(calls + i) % len(sets)])
        calls += 20
        torch.cuda.current_stream().synchronize() if calls % 200 == 0 else None
    end.record()
    end.synchronize()
    t1 = time.time()
    return {"us": round(start.elapsed_time(end) / calls * 1e3, 2), "calls": calls} | sampler.between(t0 + 0.3, t1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--acts", default="gelu,silu,relu,plain")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=EDIT as in epilogue_variants.py; NAME@act1+act2=EDIT: only for those acts")
    ap.add_argument("--torch-compile", action="store_true")
    ap.add_argument("--clocks", action="store_true")
    ap.add_argument("--clock-s", type=float, default=1.0)
    ap.add_argument("--clock-shape", default="4096x4096x4096")
    ap.add_argument("--launch-only", action="store_true", help="for a profiler: each function twice, no timing")
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    args = ap.parse_args()
    acts = [a for a in args.acts.split(",") if a]
    variants: dict[str, tuple[str, set | None]] = {"default": ("", None)}
    for v in args.variant:
        name, edit = v.split("=", 1)
        only = None
        if "@" in name:
            name, which = name.split("@")
            only = set(which.split("+"))
        variants[name] = (edit, only)
    torch.zeros(1, device="cuda")
    sampler = Sampler() if args.clocks else None
    result = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "label": args.label,
              "variants": {n: e for n, (e, _) in variants.items()}, "rows": [], "clocks": []}

    def save():
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))

    for act in acts:
        kernels = {}
        for name, (edit, only) in variants.items():
            if only is not None and act not in only:
                continue
            t = time.time()
            try:
                kernels[name] = kernel_of(act, edit)
                kernels[name].binary  # noqa: B018 - compile now, not in the timing
            except Exception as e:  # noqa: BLE001 - a variant that does not compile: say so, go on
                print(json.dumps({"act": act, "variant": name, "error": str(e)[:300]}), flush=True)
            print(f"compiled {act} {name} in {time.time() - t:.1f} s", flush=True)
        fn = ACTS[act]
        compiled = None
        if args.torch_compile and fn is not None:
            compiled = torch.compile(lambda a, b, bias, fn=fn: fn(a @ b + bias))
        for shape in args.shapes:
            sets = input_sets(shape)
            a, b, bias, c = sets[0]
            fns = {"cublas": lambda a, b, bias, c: torch.matmul(a, b, out=c)}
            if compiled is not None:
                t = time.time()
                compiled(a, b, bias)
                print(f"torch.compile {act} {shape}: {time.time() - t:.1f} s", flush=True)
                fns["torch.compile"] = lambda a, b, bias, c, compiled=compiled: compiled(a, b, bias)
            row = {"act": act, "shape": shape, "label": args.label}
            if not args.launch_only:
                pre = a.float() @ b.float()
                ref = pre if fn is None else fn(pre + bias.float())
            for name, kern in kernels.items():
                c.fill_(float("nan"))
                kern(a, b, bias, c)
                torch.cuda.synchronize()
                row[name] = {"schedule": schedule_of(kern), "gemm": kern.metadata.get("gemm")}
                if not args.launch_only:
                    row[name]["err"] = ((c.float() - ref).norm() / ref.norm()).item()
                fns[name] = kern
            if args.launch_only:
                for f in fns.values():
                    for _ in range(2):
                        f(*sets[0])
                torch.cuda.synchronize()
                continue
            del pre, ref
            batched = timed_together(fns, sets, 15)
            flushed = timed_flushed(fns, sets)
            for method, times in (("batched", batched), ("flushed", flushed)):
                row[f"cublas_{method}_us"] = round(times["cublas"], 2)
                if "torch.compile" in times:
                    row[f"torch_compile_{method}_us"] = round(times["torch.compile"], 2)
                for name in kernels:
                    if name not in times:
                        continue
                    us = times[name]
                    row[name][f"{method}_us"] = round(us, 2)
                    row[name][f"{method}_vs_cublas"] = round(times["cublas"] / us, 3)
                    if "torch.compile" in times:
                        row[name][f"{method}_vs_torch_compile"] = round(times["torch.compile"] / us, 3)
            print(json.dumps(row), flush=True)
            result["rows"].append(row)
            save()
            if sampler is not None and shape == args.clock_shape:
                for name, f in fns.items():
                    if name == "torch.compile":
                        continue
                    got = {"act": act, "shape": shape, "fn": name} | sustained(f, sets, args.clock_s, sampler)
                    print(json.dumps(got), flush=True)
                    result["clocks"].append(got)
                    save()
            del sets, fns, a, b, bias, c
            torch.cuda.empty_cache()
    if sampler is not None:
        sampler.stop()
    if args.launch_only:
        return
    print("act   shape            method  " + "".join(f"{n[:12]:>14}" for n in variants)
          + "   (vs cuBLAS plain matmul / vs torch.compile)")
    for row in result["rows"]:
        for method in ("batched", "flushed"):
            cells = "".join((f"{row[n][f'{method}_vs_cublas']:.3f}/{row[n].get(f'{method}_vs_torch_compile', 0):.2f}"
                             if f"{method}_vs_cublas" in row.get(n, {}) else "-").rjust(14) for n in variants)
            print(f"{row['act']:<6}{row['shape']:<17}{method:<8}{cells}")


if __name__ == "__main__":
    main()
