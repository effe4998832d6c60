"""The generality table of tests/unseen_corpus.py on the CPU: for each kernel, the backend the
default compile takes and what require_hopper says, the spills in the SASS, ptxas warnings, the
fallback warning, and the interpreter's relative error against the float32 torch reference.

    PYTHONPATH=$PWD:$PWD/tests python benchmarks/probes/unseen_table.py [NAME ...]
"""
from __future__ import annotations

import re
import sys
import traceback
import warnings

import torch

import tkjit


def _row(case):
    row = {"kernel": case.name}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
            sass = k.asm["sass"]
            md = k.metadata
            row["backend"] = md.get("backend")
            row["lowering"] = md.get("lowering")
            row["spills"] = len(re.findall(r"\b(LDL|STL)\b", sass))
            row["ptxas_warn"] = [m["text"] if "text" in m else str(m) for m in md["ptxas"]["messages"]
                                 if m["level"] == "warning"]
        except Exception as e:  # noqa: BLE001 - the table records whatever the compile does
            row["backend"] = f"ERROR {type(e).__name__}: {str(e)[:300]}"
            row["trace"] = traceback.format_exc()[-1500:]
        row["warnings"] = [str(w.message)[:300] for w in caught]
    try:
        tkjit.compile(case.source, constants=case.constants or None, cache=False,
                      require_hopper=True).asm["ptx"]
        row["require_hopper"] = "ok"
    except Exception as e:  # noqa: BLE001
        row["require_hopper"] = f"{type(e).__name__}: {str(e)[:400]}"
    try:
        torch.manual_seed(0)
        k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
        args = case.make(case.cpu_shape, "cpu")
        want = case.reference(args)
        k(*args)
        errs = []
        for i, ref in zip(case.outputs, want):
            got = args[i].float()
            errs.append("NaN" if torch.isnan(got).any() else f"{((got - ref).norm() / ref.norm()).item():.1e}")
        row["interp"] = ",".join(errs)
    except Exception as e:  # noqa: BLE001
        row["interp"] = f"ERROR {type(e).__name__}: {str(e)[:300]}"
    return row


def main(names):
    from unseen_corpus import CASES
    for case in CASES:
        if names and case.name not in names:
            continue
        r = _row(case)
        print(f"| {r['kernel']} | {r['backend']} ({r.get('lowering')}) | spills {r.get('spills')} | "
              f"ptxas warn {r.get('ptxas_warn')} | interp {r['interp']} | require_hopper: {r['require_hopper']} | "
              f"warnings: {r['warnings']} |", flush=True)
        if "trace" in r:
            print(r["trace"])


if __name__ == "__main__":
    main(sys.argv[1:])
