"""The generality examples under lowering='auto' against lowering='general', same run (GPU).

    python3 benchmarks/lowering_ab.py [--kernels attention_nol,mlp,...] [--json OUT.json]
        [--pipeline NAME=PIPELINE]...   # also lowering='general' under this pass pipeline
        [--shape JSON]...               # these shapes instead of the generality cases' own

While the attention template exists, the schedule options for tiles loaded once per tile (a
persistent grid over them, two slots, the launch-time grid ``by_trips``, early release) apply
under ``lowering='general'`` only (``passes/hopper.tile_overlap_options``), so ``auto`` and
``general`` differ for every kernel with such tiles (the attention variants, the MLP, the
backward dQ). Deleting the template lifts that gate: ``auto`` then compiles them as ``general``
does today. This script measures what that changes, on each generality case
(``benchmarks/tkbench/generality.py``: the same shapes and inputs): both kernels' outputs checked
against the float64 truth (outputs NaN-poisoned first), then timed in interleaved batches (CUDA
events, median of 15 batches of 10 launches, the order reversed every other batch, inputs rotating
over sets that exceed the L2). ``general_vs_auto`` is auto ms / general ms (> 1: general faster).
Each ``--pipeline NAME=PIPELINE`` adds the general lowering under that pass pipeline (e.g. the
default one with ``pipeline{staging=slot}``), checked and timed in the same batches:
``NAME_vs_auto`` and ``NAME_vs_general`` (> 1: NAME faster). Each ``--shape`` (a JSON object of
the case's keys, e.g. ``{"B": 4, "H": 16, "N": 4096, "D": 256, "causal": true}``) replaces the
kernels' generality shapes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from attention_general import interleaved_ms  # noqa: E402  (the same timing as its rows)
from tkbench.checks import rel_err  # noqa: E402
from tkbench.generality import FULL, SPECS, constants_of  # noqa: E402

DEFAULT = ("attention_nol", "attention_exp", "attention_f16", "attention_mask", "attention_softcap",
           "attention_alibi", "attention_window", "mlp")
L2_BYTES = 60 << 20


def check(kernel, spec, p) -> float:
    args = spec.make(p, "cuda")
    truth = spec.exact(p, args)
    for i in spec.outputs:
        if i not in spec.inout:
            args[i].fill_(float("nan"))
    kernel(*args)
    torch.cuda.synchronize()
    views = spec.views(p, args) if spec.views else [args[i] for i in spec.outputs]
    return max(rel_err(v, t) for v, t in zip(views, truth))


def row(p: dict, variants: dict | None = None) -> dict:
    spec = SPECS[p["kernel"]]
    source = (ROOT / "examples" / f"{p['kernel']}.tk").read_text()
    ks = {low: tkjit.compile(source, filename=f"{p['kernel']}.tk", constants=constants_of(p) or None,
                             lowering=low) for low in ("auto", "general")}
    for name, pipeline in (variants or {}).items():
        ks[name] = tkjit.compile(source, filename=f"{p['kernel']}.tk", constants=constants_of(p) or None,
                                 lowering="general", pipeline=pipeline)
    out = {"kernel": p["kernel"], "shape": {k: v for k, v in p.items() if k != "kernel"},
           "backend": {low: f"{k.metadata.get('backend')}/{k.metadata.get('lowering', '-')}" for low, k in ks.items()},
           "err": {low: check(k, spec, p) for low, k in ks.items()}}
    probe = spec.make(p, "cuda")
    one = sum(a.numel() * a.element_size() for a in probe if hasattr(a, "numel"))
    sets = [tuple(spec.make(p, "cuda")) for _ in range(max(2, -(-2 * L2_BYTES // one)))]
    fns = {low: (lambda kk: lambda *a: kk(*a))(k) for low, k in ks.items()}
    med = interleaved_ms(fns, sets)
    out.update({f"{low}_ms": round(v, 5) for low, v in med.items()})
    out["general_vs_auto"] = round(med["auto"] / med["general"], 4)
    for name in variants or {}:
        out[f"{name}_vs_auto"] = round(med["auto"] / med[name], 4)
        out[f"{name}_vs_general"] = round(med["general"] / med[name], 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default=",".join(DEFAULT))
    ap.add_argument("--json")
    ap.add_argument("--pipeline", action="append", default=[], metavar="NAME=PIPELINE")
    ap.add_argument("--shape", action="append", default=[], metavar="JSON")
    args = ap.parse_args()
    shapes = [json.loads(s) for s in args.shape]
    variants = dict(v.split("=", 1) for v in args.pipeline)
    rows = []
    for name in args.kernels.split(","):
        if SPECS[name].load is not None:
            print(f"{name}: several kernels (skipped)")
            continue
        for shape in shapes or FULL[name]:
            r = row(dict(kernel=name, **shape), variants)
            print(json.dumps(r), flush=True)
            rows.append(r)
    print("kernel".ljust(20) + "shape".ljust(44) + "general/auto  err auto / general")
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        print(r["kernel"].ljust(20) + shape[:43].ljust(44)
              + f"{r['general_vs_auto']:8.3f}     {r['err']['auto']:.2e} / {r['err']['general']:.2e}"
              + "".join(f"   {v}: /auto {r[f'{v}_vs_auto']:.3f} /general {r[f'{v}_vs_general']:.3f}"
                        f" err {r['err'][v]:.2e}" for v in variants))
    if args.json:
        info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
