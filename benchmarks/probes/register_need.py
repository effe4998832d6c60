"""How many registers a consumer thread of a warp-specialized kernel really needs: ptxas at each
consumer ``setmaxnreg`` (multiples of 8, the instruction's unit), the smallest with no spill.

    python benchmarks/probes/register_need.py {auto|general} NAME[:JSON_CONSTANTS] ...
    e.g.  python benchmarks/probes/register_need.py general 'attention_nol:{"D": 256}'

Each example (examples/NAME.tk) is compiled under the lowering; its PTX's one
``setmaxnreg.inc`` is rewritten to each value and assembled for sm_90a (CPU only). The passes'
estimates (warp-spec's peak, the level-2 count, grid's ``PERSISTENT_STATE``) can be checked against
the bracket this prints: the need lies in (min_no_spill - 8, min_no_spill]. Measured 2026-11-27
(ptxas 13.0), consumers' need: attention_nol D = 256 one CTA per tile (auto) (216, 224], the
persistent loop (general) (232, 240]; D = 128 (224, 232] persistent, (216, 224] one per tile."""
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


def need(name: str, constants: dict, lowering: str) -> dict:
    k = tkjit.compile((ROOT / "examples" / f"{name}.tk").read_text(), filename=f"{name}.tk",
                      cache=False, constants=constants or None, lowering=lowering)
    ptx = k.asm["ptx"]
    m = INC.search(ptx)
    if not m:
        return {"kernel": name, "constants": constants, "lowering": lowering, "setmaxnreg": None}
    spills = {}
    for regs in range(200, 257, 8):
        spills[regs] = spill_bytes(ptx, regs)
        if spills[regs] == 0 and regs >= int(m.group(1)):
            break
    return {"kernel": name, "constants": constants, "lowering": lowering,
            "setmaxnreg": int(m.group(1)), "min_no_spill": min((r for r, s in spills.items() if s == 0), default=None),
            "spill_bytes": spills}


def main(argv: list[str]) -> None:
    lowering, cases = argv[0], argv[1:]
    for case in cases:
        name, _, consts = case.partition(":")
        print(json.dumps(need(name, json.loads(consts) if consts else {}, lowering)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
