"""Stream-K over the last wave in the Hopper GEMM (grid{stream_k=1}), on the CPU: the plan's
decision and refusals, the walk's arithmetic (every trip of every tile computed once, one owner per
split tile, each CTA contributing at most once and only from its first unit), the PTX (workspace,
flags with release/acquire), the ring protocol through the checker, and ptxas (no spills)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import tkjit
from tkjit.codegen.hopper import emit_hopper_ptx, gemm_protocol, plan_gemm, streamk
from tkjit.passes import default_pipeline
from tkjit.passes.sync_check import check_protocol
from support import needs_cuda_tools

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE = (EXAMPLES / "gemm.tk").read_text()
STREAM_K = default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}")


def planned(pipeline: str = STREAM_K, source: str = SOURCE, **constants):
    ir = tkjit.compile(source, pipeline=pipeline, constants=constants or {"BM": 128, "BN": 256}, cache=False).ir
    return ir, plan_gemm(ir)


def decision(plan, what: str) -> dict:
    return next(d for d in plan.decisions if d["decision"] == what)


def test_a_gemm_that_asks_for_none_imports_neither_stream_k_nor_split_k_nor_multicast():
    """streamk.py, reduce.py (split-K) and multicast.py are imported where a plan asks for them;
    the example at its defaults asks for none."""
    import json
    import subprocess
    import sys
    unused = ["tkjit.codegen.hopper.streamk", "tkjit.codegen.hopper.reduce", "tkjit.codegen.hopper.multicast"]
    code = ("import sys, json, tkjit; k = tkjit.compile(open('examples/gemm.tk').read(), cache=False); "
            f"assert 'wgmma' in k.asm['ptx']; print(json.dumps([m for m in {unused!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=EXAMPLES.parent, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_off_unless_the_grid_pass_asks():
    _, (_, plan) = planned(default_pipeline("sm_90a"))
    assert not plan.stream_k and "not asked for" in decision(plan, "stream-K")["why"]
    _, (_, plan) = planned()
    assert plan.stream_k and "R = T mod P" in decision(plan, "stream-K")["why"]


@pytest.mark.parametrize("constants, why", [
    ({"BM": 128, "BN": 256, "SPLIT": 2}, "one CTA per tile"),  # split-K: a cluster per tile
    ({"BM": 128, "BN": 128}, "ping-pong"),
    ({"BM": 64, "BN": 256}, "one consumer"),
])
def test_where_it_is_not_taken_the_log_says_why(constants, why):
    _, (_, plan) = planned(**constants)
    assert not plan.stream_k and why in decision(plan, "stream-K")["why"]


def test_not_on_a_plain_grid():
    source = SOURCE.replace("schedule(persistent, group = 8, split = SPLIT)", "schedule(grid, split = SPLIT)")
    _, (_, plan) = planned(source=source)
    assert not plan.stream_k and "persistent" in decision(plan, "stream-K")["why"]


def test_the_grid_pass_checks_its_option():
    with pytest.raises(tkjit.TkError, match="stream_k must be 1"):
        planned(default_pipeline("sm_90a").replace("grid", "grid{stream_k=2}"))


CASES = [(t, p, k) for t, p, k in itertools.product(
    (1, 5, 131, 132, 133, 200, 264, 306, 512, 700), (1, 3, 64, 132, 144, 145), (1, 2, 3, 11, 64, 100)) if p <= t]


@pytest.mark.parametrize("tiles, ctas, trips", CASES)
def test_the_walk_computes_every_trip_once(tiles, ctas, trips):
    units = streamk.walk(tiles, ctas, trips)
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
                assert streamk.contributors(tiles, ctas, trips, c, t) == parts
                assert all(o > c for o in parts)  # waits go to later CTAs only: no cycle
    split = {t for mine in units for t, f, n in mine if n < trips}
    assert split == set(owners)


def test_the_tail_is_spread_evenly():
    units = streamk.walk(512, 132, 64)  # 4096^3 at 128x256 on 132 SMs
    work = [sum(n for _, _, n in mine) for mine in units]
    assert max(work) - min(work) <= 1 and max(work) == 3 * 64 + 57


def test_the_ptx_has_the_workspace_and_the_flags():
    ir, (g, plan) = planned()
    ptx, meta = emit_hopper_ptx(ir)
    ws, flags = streamk.symbols("gemm")
    assert f".global .align 16 .b8 {ws}[{streamk.MAX_SLOTS * 128 * 256 * 4}];" in ptx
    assert f".global .align 16 .b32 {flags}[{streamk.MAX_SLOTS * 2 * 128}];" in ptx
    assert ptx.count("st.release.gpu.global.u32") == 1 and ptx.count("ld.acquire.gpu.global.u32") == 1
    assert ptx.count("st.relaxed.gpu.global.u32") == 1  # the reader resets the flag
    assert meta["gemm"]["stream_k"] is True
    assert meta["grid"] == [["min", ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]], ["num_sms"]]]
    assert [p["kind"] for p in meta["params"]] == ["global"] * 3 + ["tensormap"] * 3  # the ABI is unchanged
    check_protocol(gemm_protocol(g, plan))  # the ring protocol; the cross-CTA flags are not modelled


@needs_cuda_tools
@pytest.mark.parametrize("constants", [{"BM": 128, "BN": 256}, {"BM": 128, "BN": 64}, {"BM": 64, "BN": 128}])
def test_assembles_without_spills(constants):
    from tkjit.runtime import toolchain
    ir, (_, plan) = planned(**constants)
    assert plan.stream_k
    ptx, meta = emit_hopper_ptx(ir)
    _, report = toolchain.assemble(ptx, name=meta["name"])
    fn = report[meta["name"]]
    # ptxas 13.0 keeps up to three values of the 128x256 tile's epilogue in local memory (12 B, read
    # once per tile, never in the K loop); more than that would be a regression
    assert fn.spill_store_bytes <= 16 and fn.spill_load_bytes <= 32, report.log
    assert not report.setmaxnreg_ignored() and not {"C7517", "C7519"} & set(report.codes), report.log
