"""Compare the SASS of two kernels' key loops (CPU only: ptxas and cuobjdump/nvdisasm).

    python benchmarks/probes/sass_loop_diff.py [--pipeline PIPE|early] [--dump DIR]
        NAME[:JSON_CONSTANTS] NAME[:JSON_CONSTANTS]
    e.g.  python benchmarks/probes/sass_loop_diff.py --pipeline early \\
              'attention:{"D": 128, "CAUSAL": true}' 'attention_nol:{"D": 128, "CAUSAL": true}'

Each example (examples/NAME.tk) is compiled through the general lowering (``--pipeline early``:
the default pipeline with ``mbarrier{release=early}``, the binary the launch takes for short loops;
tkjit/trip_dispatch.py). The key loop is the innermost loop holding a wgmma: the predicated backward
branch with the smallest span that contains an HGMMA. For the two loops this prints their size and
placement, the opcode histogram difference, the hunks where the opcode sequences differ (difflib
alignment), and the synchronisation skeleton of each (HGMMA, WARPGROUP.*, BAR.*, SYNCS.*, with
their index in the loop), so that "ptxas scheduled the same loop differently" can be checked
without a GPU. Used for issue 18's nol/L gap (benchmarks/results/2026-11-27-cpu-s16-nol-sass.txt).
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections import Counter
from pathlib import Path

import tkjit

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA (0x[0-9a-f]+)")
SYNC_OPS = ("HGMMA", "WARPGROUP", "BAR.", "SYNCS", "WARPSYNC", "DEPBAR")


def instructions(sass: str) -> list[tuple[int, str]]:
    """(address, text) of every instruction of the SASS listing."""
    return [(int(m.group(1), 16), m.group(2)) for m in map(LINE.match, sass.splitlines()) if m]


def key_loop(ins: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The innermost loop holding a wgmma: the predicated backward branch with the smallest span
    that contains an HGMMA (its instructions from the branch target to the branch)."""
    best: list[tuple[int, str]] | None = None
    for at, text in ins:
        m = BRANCH.search(text)
        if not m or int(m.group(1), 16) >= at or not text.startswith("@"):
            continue  # a loop closes with a predicated backward branch (not a wait's retry jump)
        body = [(a, t) for a, t in ins if int(m.group(1), 16) <= a <= at]
        if any("HGMMA" in t for _, t in body) and (best is None or len(body) < len(best)):
            best = body
    if best is None:
        raise SystemExit("no loop holding an HGMMA")
    return best


def opcode(text: str) -> str:
    parts = [p for p in text.split() if not p.startswith("@")]
    return parts[0] if parts else ""


def registers(body: list[tuple[int, str]]) -> set[int]:
    return {int(r) for _, t in body for r in re.findall(r"\bR(\d+)\b", t)}


def compile_sass(spec: str, pipeline: str | None) -> tuple[str, str]:
    name, _, consts = spec.partition(":")
    constants = json.loads(consts) if consts else {}
    extra = {"pipeline": pipeline} if pipeline else {}
    k = tkjit.compile((ROOT / "examples" / f"{name}.tk").read_text(), filename=f"{name}.tk",
                      constants=constants, lowering="general", **extra)
    return k.asm["ptx"], k.asm["sass"]


def blocks(body: list[tuple[int, str]]) -> list[list[str]]:
    """The loop's basic blocks (split after each branch and before each branch target), as
    opcode lists."""
    targets = {int(m.group(1), 16) for _, t in body for m in [BRANCH.search(t)] if m}
    out: list[list[str]] = [[]]
    for at, text in body:
        if at in targets and out[-1]:
            out.append([])
        out[-1].append(opcode(text))
        if BRANCH.search(text):
            out.append([])
    return [b for b in out if b]


def report(labels: tuple[str, str], loops: tuple[list, list]) -> str:
    out = []
    for label, body in zip(labels, loops):
        regs = registers(body)
        hg = [t for _, t in body if "HGMMA" in t]
        out.append(f"{label}: loop {body[0][0]:#x}..{body[-1][0]:#x} ({len(body)} instructions, "
                   f"start {body[0][0] % 128:#x} into a 128-byte line), {len(hg)} HGMMA, "
                   f"registers R{min(regs)}..R{max(regs)} ({len(regs)} distinct)")
        bases = Counter(re.match(r"HGMMA\S* (R\d+)(?:, (R\d+))?", t).groups() for t in hg)
        out.append("  HGMMA (accumulator, A registers) x count: "
                   + ", ".join(f"{a}{'/' + b if b else ''} x{n}" for (a, b), n in bases.items()))
    a, b = ([opcode(t) for _, t in body] for body in loops)
    ha, hb = Counter(a), Counter(b)
    delta = {op: hb[op] - ha[op] for op in sorted(set(ha) | set(hb)) if hb[op] != ha[op]}
    out.append(f"opcode counts {labels[1]} - {labels[0]}: {delta or 'none'}")
    ba, bb = (blocks(body) for body in loops)
    same = sum(Counter(x) == Counter(y) for x, y in zip(ba, bb))
    out.append(f"basic blocks: {len(ba)} against {len(bb)}; {same} hold the same opcodes (in any order), "
               f"{sum(x == y for x, y in zip(ba, bb))} in the same order")
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    moved = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal")
    out.append(f"opcode sequences: {sm.ratio():.4f} similar, {moved} instructions in differing hunks")
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            out.append(f"  {tag} at {loops[0][min(i1, len(a) - 1)][0]:#x}/{loops[1][min(j1, len(b) - 1)][0]:#x}: "
                       f"{' '.join(a[i1:i2][:10])}{' ...' if i2 - i1 > 10 else ''} -> "
                       f"{' '.join(b[j1:j2][:10])}{' ...' if j2 - j1 > 10 else ''}")
    skel = [[(i, t) for i, (_, t) in enumerate(body) if opcode(t).startswith(SYNC_OPS)] for body in loops]
    out.append(f"synchronisation skeleton (index in loop: {labels[0]} | {labels[1]}):")
    for x, y in zip(*skel):
        out.append(f"  {x[0]:5d} {x[1][:58]:<58} | {y[0]:5d} {y[1][:58]}")
    if len(skel[0]) != len(skel[1]):
        out.append(f"  (skeletons differ in length: {len(skel[0])} against {len(skel[1])})")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeline")
    ap.add_argument("--dump")
    ap.add_argument("kernels", nargs=2)
    args = ap.parse_args()
    pipeline = args.pipeline
    if pipeline == "early":
        from tkjit.trip_dispatch import early_release
        pipeline = early_release(None)
    loops, labels = [], []
    for i, spec in enumerate(args.kernels):
        ptx, sass = compile_sass(spec, pipeline)
        labels.append(spec.partition(":")[0] if args.kernels[0].partition(":")[0] != args.kernels[1].partition(":")[0]
                      else f"{spec}#{i}")
        loops.append(key_loop(instructions(sass)))
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            Path(args.dump, f"{labels[-1]}.ptx").write_text(ptx)
            Path(args.dump, f"{labels[-1]}.sass").write_text(sass)
    print(f"pipeline: {pipeline or 'default'}")
    print(report((labels[0], labels[1]), (loops[0], loops[1])))


if __name__ == "__main__":
    sys.exit(main())
