"""Time variants of examples/gemm.tk against torch.matmul at a few shapes (GPU), same run.

    python3 benchmarks/gemm_variants.py 4096x4096x64 4096x4096x4096 --variant st2='@stages(2)' \\
        --variant bn128=BN=128

A variant is NAME=EDIT, where EDIT is '@stages(S)' (pinned on the K loop), constants
'BM=..,BN=..' (pins, so @fill_sms keeps them), or 'pass:grid{multicast=2}' (that pass of the
default pipeline with these options), or 'lowering:general' (which Hopper lowering compiles it;
default auto; 'lowering:template' was the GEMM template, deleted on 2026-11-27), or several joined
by ';'. The default is always run. Stream-K against whole tiles, same run:

    python3 benchmarks/gemm_variants.py 4096x4096x4096 8192x8192x8192 \
        --variant sk='BM=128,BN=256;pass:grid{stream_k=1}' --out results.json

Each variant's row says which lowering it took (``lowering``) and whether stream-K is on.
The multicast pair: ``--variant 'mc=pass:grid{multicast=2}'``.
Consumer schedules: 'pass:warp-spec{mode=pingpong}' / '{mode=cooperative}' (auto: ping-pong
for tiles of at least 128 x 128 that one consumer holds whole, e.g. 'BM=128,BN=128').
``--launch-only`` launches each variant 5 times at each shape without timing (for ncu).
A variant whose kernel forms clusters also reports how many of them the GPU holds at once.
Inputs rotate over enough sets to exceed the 60 MB L2 (like benchmarks/run.py); each figure is
the median of 15 batches of 20 launches timed with CUDA events, the batches of cuBLAS and of
each variant interleaved. Prints one JSON line per shape (with, for each variant, the constants
@fill_sms launched at that shape: ``choice``), then a short table of the ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import tkjit
from tkjit.passes import default_pipeline

SOURCE = (Path(__file__).resolve().parent.parent / "examples" / "gemm.tk").read_text()
L2_BYTES = 60 << 20


def variant_kernel(edit: str):
    source, constants, pipeline, lowering = SOURCE, {}, None, "auto"
    for part in filter(None, edit.split(";")):
        if part.startswith("lowering:"):
            lowering = part[len("lowering:"):]
        elif part.startswith("pass:"):
            given = part[len("pass:"):]
            name = given.split("{")[0]
            passes = (pipeline or default_pipeline("sm_90a")).split(",")
            pipeline = ",".join(given if p.split("{")[0] == name else p for p in passes)
        elif part.startswith("@stages"):
            source = source.replace("for k in 0", f"{part} for k in 0")
        else:
            for item in part.split(","):
                name, value = item.split("=")
                constants[name.strip()] = int(value)
    return tkjit.compile(source, filename="gemm.tk", constants=constants or None, pipeline=pipeline,
                         lowering=lowering, require_hopper=lowering != "auto")


def active_clusters(kernel, size: int) -> int:
    """How many clusters of ``size`` CTAs of this kernel the GPU holds at once
    (cuOccupancyMaxActiveClusters on the kernel's cubin and launch shape)."""
    from cuda.bindings import driver as cu
    binary = kernel.binary
    md = kernel.metadata
    err, module = cu.cuModuleLoadData(binary)
    err, fn = cu.cuModuleGetFunction(module, md["entry"].encode())
    cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                          md["smem_bytes"])
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 132 * size, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = md["block"][0], 1, 1
    cfg.sharedMemBytes = md["smem_bytes"]
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = size, 1, 1
    cfg.attrs, cfg.numAttrs = [attr], 1
    err, n = cu.cuOccupancyMaxActiveClusters(fn, cfg)
    return int(n) if err == cu.CUresult.CUDA_SUCCESS else -int(err)


def fill_sms_choice(kernel, subject_end: str) -> str | None:
    """The constants @fill_sms launched for the shape whose decision subject ends so (None: no
    @fill_sms, or no choice logged)."""
    try:
        entries = kernel.decisions.for_pass("fill-sms")
    except Exception:  # noqa: BLE001 - a kernel without a decision log
        return None
    for entry in reversed(entries):
        if entry.subject.endswith(subject_end):
            return entry.decision
    return None


def batch_us(fn, sets, per_batch=20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(per_batch):
        fn(*sets[i % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / per_batch * 1e3


def timed_together(fns: dict, sets, batches=15) -> dict[str, float]:
    """Median batch time of each function, batches interleaved (cuBLAS, variant, ...) so that
    clock and power drift fall on all of them alike."""
    for fn in fns.values():
        batch_us(fn, sets, 2)
    times = {name: [] for name in fns}
    for _ in range(batches):
        for name, fn in fns.items():
            times[name].append(batch_us(fn, sets))
    return {name: statistics.median(t) for name, t in times.items()}


FLUSHED_ROUNDS = 8


def timed_flushed(fns: dict, sets, rep_ms: float = 200.0) -> dict[str, float]:
    """The generality harness's method (benchmarks/tkbench/timing.py, ``measure_pair``) over
    several functions: ``triton.testing.do_bench`` times every call with its own events after
    zeroing a 256 MB buffer (the L2 flush), in FLUSHED_ROUNDS rounds of rep_ms / FLUSHED_ROUNDS
    per function, the order of the functions reversed every other round, the inputs rotating over
    ``sets``; the median of each function's calls, in us."""
    from triton.testing import do_bench
    names = list(fns)
    turn = {"i": 0}

    def rotating(fn):
        def call():
            fn(*sets[turn["i"] % len(sets)])
            turn["i"] += 1
        return call

    calls = {n: rotating(fns[n]) for n in names}
    for n in names:
        do_bench(calls[n], warmup=25, rep=1, return_mode="all")
    times = {n: [] for n in names}
    share = rep_ms / FLUSHED_ROUNDS
    for r in range(FLUSHED_ROUNDS):
        for n in (names if r % 2 == 0 else names[::-1]):
            times[n].extend(float(t) for t in do_bench(calls[n], warmup=0, rep=share, return_mode="all"))
    return {n: statistics.median(t) * 1e3 for n, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--launch-only", action="store_true")
    ap.add_argument("--out", help="also write the rows (with the GPU and the date) to this JSON file")
    args = ap.parse_args()
    variants = {"default": ""} | dict(v.split("=", 1) for v in args.variant)
    kernels = {name: variant_kernel(edit) for name, edit in variants.items()}
    torch.zeros(1, device="cuda")
    for name, kernel in kernels.items():
        kernel.binary  # noqa: B018 - the metadata is complete once assembled
        size = kernel.metadata.get("gemm", {}).get("multicast", 1)
        if size > 1:
            print(json.dumps({"variant": name, "cluster": size,
                              "active_clusters": active_clusters(kernel, size)}), flush=True)
    table = []
    for shape in args.shapes:
        m, n, k = (int(x) for x in shape.split("x"))
        set_bytes = 2 * (m * k + k * n + m * n)
        count = max(2, -(-2 * L2_BYTES // set_bytes))
        sets = [(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
                 torch.randn(k, n, dtype=torch.bfloat16, device="cuda"),
                 torch.empty(m, n, dtype=torch.bfloat16, device="cuda")) for _ in range(count)]
        ref = sets[0][0].float() @ sets[0][1].float()
        if args.launch_only:
            for kernel in kernels.values():
                for _ in range(5):
                    kernel(*sets[0])
            torch.cuda.synchronize()
            continue
        row = {"shape": shape}
        fns = {"cublas": lambda a, b, c: torch.matmul(a, b, out=c)}
        for name, kernel in kernels.items():
            try:
                kernel(*sets[0])
                torch.cuda.synchronize()
                err = ((sets[0][2].float() - ref).norm() / ref.norm()).item()
                md = kernel.metadata
                row[name] = {"err": err, "lowering": md.get("lowering", "-"),
                             "stream_k": bool(md.get("gemm", {}).get("stream_k")),
                             "multicast": int(md.get("gemm", {}).get("multicast", 1) or 1)}
                choice = fill_sms_choice(kernel, f"at M={m} K={k} N={n}")
                if choice is not None:
                    row[name]["choice"] = choice
                fns[name] = kernel
            except Exception as e:  # a variant that does not compile or launch: say so, go on
                row[name] = {"error": str(e)[:200]}
        times = timed_together(fns, sets)
        row["cublas_us"] = times.pop("cublas")
        for name, us in times.items():
            row[name].update(us=round(us, 2), ratio=round(row["cublas_us"] / us, 3))
        row["cublas_us"] = round(row["cublas_us"], 2)
        row["tflops_cublas"] = round(2 * m * n * k / row["cublas_us"] / 1e6, 1)
        print(json.dumps(row), flush=True)
        table.append(row)
    if args.out:
        import datetime
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(),
                                              "date": datetime.date.today().isoformat(),
                                              "variants": variants, "rows": table}, indent=1))
    if table:
        names = list(kernels)
        print("shape".ljust(18) + "".join(n[:10].rjust(11) for n in names) + "  cublas_us")
        for row in table:
            cells = "".join((f"{row[n]['ratio']:.3f}" if "ratio" in row.get(n, {}) else "err").rjust(11)
                            for n in names)
            print(row["shape"].ljust(18) + cells + f"  {row['cublas_us']:.2f}")


if __name__ == "__main__":
    main()
