"""Kernels with no matrix product (norms, softmax, rotary, attention_bwd_prep): the general sm_90a
lowering (``lowering='general'``) and ``lowering='auto'`` against the register-tile backend, in the
same run, for issue 17 (one lowering for every tile program).

    python3 benchmarks/no_product_ab.py [--out results.json] [--only SUBSTRING,...] [--general-pipeline P]
                                        [--variant LABEL=PIPELINE ...]
    python3 benchmarks/no_product_ab.py --profile "rmsnorm D=2048:general"   (for ncu: 3 launches)

Rows: the norm_schedules.py example rows (RMSNorm, residual + LayerNorm, LayerNorm and softmax at
D = 1024, 2048, 4096 and 8192 -- at 4096 and 8192 stream-cols splits the row block over a cluster,
codegen/hopper/lower_cluster.py; rotary and the attention backward's row sums (attention_bwd_prep)
at D = 128). Each row: the three kernels compiled,
each checked against float64 torch on fresh random inputs with its outputs poisoned (NaN), then
timed with CUDA events (warm-up, median of many calls) alternating general / auto / register-tile / a
device-to-device copy of the same bytes, in rounds whose order flips. Since auto takes the general
lowering where it was measured faster (lower_layout.auto_refusal), the reference is the
register-tile backend compiled explicitly (REGISTER_TILE: byte-identical PTX to what auto gave
every row before); the row's figures are its time over general's and over auto's (>= 0.98: within
2%; auto over register-tile is an A/A where auto keeps that backend) and each one's share of the
copy bandwidth. ``--variant LABEL=PIPELINE`` adds a general-lowering kernel compiled with that pass
pipeline to the same rounds (e.g. ``tma=...warp-spec{fill=tma}...``: the producer's TMA fill of the
row block against the consumers' cp.async one, which ``fill=auto`` takes), reported as
``LABEL_over_register_tile_speed``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import tkjit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from norm_schedules import EXAMPLES, FAMILIES as NORM_FAMILIES, ROWS_OF_D, _events  # noqa: E402


def _bwd_prep_args(r, d):  # r query rows of D features: B=1, H=r//4096, N=4096
    n, h = 4096, max(1, r // 4096)
    bf = dict(dtype=torch.bfloat16, device="cuda")
    return [torch.randn(1, h, n, d, **bf), torch.randn(1, h, n, d, **bf),
            torch.full((1, h, n), float("nan"), dtype=torch.float32, device="cuda")], (2,)


def _bwd_prep_truth(args):
    return [(args[0].double() * args[1].double()).sum(-1)]


FAMILIES = {**NORM_FAMILIES, "attention_bwd_prep": (_bwd_prep_args, _bwd_prep_truth, 2)}


def rows() -> list[dict]:
    out = []
    for fam in ("rmsnorm", "residual_layernorm", "layernorm", "softmax"):
        for d in (1024, 2048, 4096, 8192):
            dim = "C" if fam == "softmax" else "D"
            out.append(dict(label=f"{fam} D={d}", family=fam, D=d, R=ROWS_OF_D.get(d, 32768),
                            constants={} if d == 1024 else {dim: d}))
    out.append(dict(label="rotary D=128", family="rotary", D=128, R=4096 * 128, constants={}))
    out.append(dict(label="attention_bwd_prep D=128", family="attention_bwd_prep", D=128, R=4096 * 64, constants={}))
    return out


REGISTER_TILE = "canonicalize,stream-cols,mask-branch,scale-fold"
"""The passes before the first target-specific one: compiled with only these, a kernel takes the
register-tile backend with the IR it gets under auto (its PTX is byte-identical to auto's where
auto keeps it there): the reference of every row, whichever backend auto takes."""
KERNELS = ("general", "auto", "register-tile")


def measure(row: dict, rounds: int = 8, per_round: int = 15, general_pipeline: str | None = None,
            variants: dict | None = None) -> dict:
    make, truth, tensors = FAMILIES[row["family"]]
    r, d = row["R"], row["D"]
    out = dict(row)
    variants = variants or {}
    names = (*KERNELS, *variants)
    try:
        kernels = {}
        for low in names:
            pipeline = (variants[low] if low in variants else general_pipeline if low == "general"
                        else REGISTER_TILE if low == "register-tile" else None)
            lowering = "general" if low in variants else "auto" if low == "register-tile" else low
            k = tkjit.load(EXAMPLES / f"{row['family']}.tk", constants=row["constants"] or None,
                           lowering=lowering, pipeline=pipeline)
            k.binary  # noqa: B018 - the cubin's metadata
            fn0 = k.metadata.get("ptxas", {}).get("functions", [{}])[0]
            out[low] = {"ptx_head": k.asm["ptx"].splitlines()[0], "lowering": k.metadata.get("lowering", "register-tile"),
                        "registers": fn0.get("registers"), "spills": fn0.get("spill_store_bytes"),
                        "smem_bytes": k.metadata.get("smem_bytes"), "block": k.metadata.get("block"),
                        "fill": ("cp.async" if "cp.async.cg" in k.asm["ptx"] else
                                 "tma" if "cp.async.bulk.tensor" in k.asm["ptx"] else "none")}
            args, outs = make(r, d)
            exact = truth(args)
            k(*args)
            torch.cuda.synchronize()
            err = max(((args[o].double() - t).norm() / t.norm()).item() for o, t in zip(outs, exact))
            out[low]["rel_err"] = err
            if not err < 1e-2:
                raise AssertionError(f"lowering={low}: relative error {err}")
            kernels[low] = k
        nbytes = 2 * tensors * r * d
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fresh = [make(r, d)[0] for _ in range(2)]
        calls = {low: [lambda a=a, k=k: k(*a) for a in fresh] for low, k in kernels.items()}
        copy = lambda: dst.copy_(src)  # noqa: E731
        for fn in [f for low in names for f in calls[low]] + [copy]:
            _events(fn, 5)
        times = {name: [] for name in (*names, "copy")}
        for i in range(rounds):
            order = [(low, calls[low][i % 2]) for low in names] + [("copy", copy)]
            for name, fn in (order if i % 2 == 0 else order[::-1]):
                times[name] += _events(fn, per_round)
        med = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        out["us"] = med
        out["general_over_register_tile_speed"] = med["register-tile"] / med["general"]
        out["auto_over_register_tile_speed"] = med["register-tile"] / med["auto"]
        for label in variants:
            out[f"{label}_over_register_tile_speed"] = med["register-tile"] / med[label]
        out["copy_share"] = {low: med["copy"] / med[low] for low in names}
        out["status"] = "ok"
    except Exception as exc:  # noqa: BLE001
        out["status"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", default="")
    ap.add_argument("--general-pipeline", default=None, help="the pass pipeline of the general kernel (A/Bs)")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL=PIPELINE: one more general-lowering kernel in the same rounds")
    ap.add_argument("--profile", default="", help="'LABEL:LOWERING': run that kernel 3 times (for ncu), nothing else")
    a = ap.parse_args(argv)
    if a.profile:
        label, low = a.profile.rsplit(":", 1)
        row = next(r for r in rows() if r["label"] == label)
        pipeline = a.general_pipeline if low == "general" else REGISTER_TILE if low == "register-tile" else None
        k = tkjit.load(EXAMPLES / f"{row['family']}.tk", constants=row["constants"] or None,
                       lowering="auto" if low == "register-tile" else low, pipeline=pipeline)
        args, _ = FAMILIES[row["family"]][0](row["R"], row["D"])
        for _ in range(3):
            k(*args)
        torch.cuda.synchronize()
        return 0
    results = []
    for row in rows():
        if a.only and not any(s in row["label"] for s in a.only.split(",")):
            continue
        variants = dict(v.split("=", 1) for v in a.variant)
        res = measure(row, general_pipeline=a.general_pipeline, variants=variants)
        results.append(res)
        if res["status"] == "ok":
            extra = "".join(f"  {lab}/register-tile {res[f'{lab}_over_register_tile_speed']:.3f}" for lab in variants)
            print(f"{row['label']:<28} general/register-tile {res['general_over_register_tile_speed']:.3f}  "
                  f"auto ({res['auto']['lowering']})/register-tile {res['auto_over_register_tile_speed']:.3f}  "
                  f"copy share general {res['copy_share']['general']:.2f} register-tile "
                  f"{res['copy_share']['register-tile']:.2f}  regs {res['general']['registers']}/"
                  f"{res['register-tile']['registers']}{extra}", flush=True)
        else:
            print(f"{row['label']:<28} {res['status']}", flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "general_pipeline": a.general_pipeline,
            "variants": a.variant}
    if a.out:
        Path(a.out).write_text(json.dumps({"meta": meta, "rows": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
