"""Summarize ncu's SASS source page (warp stall samples per instruction) of one kernel.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 benchmarks/ncu_sass_stalls.py sass.csv [TOP]

Prints the total of stall samples, their split by opcode and by stall reason, and the TOP
instructions with the most samples (address, SASS, the reasons that took their samples).
"""
from __future__ import annotations

import csv
import sys
from collections import Counter


def _num(s: str) -> float:
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def summarize(path: str, top: int = 40) -> str:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if "Source" in r and any("Warp Stall Sampling" in c for c in r))
    cols = rows[head]
    src = cols.index("Source")
    samp = next(i for i, c in enumerate(cols) if c.startswith("Warp Stall Sampling (All"))
    stalls = [(i, c) for i, c in enumerate(cols) if c.startswith("stall_")]
    execd = cols.index("Instructions Executed") if "Instructions Executed" in cols else None
    body = [r for r in rows[head + 1:] if len(r) == len(cols)]
    total = sum(_num(r[samp]) for r in body)
    by_op, by_reason = Counter(), Counter()
    for r in body:
        op = r[src].split()
        op = [t for t in op if not t.startswith("@")]
        by_op[op[0].split(".")[0] if op else ""] += _num(r[samp])
        for i, c in stalls:
            if not c.endswith("(Not Issued)"):
                by_reason[c] += _num(r[i])
    out = [f"instructions {len(body)}, total stall samples {total:.0f}",
           "by reason: " + ", ".join(f"{k} {100 * v / max(total, 1):.1f}%" for k, v in by_reason.most_common()),
           "by opcode:"]
    out += [f"  {k:<10} {v:9.0f} {100 * v / max(total, 1):5.1f}%" for k, v in by_op.most_common(25)]
    out.append(f"top {top} instructions (samples | executed | SASS | reasons):")
    for r in sorted(body, key=lambda r: -_num(r[samp]))[:top]:
        why = {c: r[i] for i, c in stalls if _num(r[i]) and not c.endswith("(Not Issued)")}
        out.append(f"{_num(r[samp]):7.0f} | {r[execd] if execd is not None else '-':>9} | {r[src][:70]:<70} | {why}")
    out.append("all instructions in address order (samples | executed | SASS):")
    for r in body:
        out.append(f"{_num(r[samp]):7.0f} | {r[execd] if execd is not None else '-':>9} | {r[src][:90]}")
    return "\n".join(out)


if __name__ == "__main__":
    print(summarize(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))
