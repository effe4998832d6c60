"""Kernels with no matrix product (norms, softmax, rotary): the general sm_90a lowering
(``lowering='general'``) against the register-tile backend ``lowering='auto'`` gives them today,
in the same run, for issue 17 (one lowering for every tile program).

    python3 benchmarks/no_product_ab.py [--out results.json] [--only SUBSTRING,...]

Rows: the norm_schedules.py example rows the general lowering takes (RMSNorm, residual +
LayerNorm, LayerNorm and softmax at D = 1024 and 2048; rotary at D = 128; at D = 4096 and 8192
stream-cols splits the row block over a cluster, which it refuses: those rows report the refusal). Each row: both kernels compiled,
each checked against float64 torch on fresh random inputs with its outputs poisoned (NaN), then
timed with CUDA events (warm-up, median of many calls) alternating general / auto / a
device-to-device copy of the same bytes, in rounds whose order flips; the row's figures are
auto's time over general's (>= 0.98: within 2%) and each one's share of the copy bandwidth.
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
from norm_schedules import EXAMPLES, FAMILIES, ROWS_OF_D, _events  # noqa: E402


def rows() -> list[dict]:
    out = []
    for fam in ("rmsnorm", "residual_layernorm", "layernorm", "softmax"):
        for d in (1024, 2048, 4096):
            dim = "C" if fam == "softmax" else "D"
            out.append(dict(label=f"{fam} D={d}", family=fam, D=d, R=ROWS_OF_D.get(d, 32768),
                            constants={} if d == 1024 else {dim: d}))
    out.append(dict(label="rotary D=128", family="rotary", D=128, R=4096 * 128, constants={}))
    return out


def measure(row: dict, rounds: int = 8, per_round: int = 15) -> dict:
    make, truth, tensors = FAMILIES[row["family"]]
    r, d = row["R"], row["D"]
    out = dict(row)
    try:
        kernels = {}
        for low in ("general", "auto"):
            k = tkjit.load(EXAMPLES / f"{row['family']}.tk", constants=row["constants"] or None, lowering=low)
            k.binary  # noqa: B018 - the cubin's metadata
            fn0 = k.metadata.get("ptxas", {}).get("functions", [{}])[0]
            out[low] = {"ptx_head": k.asm["ptx"].splitlines()[0], "lowering": k.metadata.get("lowering", "register-tile"),
                        "registers": fn0.get("registers"), "spills": fn0.get("spill_store_bytes"),
                        "smem_bytes": k.metadata.get("smem_bytes"), "block": k.metadata.get("block")}
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
        for fn in calls["general"] + calls["auto"] + [copy]:
            _events(fn, 5)
        times = {"general": [], "auto": [], "copy": []}
        for i in range(rounds):
            order = [("general", calls["general"][i % 2]), ("auto", calls["auto"][i % 2]), ("copy", copy)]
            for name, fn in (order if i % 2 == 0 else order[::-1]):
                times[name] += _events(fn, per_round)
        med = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        out["us"] = med
        out["general_over_auto_speed"] = med["auto"] / med["general"]
        out["copy_share"] = {low: med["copy"] / med[low] for low in ("general", "auto")}
        out["status"] = "ok"
    except Exception as exc:  # noqa: BLE001
        out["status"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    results = []
    for row in rows():
        if a.only and not any(s in row["label"] for s in a.only.split(",")):
            continue
        res = measure(row)
        results.append(res)
        if res["status"] == "ok":
            print(f"{row['label']:<28} general/auto speed {res['general_over_auto_speed']:.3f}  copy share "
                  f"general {res['copy_share']['general']:.2f} auto {res['copy_share']['auto']:.2f}  "
                  f"regs {res['general']['registers']}/{res['auto']['registers']}", flush=True)
        else:
            print(f"{row['label']:<28} {res['status']}", flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if a.out:
        Path(a.out).write_text(json.dumps({"meta": meta, "rows": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
