"""Same-run A/B of the grid pass's choice for block loops whose kernel names no schedule (GPU).

    python3 benchmarks/schedule_ab.py [--json OUT.json]

Each kernel runs twice, from the same text: as written (no ``schedule(...)``: the grid pass
chooses, persistent where a producer fills the SM and every tile does the same work) and with
``schedule(grid)`` added to its block loop (one CTA per tile, what such a kernel got before the
pass chose). Both sides are checked against float32 torch, then timed in interleaved batches
(benchmarks/general_lowering.py's timer); ``chosen_vs_grid`` > 1 means the choice is faster.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from general_corpus import BY_NAME  # noqa: E402
from general_lowering import backend, rel_err, rotation, timed_together  # noqa: E402

BLOCKS = re.compile(r"(in blocks\([^{]*\))(\s*)\{")


def pinned_grid(text: str) -> str:
    """``text`` with ``schedule(grid)`` on its block loop (which must name no schedule)."""
    assert "schedule(" not in text, "the A/B is for kernels that name no schedule"
    out, n = BLOCKS.subn(r"\1 schedule(grid)\2{", text, count=1)
    assert n == 1
    return out


def corpus_args(name: str, shape: dict):
    case = BY_NAME[name]
    return (lambda: case.make(shape, "cuda")), case.reference, case.outputs


def rows():
    ex = ROOT / "examples"
    bmm = (ex / "bmm.tk").read_text()
    yield "bmm 8x2048^3", bmm, None, corpus_args("bmm", {"B": 8, "M": 2048, "N": 2048, "K": 2048})
    yield "bmm 3x1000x600x264", bmm, None, corpus_args("bmm", {"B": 3, "M": 1000, "N": 600, "K": 264})
    yield "bmm 16x1024x1024x4096", bmm, None, corpus_args("bmm", {"B": 16, "M": 1024, "N": 1024, "K": 4096})
    yield "linear 4096^3", BY_NAME["linear"].source, None, corpus_args("linear", {"M": 4096, "N": 4096, "K": 4096})
    yield "linear 1000x3000x520", BY_NAME["linear"].source, None, corpus_args("linear", {"M": 1000, "N": 3000, "K": 520})
    yield "branchy 2048x2048x1024", BY_NAME["branchy"].source, None, corpus_args("branchy", {"M": 2048, "N": 2048, "K": 1024})
    yield "skip_first 2048^3", BY_NAME["skip_first"].source, None, corpus_args("skip_first", {"M": 2048, "N": 2048, "K": 2048})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    opts = ap.parse_args()
    out = []
    for label, text, lowering, spec in rows():
        make, reference, outputs = spec
        sides = {"chosen": text, "grid": pinned_grid(text)}
        kernels = {k: tkjit.compile(t, lowering=lowering or "auto") for k, t in sides.items()}
        row = {"row": label}
        args = make()
        want = reference(args)
        for side, kern in kernels.items():
            for i in outputs:
                args[i].fill_(float("nan"))
            kern(*args)
            torch.cuda.synchronize()
            row[f"{side}_err"] = round(max(rel_err(args[i], w) for i, w in zip(outputs, want)), 5)
            row[f"{side}_backend"] = backend(kern)
            row[f"{side}_ctas"] = kern.ir.attrs.get("ctas") if getattr(kern, "ir", None) is not None else None
        nbytes = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        sets = rotation(make, nbytes)
        fns = dict(kernels)
        if label.startswith("bmm"):
            fns["torch_bmm"] = lambda a, b, c: torch.bmm(a, b, out=c)
        times = timed_together(fns, sets)
        row.update({f"{k}_us": round(v, 2) for k, v in times.items()})
        row["chosen_vs_grid"] = round(times["grid"] / times["chosen"], 3)
        if "torch_bmm" in times:
            row["chosen_vs_torch_bmm"] = round(times["torch_bmm"] / times["chosen"], 3)
        print(json.dumps(row), flush=True)
        out.append(row)
    print(f"\n{'kernel':40s} {'chosen':>10s} {'grid':>10s} {'ratio':>6s}  err")
    for r in out:
        print(f"{r['row']:40s} {r['chosen_us']:10.1f} {r['grid_us']:10.1f} {r['chosen_vs_grid']:6.3f}  "
              f"{max(r['chosen_err'], r['grid_err']):.1e}  {r['chosen_backend']}"
              + (f"  vs torch.bmm {r['chosen_vs_torch_bmm']}" if "chosen_vs_torch_bmm" in r else ""))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": out}, indent=1))


if __name__ == "__main__":
    main()
