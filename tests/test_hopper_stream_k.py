"""Stream-K over the last wave (grid{stream_k=1}) through the general lowering, on the CPU: the
walk's arithmetic (tail_split.py: every trip of every tile computed once, one owner per split
tile, each CTA contributing at most once and only from its first unit), the grid pass's option
check, and ptxas (no spills) at the tile sizes @fill_sms may pick. The decisions, refusals, PTX
and CPU schedules are tests/test_general_stream_k.py; the GEMM template that had these tests
first was deleted on 2026-11-27."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import tkjit
from tkjit.codegen.hopper import tail_split
from tkjit.passes import default_pipeline
from support import needs_cuda_tools

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE = (EXAMPLES / "gemm.tk").read_text()
STREAM_K = default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}")


def compiled(pipeline: str = STREAM_K, **constants):
    return tkjit.compile(SOURCE, pipeline=pipeline, constants=constants or {"BM": 128, "BN": 256},
                         lowering="general", require_hopper=True, cache=False)


def test_a_gemm_that_asks_for_nothing_imports_no_split_k():
    """reduce.py (split-K) is imported where a kernel splits: the example GEMM at its defaults
    does not need it (its cold compile)."""
    import json
    import subprocess
    import sys
    unused = ["tkjit.codegen.hopper.reduce"]
    code = ("import sys, json, tkjit; k = tkjit.compile(open('examples/gemm.tk').read(), cache=False); "
            f"assert 'wgmma' in k.asm['ptx']; print(json.dumps([m for m in {unused!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=EXAMPLES.parent, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_the_grid_pass_checks_its_option():
    with pytest.raises(tkjit.TkError, match="stream_k must be 1"):
        compiled(default_pipeline("sm_90a").replace("grid", "grid{stream_k=2}")).ir


CASES = [(t, p, k) for t, p, k in itertools.product(
    (1, 5, 131, 132, 133, 200, 264, 306, 512, 700), (1, 3, 64, 132, 144, 145), (1, 2, 3, 11, 64, 100)) if p <= t]


@pytest.mark.parametrize("tiles, ctas, trips", CASES)
def test_the_walk_computes_every_trip_once(tiles, ctas, trips):
    units = tail_split.walk(tiles, ctas, trips)
    done = {t: [0] * trips for t in range(tiles)}
    for c, mine in enumerate(units):
        for i, (t, first, n) in enumerate(mine):
            assert n >= 1 and 0 <= first and first + n <= trips
            for j in range(first, first + n):
                done[t][j] += 1
            if first > 0:  # a contribution: this CTA's first stream-K unit, its only one
                assert all(f == 0 for _, f, _ in mine[:i]) and all(f == 0 for _, f, _ in mine[i + 1:])
    assert all(x == 1 for row in done.values() for x in row)
    owners = {}
    for c, mine in enumerate(units):
        for t, first, n in mine:
            if first == 0 and n < trips:
                owners[t] = c
                parts = [o for o in range(ctas) for u in units[o] if u[0] == t and u[1] > 0]
                assert tail_split.contributors(tiles, ctas, trips, c, t) == parts
                assert all(o > c for o in parts)  # waits go to later CTAs only: no cycle
    split = {t for mine in units for t, f, n in mine if n < trips}
    assert split == set(owners)


def test_the_tail_is_spread_evenly():
    units = tail_split.walk(512, 132, 64)  # 4096^3 at 128x256 on 132 SMs
    work = [sum(n for _, _, n in mine) for mine in units]
    assert max(work) - min(work) <= 1 and max(work) == 3 * 64 + 57


@needs_cuda_tools
@pytest.mark.parametrize("constants", [{"BM": 128, "BN": 256}, {"BM": 128, "BN": 64}, {"BM": 64, "BN": 128}])
def test_assembles_without_spills(constants):
    from tkjit.runtime import toolchain
    k = compiled(**constants)
    ptx = k.asm["ptx"]
    assert k.metadata["lowering"] == "general" and k.metadata.get("serial_launches"), k.explain()
    _, report = toolchain.assemble(ptx, name=k.metadata["name"])
    fn = report[k.metadata["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0, report.log
    assert not report.setmaxnreg_ignored() and not {"C7517", "C7519"} & set(report.codes), report.log
