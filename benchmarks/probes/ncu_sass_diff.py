"""Where two kernels' warp stall samples differ: ncu's SASS source pages of two kernels whose code
is nearly the same (e.g. attention.tk and attention_nol.tk), compared in their key loops.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > A.csv   (and B.csv)
    python3 benchmarks/probes/ncu_sass_diff.py A.csv B.csv [TOP]

The key loop of each is found as benchmarks/probes/sass_loop_diff.py finds it (the innermost loop
holding an HGMMA). Prints the stall samples in and outside the loops, each stall reason's samples
in the loops (A / B), the reasons that moved most by opcode, and the TOP instructions whose
samples differ most, paired by aligning the two opcode sequences (benchmarks/probes/ncu_nol.sh
writes such pages; issue 18's nol/L gap: benchmarks/results/2026-11-27-nvidia-h200-s16-nol-*).
"""
from __future__ import annotations

import csv
import difflib
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sass_loop_diff import key_loop, opcode  # noqa: E402


def load(path: str) -> tuple[list[dict], list[str]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    cols = rows[head]
    ix = {c: i for i, c in enumerate(cols)}
    reasons = [c for c in cols if c.startswith("stall_") and not c.endswith("(Not Issued)")]

    def num(r, c):
        try:
            return float(r[ix[c]].replace(",", "") or 0)
        except ValueError:
            return 0.0
    out = [dict(addr=int(r[ix["Address"]], 16), src=r[ix["Source"]].strip(),
                samples=num(r, "Warp Stall Sampling (All Samples)"), **{c: num(r, c) for c in reasons})
           for r in rows[head + 1:] if len(r) == len(cols)]
    return out, reasons


def loop_of(ins: list[dict]) -> tuple[int, int]:
    body = key_loop([(x["addr"], x["src"]) for x in ins])
    return body[0][0], body[-1][0]


def main() -> None:
    a, reasons = load(sys.argv[1])
    b, _ = load(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    la, lb = loop_of(a), loop_of(b)
    ina = [x for x in a if la[0] <= x["addr"] <= la[1]]
    inb = [x for x in b if lb[0] <= x["addr"] <= lb[1]]
    total = lambda xs, k="samples": sum(x[k] for x in xs)  # noqa: E731
    print(f"A {sys.argv[1]}: {total(a):.0f} samples, {total(ina):.0f} in its key loop ({len(ina)} instructions)")
    print(f"B {sys.argv[2]}: {total(b):.0f} samples, {total(inb):.0f} in its key loop ({len(inb)} instructions)")
    print(f"outside the loops: A {total(a) - total(ina):.0f}, B {total(b) - total(inb):.0f}")
    print("in the loops, by reason (A / B): " + ", ".join(
        f"{r[6:]} {total(ina, r):.0f}/{total(inb, r):.0f}" for r in reasons
        if total(ina, r) + total(inb, r) >= 50))
    print("in the loops, the reasons that moved most, by opcode (A / B):")
    for r in sorted(reasons, key=lambda r: -abs(total(inb, r) - total(ina, r)))[:4]:
        ca, cb = defaultdict(float), defaultdict(float)
        for xs, c in ((ina, ca), (inb, cb)):
            for x in xs:
                c[opcode(x["src"]).split(".")[0]] += x[r]
        keys = sorted(set(ca) | set(cb), key=lambda k: -abs(cb[k] - ca[k]))[:8]
        print(f"  {r}: " + " ".join(f"{k} {ca[k]:.0f}/{cb[k]:.0f}" for k in keys))
    sm = difflib.SequenceMatcher(None, [opcode(x["src"]) for x in ina], [opcode(x["src"]) for x in inb],
                                 autojunk=False)
    pairs = [p for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag == "equal"
             for p in zip(ina[i1:i2], inb[j1:j2])]
    print(f"the {top} loop instructions whose samples differ most (A -> B, paired by opcode alignment):")
    for x, y in sorted(pairs, key=lambda p: -abs(p[1]["samples"] - p[0]["samples"]))[:top]:
        why = {r[6:]: f"{x[r]:.0f}/{y[r]:.0f}" for r in reasons if abs(y[r] - x[r]) >= 20}
        print(f"  +{x['addr'] - la[0]:#06x} {x['samples']:6.0f} -> {y['samples']:6.0f}  {y['src'][:58]:58s} {why}")


if __name__ == "__main__":
    main()
