"""How many registers a consumer thread of a warp-specialized kernel really needs: ptxas at each
consumer ``setmaxnreg`` (multiples of 8, the instruction's unit), the smallest with no spill.

    python benchmarks/probes/register_need.py [--headroom] {auto|general} NAME[:JSON_CONSTANTS] ...
    e.g.  python benchmarks/probes/register_need.py general 'attention_nol:{"D": 256}'

Each example (examples/NAME.tk) is compiled under the lowering; its PTX's one
``setmaxnreg.inc`` is rewritten to each value and assembled for sm_90a (CPU only). The passes'
estimates (warp-spec's peak, the level-2 count, grid's ``PERSISTENT_STATE``) can be checked against
the bracket this prints: the need lies in (min_no_spill - 8, min_no_spill].

``--headroom`` resolves it to one register: at 240 (or the kernel's own value if larger) the
consumers also hold k values read from %clock at their start and used at their end (a store no
launch takes), live through every tile; the largest k ptxas fits without a spill is the headroom,
and 240 - k the need. Measured 2026-11-27 (ptxas 13.0), persistent / one CTA per tile:
attention_nol D = 256 236 / 220, D = 256 causal 235 / 219, D = 128 217 / 207, attention D = 128
221 / 218, attention_nol D = 256 BKV = 64 222 / 206."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tkjit

ROOT = Path(__file__).resolve().parents[2]
INC = re.compile(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+);")


def spill_bytes(ptx: str, regs: int) -> int:
    """ptxas's spill-store bytes with the consumers' setmaxnreg.inc set to ``regs``."""
    text = INC.sub(f"setmaxnreg.inc.sync.aligned.u32 {regs};", ptx, count=1)
    with tempfile.TemporaryDirectory() as d:
        Path(d, "k.ptx").write_text(text)
        p = subprocess.run(["ptxas", "-arch=sm_90a", "-v", f"{d}/k.ptx", "-o", f"{d}/k.cubin"],
                           capture_output=True, text=True, check=True)
    return int(re.search(r"(\d+) bytes spill stores", p.stderr).group(1))


def with_live_values(ptx: str, regs: int, k: int) -> str:
    """``ptx`` with the consumers' setmaxnreg at ``regs`` and ``k`` more values live through the
    consumers' whole tile walk (read from %clock after setmaxnreg.inc, xor-ed and stored under a
    predicate no launch meets after the walk's end)."""
    text = INC.sub(f"setmaxnreg.inc.sync.aligned.u32 {regs};", ptx, count=1)
    if not k:
        return text
    at = INC.search(text).end()
    text = text[:at] + "".join(f"\n  mov.u32 %hr{i}, %clock;" for i in range(k)) + text[at:]
    done = re.search(r"\n\$L_tiles_done_\d+:", text).end()
    out = re.search(r"ld\.param\.u64 (%rd\d+), \[\w+_param_0\];", text).group(1)
    use = ("\n  mov.u32 %hrs, 0;" + "".join(f"\n  xor.b32 %hrs, %hrs, %hr{i};" for i in range(k))
           + f"\n  setp.eq.u32 %phr, %hrs, 12345;\n  @%phr st.global.u32 [{out}], %hrs;")
    text = text[:done] + use + text[done:]
    return text.replace("  .reg .pred %p<", f"  .reg .b32 %hr<{k}>;\n  .reg .b32 %hrs;\n  .reg .pred %phr;\n"
                        "  .reg .pred %p<", 1)


def headroom(ptx: str, regs: int) -> int:
    """The most values ``with_live_values`` adds at ``regs`` with no spill (-1: it spills without)."""
    if spill_bytes(with_live_values(ptx, regs, 0), regs):
        return -1
    fits, spills = 0, 64
    while spills - fits > 1:
        mid = (fits + spills) // 2
        fits, spills = (mid, spills) if spill_bytes(with_live_values(ptx, regs, mid), regs) == 0 else (fits, mid)
    return fits


def need(name: str, constants: dict, lowering: str, live: bool = False) -> dict:
    k = tkjit.compile((ROOT / "examples" / f"{name}.tk").read_text(), filename=f"{name}.tk",
                      cache=False, constants=constants or None, lowering=lowering)
    ptx = k.asm["ptx"]
    m = INC.search(ptx)
    if not m:
        return {"kernel": name, "constants": constants, "lowering": lowering, "setmaxnreg": None}
    if live:
        cap = max(240, int(m.group(1)))
        room = headroom(ptx, cap)
        return {"kernel": name, "constants": constants, "lowering": lowering, "setmaxnreg": int(m.group(1)),
                "at": cap, "headroom": room, "need": cap - room if room >= 0 else None}
    spills = {}
    for regs in range(200, 257, 8):
        spills[regs] = spill_bytes(ptx, regs)
        if spills[regs] == 0 and regs >= int(m.group(1)):
            break
    return {"kernel": name, "constants": constants, "lowering": lowering,
            "setmaxnreg": int(m.group(1)), "min_no_spill": min((r for r, s in spills.items() if s == 0), default=None),
            "spill_bytes": spills}


def main(argv: list[str]) -> None:
    live = "--headroom" in argv
    argv = [a for a in argv if a != "--headroom"]
    lowering, cases = argv[0], argv[1:]
    for case in cases:
        name, _, consts = case.partition(":")
        print(json.dumps(need(name, json.loads(consts) if consts else {}, lowering, live)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
