"""Time GEMM + bias + activation kernels (examples/gemm_bias_gelu.tk and the same program with
another activation) against cuBLAS's plain matmul and torch.compile of the same expression, with
schedule variants, same run (GPU).

    python3 benchmarks/epilogue_variants.py 4096x4096x4096 8192x8192x8192 --acts gelu,silu,relu \\
        --variant pp128=BN=128 --variant pp64='BM=64;pass:warp-spec{mode=pingpong}' \\
        --torch-compile --label after --out results.json

A variant is NAME=EDIT as in benchmarks/gemm_variants.py (constants 'BN=128', 'pass:<pass>{opts}',
several joined by ';'); the default (the example as written) always runs. 'baseline-emitters'
compiles that variant (uncached) with the activation emitters of the file --baseline-mathfn
names (e.g. an older tree's tkjit/codegen/mathfn.py) and the element-wise vector loads instead of
the paired ones: a same-run A/B of the emitters (with 'BM=128,BN=256' it pins the tile too). 'plain' in --acts
times the kernel without bias and activation (C = A·B, the same tile and schedule). Inputs rotate
over enough sets to exceed the L2; each variant's output is checked once against float32 torch
(output poisoned first). Ratios are reference time / kernel time (above 1: the kernel is faster).

Timing (``--method``): ``flushed`` (the default) is the generality table's method
(benchmarks/tkbench: ``triton.testing.do_bench`` per call after an L2 flush, 8 rounds whose order
alternates; ``gemm_variants.timed_flushed``); ``batched`` is the median of 15 batches of 20
back-to-back launches timed with CUDA events, the batches of cuBLAS, torch.compile and every
variant interleaved (this script's method up to session 15). The two differ by more than the
margins of issue 17's targets: same process, H200, 2026-11-27, bias + gelu 4096^3 0.984x cuBLAS
batched, 0.946x flushed; the plain GEMM 1.040 / 1.001
(benchmarks/results/2026-11-27-nvidia-h200-s16-gelu-where.json, benchmarks/epilogue_where.py, which
times both and each kernel's sustained clock): the table's method is the one both now use.
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from gemm_variants import L2_BYTES, timed_flushed, timed_together

import tkjit
from tkjit.passes import default_pipeline

EXAMPLE = (Path(__file__).resolve().parent.parent / "examples" / "gemm_bias_gelu.tk").read_text()
ACTS = {"gelu": F.gelu, "silu": F.silu, "relu": torch.relu, "plain": None}


def source_of(act: str) -> str:
    src = EXAMPLE.replace("gemm_bias_gelu", f"gemm_bias_{act}")
    if act == "plain":
        return src.replace("C.tile(m, n) = cvt<bf16>(gelu(add_col(acc, bias)))", "C.tile(m, n) = cvt<bf16>(acc)") \
                  .replace("    bias: rv<f32>[BN] = Bias.tile(n)\n", "")
    return src.replace("gelu(add_col", f"{act}(add_col")


def baseline_emitters(path: str):
    """A context: the activation emitters of the mathfn.py at ``path`` and no paired vector loads."""
    import contextlib
    import importlib.util

    from tkjit.codegen import mathfn, vector_pairs

    @contextlib.contextmanager
    def patched():
        spec = importlib.util.spec_from_file_location("tkjit.codegen._baseline_mathfn", path)
        old = importlib.util.module_from_spec(spec)
        old.__package__ = "tkjit.codegen"
        spec.loader.exec_module(old)
        saved, paired = dict(mathfn.UNARY_F32), vector_pairs.vector_loads_paired
        mathfn.UNARY_F32.update(old.UNARY_F32)
        vector_pairs.vector_loads_paired = lambda *a, **k: False
        try:
            yield
        finally:
            mathfn.UNARY_F32.clear()
            mathfn.UNARY_F32.update(saved)
            vector_pairs.vector_loads_paired = paired
    return patched()


def kernel_of(act: str, edit: str, baseline_mathfn: str | None = None):
    parts = [p for p in edit.split(";") if p]
    if "baseline-emitters" in parts:
        with baseline_emitters(baseline_mathfn):
            k = _compiled(act, [p for p in parts if p != "baseline-emitters"], cache=False)
            k.binary  # noqa: B018 - emitted and assembled inside the patch
        return k
    return _compiled(act, parts)


def _compiled(act: str, parts: list[str], cache: bool = True):
    constants, pipeline = {}, None
    for part in parts:
        if part.startswith("pass:"):
            given = part[len("pass:"):]
            name = given.split("{")[0]
            passes = (pipeline or default_pipeline("sm_90a")).split(",")
            pipeline = ",".join(given if p.split("{")[0] == name else p for p in passes)
        else:
            for item in part.split(","):
                key, value = item.split("=")
                constants[key.strip()] = int(value)
    return tkjit.compile(source_of(act), filename=f"gemm_bias_{act}.tk", constants=constants or None,
                         pipeline=pipeline, require_hopper=True, cache=cache)


def schedule_of(kernel) -> str:
    """The kernel's schedule and, for a @fill_sms kernel after its first call, the variant it
    launched (``fill-sms: ...``; the schedule named first is the default variant's)."""
    text = str(kernel.explain())
    mode = "ping-pong" if "ping-pong: 2 consumers" in text else "cooperative"
    stages = next((ln.split(" stage(s)")[0].split(": ")[-1] for ln in text.splitlines() if " stage(s) of " in ln), "?")
    try:
        chosen = [e.decision for e in kernel.decisions.for_pass("fill-sms")]
    except Exception:  # noqa: BLE001 - a kernel without a decision log
        chosen = []
    return f"{mode}, {stages} stages" + (f"; fill-sms launched {chosen[-1]}" if chosen else "")


def input_sets(shape: str) -> list[tuple]:
    """(A, B, bias, C) sets of an "MxNxK" shape, enough of them to exceed twice the L2 (fresh
    random inputs, C left empty), for inputs rotating across timed calls."""
    m, n, k = (int(x) for x in shape.split("x"))
    set_bytes = 2 * (m * k + k * n + m * n + n)
    count = max(2, -(-2 * L2_BYTES // set_bytes))
    return [(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
             torch.randn(k, n, dtype=torch.bfloat16, device="cuda"),
             torch.randn(n, dtype=torch.bfloat16, device="cuda"),
             torch.empty(m, n, dtype=torch.bfloat16, device="cuda")) for _ in range(count)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--acts", default="gelu,silu,relu")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--torch-compile", action="store_true")
    ap.add_argument("--label", default="")
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--method", choices=("flushed", "batched"), default="flushed")
    ap.add_argument("--baseline-mathfn", help="the mathfn.py of the 'baseline-emitters' variants")
    ap.add_argument("--out")
    args = ap.parse_args()
    acts = [a for a in args.acts.split(",") if a]
    variants = {"default": ""} | dict(v.split("=", 1) for v in args.variant)
    torch.zeros(1, device="cuda")
    rows = []
    for act in acts:
        kernels = {}
        for name, edit in variants.items():
            try:
                kernels[name] = kernel_of(act, edit, args.baseline_mathfn)
                kernels[name].binary  # noqa: B018 - compile now, not in the timing
            except Exception as e:  # noqa: BLE001 - a variant that does not compile: say so, go on
                print(json.dumps({"act": act, "variant": name, "error": str(e)[:300]}), flush=True)
        fn = ACTS[act]
        compiled = torch.compile(lambda a, b, bias, fn=fn: fn(a @ b + bias)) if args.torch_compile and fn else None
        for shape in args.shapes:
            sets = input_sets(shape)
            a, b, bias, c = sets[0]
            pre = a.float() @ b.float()
            ref = pre if fn is None else fn(pre + bias.float())
            row = {"act": act, "shape": shape, "label": args.label}
            fns = {"cublas": lambda a, b, bias, c: torch.matmul(a, b, out=c)}
            if compiled is not None:
                compiled(a, b, bias)
                fns["torch.compile"] = lambda a, b, bias, c, compiled=compiled: compiled(a, b, bias)
            for name, kern in kernels.items():
                call = kern  # 'plain' keeps the Bias parameter, unused
                c.fill_(float("nan"))
                call(a, b, bias, c)
                torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                row[name] = {"err": err, "schedule": schedule_of(kern)}
                fns[name] = call
            times = timed_flushed(fns, sets) if args.method == "flushed" else timed_together(fns, sets, args.batches)
            row["method"] = args.method
            row["cublas_us"] = round(times.pop("cublas"), 2)
            if "torch.compile" in times:
                row["torch_compile_us"] = round(times.pop("torch.compile"), 2)
            for name, us in times.items():
                row[name].update(us=round(us, 2), vs_cublas=round(row["cublas_us"] / us, 3))
                if "torch_compile_us" in row:
                    row[name]["vs_torch_compile"] = round(row["torch_compile_us"] / us, 3)
            print(json.dumps(row), flush=True)
            rows.append(row)
            if args.out:  # after every row: a run cut short keeps what it measured
                Path(args.out).write_text(json.dumps({
                    "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
                    "label": args.label, "variants": variants, "rows": rows}, indent=1))
    print("act   shape            " + "".join(f"{n[:12]:>14}" for n in variants) + "   (vs cuBLAS plain matmul; vs torch.compile)")
    for row in rows:
        cells = "".join((f"{row[n]['vs_cublas']:.3f}/{row[n].get('vs_torch_compile', 0):.2f}" if "vs_cublas" in row.get(n, {})
                         else "err").rjust(14) for n in variants)
        print(f"{row['act']:<6}{row['shape']:<17}{cells}")


if __name__ == "__main__":
    main()
