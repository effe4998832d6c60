"""The Hopper attention path on the CPU: the matcher, the plan (from the scheduling passes), the
protocol (explored by the sync checker), the PTX (ptxas assembles it: HGMMA, no local memory, no
spills, wgmma not serialized) and the fallbacks with their reasons."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from tkjit.codegen.hopper import attention_protocol, emit_hopper_ptx, match_attention, plan_attention
from tkjit.compiler import compile as compile_source
from tkjit.options import CompileOptions
from tkjit.passes.sync_check import check_protocol
from tkjit.runtime import toolchain
from support import needs_cuda_tools

SOURCE = (Path(__file__).resolve().parents[1] / "examples" / "attention.tk").read_text()
VARIANTS = [(d, causal) for d in (128, 64) for causal in (False, True)]
KEY_LOOP = "    for j in 0 .. kv_blocks {"


def pinned(stages: int, source: str = SOURCE) -> str:
    """The example with its key loop pinned to ``stages`` (it pins none: the pipeline pass sizes it)."""
    assert KEY_LOOP in source
    return source.replace(KEY_LOOP, f"    @stages({stages})\n{KEY_LOOP}")


@functools.lru_cache(maxsize=None)
def ir_of(d: int = 128, causal: bool = False, source: str = SOURCE, pipeline: str | None = None,
          bq: int | None = None, bkv: int | None = None):
    """The example's IR; ``bkv=128`` pins the key block where a test is about the 3-stage ring (the
    example's default at D = 128 non-causal is 176: 2 stages, K/V barriers split). Compiled for
    the template (``lowering=template``: scale-fold leaves the program as written)."""
    constants = {"D": d, "CAUSAL": causal} | ({"BQ": bq} if bq else {}) | ({"BKV": bkv} if bkv else {})
    opts = CompileOptions.resolve(constants=constants, cache=False, pipeline=pipeline, lowering="template")
    return compile_source(source, opts, filename="attention.tk").ir


def test_a_gemm_compile_imports_none_of_the_attention_path():
    """The attention matcher, plan and kernel are imported only when a kernel is not a GEMM
    (package ``__getattr__``); ``match_attention`` is still the function, not its module."""
    import json
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    attention = ["tkjit.codegen.hopper.attention_match", "tkjit.codegen.hopper.attention_plan",
                 "tkjit.codegen.hopper.attention", "tkjit.codegen.hopper.scalars"]
    code = ("import sys, json, tkjit; k = tkjit.compile(open('examples/gemm.tk').read(), cache=False); "
            "assert 'wgmma' in k.asm['ptx']; loaded = [m for m in %r if m in sys.modules]; "
            "from tkjit.codegen.hopper import match_attention; "
            "print(json.dumps([loaded, match_attention.__module__, callable(match_attention)]))" % attention)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == [[], "tkjit.codegen.hopper.attention_match", True]


@pytest.mark.parametrize("d, causal", VARIANTS)
def test_the_example_matches(d, causal):
    m = match_attention(ir_of(d, causal))
    assert not isinstance(m, str), m
    assert (m.bq, m.bkv, m.d, m.causal) == (192 if d == 64 else 128, 176 if (d, causal) == (128, False) else 128, d, causal)
    assert (m.q, m.k, m.v, m.o, m.l) == (0, 1, 2, 3, 4)


def test_the_plan_follows_the_passes():
    ir = ir_of(128, True)
    m, plan = plan_attention(ir)
    assert plan.consumers == ir.attrs["consumers"] and list(plan.regs) == list(ir.attrs["regs"])
    assert plan.stages == m.loop.attrs["stages"] and plan.bars == m.loop.attrs["bars"]
    assert plan.q_offset == m.q_load.attrs["smem"] and plan.smem_bytes == ir.attrs["smem"] + 1024
    assert plan.heavy_first
    log = {d["decision"]: d for d in plan.decisions}
    for what in ("consumers", "registers", "stages", "block size", "shared_memory", "block order"):
        assert what in log
    assert "reg-budget" in log["registers"]["why"] and "heaviest" in log["block order"]["value"]


@pytest.mark.parametrize("d, stages, slots", [(128, 3, 1), (64, 6, 2)])
def test_the_pipeline_pass_sizes_the_ring_from_the_tiles(d, stages, slots):
    """Unpinned, the K/V ring gets as many stages as fit beside Q: 3 x 64 KB at D = 128, 6 x 32 KB
    at D = 64 (the register-direct epilogue needs no staging of its own). Causal, persistent: at
    D = 64 the second Q slot takes the ring's last stage."""
    m, plan = plan_attention(ir_of(d, True))
    assert m.loop.attrs["stages"] == stages and (plan.stages, plan.q_slots) == (stages - slots + 1, slots)
    logged = {x["decision"]: x for x in plan.decisions}["stages"]
    assert "pipeline pass" in logged["why"]
    assert logged["value"] == plan.stages  # what the ring runs, after the second Q slot took its stage
    assert (f"{stages} -> {plan.stages}" in logged["why"]) == (slots == 2)
    assert plan.smem_bytes <= 232448


@pytest.mark.parametrize("d, causal, stages, kept, slots", [(128, True, 2, 2, 2), (128, True, 3, 3, 1),
                                                             (128, False, 2, 2, 1), (64, False, 6, 5, 2),
                                                             (64, True, 6, 5, 2)])
def test_the_protocol_passes_the_checker(d, causal, stages, kept, slots):
    """Persistent (several tiles per CTA, phases carried on; D = 128 keeps 3 stages and one Q slot,
    with 2 stages a second Q slot fits beside them; D = 64 gives its sixth stage to a second Q
    slot), causal kernels too (their grid is chosen at launch: one tile per CTA is the loop run
    once)."""
    m, plan = plan_attention(ir_of(d, causal, pinned(stages)))
    assert (plan.stages, plan.q_slots, plan.persistent) == (kept, slots, True)
    proto = attention_protocol(m, plan)
    assert proto.persistent
    report = check_protocol(proto)
    assert len(report.results) >= 5


def test_causal_consumers_compute_only_the_key_blocks_their_rows_see():
    """D = 64 causal (192-row tiles over 128-row key blocks): consumer c computes min(T, (q0 + 64c +
    63) / 128 + 1) blocks and idles through the tile's rest (its fill awaited, the stage released);
    the checker explores tiles where the consumers' own trips differ and catches an idle trip that
    releases its stage without waiting for the fill (its release would count toward the fill
    another consumer may still be reading). D = 128 (BQ = BKV) has nothing to skip and says so."""
    from dataclasses import replace
    from tkjit.passes.sync_check import SyncError
    from tkjit.passes.sync_protocol import Loop, Wait
    m, plan = plan_attention(ir_of(64, True))
    log = {d["decision"]: d for d in plan.decisions}
    assert plan.own_trips and log["key blocks per consumer"]["value"] == "own"
    proto = attention_protocol(m, plan)
    assert proto.own_trips and "over this consumer's own trips" in proto.text()
    report = check_protocol(proto)
    assert any(not isinstance(e, int) and len(set(e[1:])) > 1 for r in report.results for e in r.case)
    (tiles,) = proto.consumer
    body = tuple(replace(st, body=tuple(x for x in st.body if not isinstance(x, Wait)))
                 if isinstance(st, Loop) and st.part == "rest" else st for st in tiles.body)
    with pytest.raises(SyncError) as err:
        check_protocol(replace(proto, consumer=(replace(tiles, body=body),)))
    assert err.value.violation.kind == "bad-release" and "own" in str(err.value)
    _, plan128 = plan_attention(ir_of(128, True))
    assert not plan128.own_trips
    assert "multiple of BQ" in {d["decision"]: d for d in plan128.decisions}["key blocks per consumer"]["why"]
    _, plain = plan_attention(ir_of(64, False))
    assert not plain.own_trips and "key blocks per consumer" not in {d["decision"] for d in plain.decisions}


@needs_cuda_tools
def test_idle_trips_take_their_turns_in_the_ptx():
    """Each consumer's own trip count is computed per tile (the mask's condition checked on the
    rest), and an idle trip takes its turn (bar.sync on its own barrier, bar.arrive on the next's
    unless it is the last consumer's last) before releasing the stage; no spills at 160 registers."""
    ptx, report, ops, meta = assembled(64, True)
    assert "$L_own_check" in ptx
    idle = ptx[ptx.index("$L_idle_trip_"):]
    idle = idle[:idle.index("$L_idle_trips_done")]
    assert "bar.sync" in idle and "bar.arrive" in idle and "mbarrier.try_wait" in idle
    assert "mbarrier.arrive" in idle and "wgmma" not in idle
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.stack_frame_bytes == 0, report.log


def test_metadata():
    _, meta = emit_hopper_ptx(ir_of(128, False), {"arch": "sm_90a"})
    maps = [p for p in meta["params"] if p["kind"] == "tensormap"]
    assert [(p["param"], p["box"], p["swizzle"]) for p in maps] == [
        (0, [64, 128, 1, 1], 128), (1, [64, 176, 1, 1], 128), (2, [64, 176, 1, 1], 128)]
    assert meta["block"] == [384, 1, 1] and meta["backend"] == "wgmma"
    tiles = ["mul", ["mul", ["dim", "B"], ["dim", "H"]], ["cdiv", ["dim", "N"], 128]]
    assert meta["grid"] == [["min", tiles, ["num_sms"]]]   # persistent
    assert "ring k " in meta["protocol"] and "ring v " in meta["protocol"] and "one-shot" in meta["protocol"]


def assemble(ptx: str, meta: dict):
    """ptxas's report and the SASS opcodes, in order, of an emitted kernel."""
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    return report, re.findall(r"/\*[0-9a-f]{4,5}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", toolchain.sass(cubin))


@functools.lru_cache(maxsize=None)
def assembled(d: int, causal: bool, bq: int | None = None):
    ptx, meta = emit_hopper_ptx(ir_of(d, causal, bq=bq), {"arch": "sm_90a"})
    return (ptx, *assemble(ptx, meta), meta)


@needs_cuda_tools
@pytest.mark.parametrize("d, causal", VARIANTS)
def test_assembles_with_hgmma_and_no_local_memory(d, causal):
    ptx, report, ops, meta = assembled(d, causal)
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0 and fn.stack_frame_bytes == 0, report.log
    assert not report.setmaxnreg_ignored(), report.log
    assert not {"C7517", "C7519"} & set(report.codes), report.log
    assert not {"LDL", "STL"} & {op.split(".")[0] for op in ops}
    hgmma = [op for op in ops if op.startswith("HGMMA")]
    bkv = 176 if (d, causal) == (128, False) else 128
    assert len(hgmma) == 2 * (d // 16 + bkv // 16)  # S: D/16, P·V: BKV/16 k-steps; first trip peeled, last P·V after the loop
    assert any(op.startswith("UTMALDG.4D") for op in ops)
    assert ptx.count(f"m64n{d}k16") >= 8 and "}, {%r" in ptx  # P·V with P from registers (RS form)


def test_ptx_text_of_the_softmax():
    ptx, _ = emit_hopper_ptx(ir_of(128, True), {"arch": "sm_90a"})
    assert ptx.count("shfl.sync.bfly.b32") >= 8      # row max over the quad, row sums at the end
    assert "ex2.approx.ftz.f32" in ptx and "cvt.rn.bf16x2.f32" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx


def test_the_scale_is_folded_only_when_positive():
    """scale > 0: one FFMA per score (raw maxima); otherwise the scores are scaled first. Both
    forms are emitted under a uniform branch on the scale's sign (per softmax: peeled trip, loop)."""
    ptx, _ = emit_hopper_ptx(ir_of(128, True), {"arch": "sm_90a"})
    assert re.search(r"setp\.gt\.f32 %p\d+, %f\d+, 0f00000000;", ptx)
    forms = re.findall(r"bra\.uni (\$L_scale_not_positive_\d+);(.*?)\1:(.*?)\$L_softmax_done_\d+:", ptx, re.S)
    assert len(forms) == 2
    for _, folded, plain in forms:
        assert folded.count("fma.rn.f32") >= 64 and "sub.f32" not in folded
        assert plain.count("mul.f32") >= 64 and plain.count("sub.f32") >= 64


@pytest.mark.parametrize("edit, reason", [
    (("o = mma_AB(cvt<bf16>(p), v, mul_row(o, alpha))", "o = mma_AB(cvt<bf16>(p), v, o)"),
     "the accumulator of P·V must be 'mul_row'"),
    (("l = l * alpha + row_sum(p)", "l = l * alpha + row_max(p)"), "the new row sum's second term"),
    (("@consumers(max(BQ / 64, 2))", "@consumers(max(BQ / 64, 2))\n"), None),
])
def test_refusals_name_what_does_not_match(edit, reason):
    ir = ir_of(128, False, SOURCE.replace(*edit))
    decisions: list = []
    out = emit_hopper_ptx(ir, {"arch": "sm_90a", "lowering": "template"}, decisions)
    if reason is None:
        assert out is not None
        return
    assert out is None
    assert decisions[0]["value"] == "mma.sync" and "is not the attention pattern" in decisions[0]["why"]
    assert reason in decisions[0]["why"], decisions[0]["why"]


def test_without_the_scheduling_passes_it_falls_back_with_the_reason():
    decisions: list = []
    assert emit_hopper_ptx(ir_of(128, False, pipeline="canonicalize"), {"arch": "sm_90a"}, decisions) is None
    assert "scheduling passes" in decisions[0]["why"]


@pytest.mark.parametrize("causal", [False, True])
def test_three_consumers_at_head_dim_64(causal):
    """BQ = 192 at D = 64: three consumer warpgroups (512 threads, 128 registers at entry); the
    consumers hold O 32 + S 64 + P 32 + about 32, so the plan takes a 24/160 split where the
    reg-budget pass's estimate left 152 (ptxas spills 48 B there)."""
    m, plan = plan_attention(ir_of(64, causal, bq=192))
    assert (plan.consumers, plan.threads, plan.regs, plan.maxnreg) == (3, 512, (24, 160), 128)
    assert 128 * plan.regs[0] + 3 * 128 * plan.regs[1] <= 65536
    log = {d["decision"]: d for d in plan.decisions}
    assert "160" in log["registers"]["why"] and "O (32), S (64) and P (32)" in log["registers"]["why"]
    report = check_protocol(attention_protocol(m, plan))
    assert len(report.results) >= 5
    _, meta = emit_hopper_ptx(ir_of(64, causal, bq=192), {"arch": "sm_90a"})
    assert meta["block"] == [512, 1, 1] and meta["registers"] == [24, 160]
    tiles = ["mul", ["mul", ["dim", "B"], ["dim", "H"]], ["cdiv", ["dim", "N"], 192]]
    short = ["gt", ["cdiv", ["dim", "N"], 128], 8]   # key loops longer than SHORT_CAUSAL_TRIPS
    assert meta["grid"] == ([["min", tiles, ["max", ["num_sms"], ["mul", tiles, short]]]] if causal
                            else [["min", tiles, ["num_sms"]]])


def test_a_pinned_register_split_is_kept_and_the_log_warns():
    """A split the reg-budget pass would not choose comes from the user (@regs or its options):
    the plan keeps it even below what a consumer holds, and says to expect spills."""
    source = SOURCE.replace("@consumers(", "@regs(32, 152) @consumers(", 1)
    assert source != SOURCE
    m, plan = plan_attention(ir_of(64, False, source=source, bq=192))
    assert plan.regs == (32, 152)
    why = {d["decision"]: d for d in plan.decisions}["registers"]["why"]
    assert why.startswith("pinned (32/152") and "expect ptxas to spill" in why


@needs_cuda_tools
@pytest.mark.parametrize("causal", [False, True])
def test_three_consumers_assemble_without_spills(causal):
    ptx, report, ops, meta = assembled(64, causal, 192)
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0 and fn.stack_frame_bytes == 0, report.log
    assert not report.setmaxnreg_ignored() and not {"C7517", "C7519"} & set(report.codes), report.log
    assert "setmaxnreg.inc.sync.aligned.u32 160" in ptx and "setmaxnreg.dec.sync.aligned.u32 24" in ptx
    assert "bar.sync" in ptx and len([op for op in ops if op.startswith("HGMMA")]) == 2 * (64 // 16 + 128 // 16)


def test_three_consumers_do_not_fit_at_head_dim_128():
    """O is 64 registers at D = 128: 64 + 64 + 32 + 32 > 160, so BQ = 192 goes to mma.sync, saying why."""
    decisions: list = []
    assert emit_hopper_ptx(ir_of(128, False, bq=192, bkv=128), {"arch": "sm_90a", "lowering": "template"},
                           decisions) is None
    assert "3 consumers get at most 160 registers" in decisions[0]["why"], decisions[0]["why"]


@pytest.fixture
def pins(monkeypatch):
    """Set the attention plan's module pins for one test (ir_of's cache holds IR, not plans)."""
    from tkjit.codegen.hopper import attention_plan

    def set_pins(**values):
        for name, value in values.items():
            monkeypatch.setattr(attention_plan, name, value)
    return set_pins


def test_two_q_slots_by_default_where_the_ring_keeps_its_stages(pins):
    """D = 64 (three consumers) takes a second Q slot over the ring's last stage (6 -> 5) with each
    slot's turns on their own named barriers, causal too (persistent); D = 128 (it would leave 2
    stages) and causal kernels without the tile loop (PERSISTENT_CAUSAL = False) keep one;
    Q_SLOTS = 1 pins the round-4 kernel."""
    m, plan = plan_attention(ir_of(64, False))
    log = {d["decision"]: d for d in plan.decisions}
    assert (plan.consumers, plan.stages, plan.q_slots, plan.turns) == (3, 5, 2, "per slot")
    assert "hang" in log["consumer turns"]["why"] and "4 .. 9" in log["consumer turns"]["why"]
    assert plan_attention(ir_of(64, True))[1].q_slots == 2
    pins(PERSISTENT_CAUSAL=False)
    assert plan_attention(ir_of(64, True))[1].q_slots == 1
    m, plan = plan_attention(ir_of(128, False, bkv=128))
    assert (plan.stages, plan.q_slots, plan.turns) == (3, 1, "per tile")
    m, plan = plan_attention(ir_of(128, False))   # BKV = 176: 2 stages, no room for a second Q
    assert (plan.stages, plan.q_slots, plan.split_kv) == (2, 1, True)
    assert "176-row key blocks" in {d["decision"]: d for d in plan.decisions}["K/V barriers"]["why"]
    pins(Q_SLOTS=1)
    m, plan = plan_attention(ir_of(64, False))
    assert (plan.stages, plan.q_slots, plan.turns) == (6, 1, "per tile")
    assert {d["decision"]: d for d in plan.decisions}["Q slots"]["why"] == "pinned (Q_SLOTS = 1)"
    pins(Q_SLOTS=2, Q2_MAX_CONSUMERS=2)
    assert plan_attention(ir_of(64, False))[1].q_slots == 1
    m, plan = plan_attention(ir_of(64, False, bq=128))
    assert plan.consumers == 2 and plan.q_slots == 2


def _turn_programs(consumers: int, tiles: int, trips: int, turns: str) -> list[list[tuple]]:
    """Each consumer's named-barrier actions over a CTA's ``tiles`` (``trips`` key blocks each), as
    the emitter places them: a turn per trip plus the last P·V's, each ``("sync", bar)`` then
    ``("arrive", next consumer's bar)``; consumer 0 skips the wait of a tile's first turn and the
    last consumer the hand-on of its last ("per tile", "per slot": bars + consumers·slot; "across
    tiles": only in the CTA's first / last tile). ``("tile", t)`` marks where a consumer opens tile t."""
    progs = []
    for c in range(consumers):
        prog = []
        for t in range(tiles):
            prog.append(("tile", t))
            shift = consumers * (t % 2) if turns == "per slot" else 0
            for k in range(trips + 1):
                first_skip = c == 0 and k == 0 and (turns != "across tiles" or t == 0)
                last_skip = c == consumers - 1 and k == trips and (turns != "across tiles" or t == tiles - 1)
                if not first_skip:
                    prog.append(("sync", c + shift))
                if not last_skip:
                    prog.append(("arrive", (c + 1) % consumers + shift))
            prog.append(("done", t))
        progs.append(prog)
    return progs


def _turns_deadlock(consumers: int, tiles: int, trips: int, turns: str, slots: int) -> str | None:
    """Explore every interleaving of the consumers' turn actions (a named barrier of two warpgroups
    completes when two arrivals are in; a sync is an arrival that then waits for completion), a
    consumer opening tile t only once every consumer finished tile t - slots (Q's slot is refilled
    after all of them released it). Returns what went wrong, or None."""
    progs = _turn_programs(consumers, tiles, trips, turns)
    start = (tuple(0 for _ in progs), (), ())  # pcs, barriers ((bar, arrived mask, gen)), waiting
    seen, todo = {start}, [start]
    while todo:
        pcs, bars, waiting = todo.pop()
        state_bars = dict((b, (mask, gen)) for b, mask, gen in bars)
        moved = False
        for c, prog in enumerate(progs):
            if pcs[c] == len(prog):
                continue
            kind, arg = prog[pcs[c]]
            nb = dict(state_bars)
            wait = dict(waiting)
            if c in wait:  # blocked in bar.sync until that generation completes
                b, gen = wait[c]
                if nb.get(b, (0, 0))[1] == gen:
                    continue
                del wait[c]
                nxt = list(pcs); nxt[c] += 1
            elif kind == "tile":
                if arg >= slots and any(p.index(("done", arg - slots)) >= pcs[o] for o, p in enumerate(progs)):
                    continue
                nxt = list(pcs); nxt[c] += 1
            elif kind == "done":
                nxt = list(pcs); nxt[c] += 1
            else:
                mask, gen = nb.get(arg, (0, 0))
                if mask >> c & 1:
                    return f"consumer {c} arrived twice on turn barrier {arg} in one phase"
                mask |= 1 << c
                if bin(mask).count("1") == 2:
                    mask, gen = 0, gen + 1
                nb[arg] = (mask, gen)
                nxt = list(pcs)
                if kind == "sync" and nb[arg][1] == gen and mask:
                    wait[c] = (arg, gen)
                else:
                    nxt[c] += 1
            moved = True
            st = (tuple(nxt), tuple(sorted((b, m, g) for b, (m, g) in nb.items())), tuple(sorted(wait.items())))
            if st not in seen:
                seen.add(st)
                todo.append(st)
        if not moved and any(pc < len(p) for pc, p in zip(pcs, progs)):
            return f"deadlock at {pcs}"
    return None


@pytest.mark.parametrize("consumers", [2, 3])
def test_the_turn_barriers_of_two_q_slots(consumers):
    """The 2026-11-21 hang, on the CPU: with turns restarted per tile on one set of barriers and a
    second Q slot, consumer 0 can open the next tile and arrive twice on consumer 1's barrier; one Q
    slot, a set of barriers per slot, or one rotation across the tiles are safe."""
    assert "arrived twice" in _turns_deadlock(consumers, 3, 2, "per tile", slots=2)
    assert _turns_deadlock(consumers, 3, 2, "per tile", slots=1) is None
    assert _turns_deadlock(consumers, 3, 2, "per slot", slots=2) is None
    assert _turns_deadlock(consumers, 3, 2, "across tiles", slots=2) is None


@needs_cuda_tools
def test_two_q_slots_take_their_turns_per_slot_in_the_ptx():
    """Consumers' turn barriers are 4 + c + 3·slot (registers set per tile); no spills."""
    ptx, report, ops, meta = assembled(64, False)
    assert re.search(r"mad\.lo\.u32 %r\d+, %r\d+, 3, %r\d+;", ptx)
    assert ptx.count("mbarrier.init") == 2 * 2 + 2 * 5
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.stack_frame_bytes == 0, report.log


def test_two_q_slots_take_a_stage_only_where_three_remain(pins):
    """Persistent D = 64 (three consumers allowed by pin): Q's second slot (24 KB) takes the ring's
    last stage (6 -> 5), K/V keep one barrier pair; D = 128 keeps 3 stages and one Q slot
    (Q2_MIN_STAGES); pinned to 2 it goes 3 -> 2 stages and, with 2, K and V get their own barriers."""
    pins(Q_SLOTS=2, Q2_MAX_CONSUMERS=3)
    m, plan = plan_attention(ir_of(64, False))
    assert (plan.stages, plan.q_slots, plan.split_kv) == (5, 2, False)
    assert plan.q_offset2 == 5 * plan.stage_stride and plan.smem_bytes <= 232448
    log = {d["decision"]: d for d in plan.decisions}
    assert "6 -> 5 stages" in log["Q slots"]["why"]
    m, plan = plan_attention(ir_of(128, False, bkv=128))
    assert (plan.stages, plan.q_slots, plan.split_kv) == (3, 1, False)
    pins(Q2_MIN_STAGES=2)
    m, plan = plan_attention(ir_of(128, False, bkv=128))
    assert (plan.stages, plan.q_slots, plan.split_kv) == (2, 2, True)
    assert plan.q_offset2 == 2 * plan.stage_stride and plan.v_bars > plan.q_bars
    proto = attention_protocol(m, plan)
    assert [r.name for r in proto.rings] == ["q", "k", "v"] and proto.ring("q").stages == 2
    assert len(check_protocol(proto).results) >= 5


@pytest.mark.parametrize("d, causal, stages", [(128, False, 2), (128, True, 2), (64, False, 3)])
def test_split_kv_protocol_passes_the_checker(pins, d, causal, stages):
    """K and V as two rings: S_j waits for K_j only, P_{j-1}·V_{j-1} for V one trip behind; every
    case of the checker (persistent: slots and phases carried over tiles) passes."""
    pins(SPLIT_KV_BARRIERS=True)
    m, plan = plan_attention(ir_of(d, causal, pinned(stages)))
    proto = attention_protocol(m, plan)
    assert plan.split_kv and "ring k" in proto.text() and "ring v" in proto.text()
    assert len(check_protocol(proto).results) >= 5


def _mutate(proto, old, new):
    """The protocol with consumer step ``old`` (anywhere in its tree) replaced by ``new`` steps."""
    from dataclasses import replace

    def walk(steps):
        out = []
        for st in steps:
            if st == old:
                out.extend(new)
            elif hasattr(st, "body"):
                out.append(replace(st, body=walk(st.body), **({"orelse": walk(st.orelse)} if hasattr(st, "orelse") else {})))
            else:
                out.append(st)
        return tuple(out)
    return replace(proto, consumer=walk(proto.consumer))


@pytest.mark.parametrize("what, kind", [("no V wait", ("early-read", "wrong-phase")),
                                        ("K released before S retires", ("release-before-read",))])
def test_the_checker_catches_a_broken_split_protocol(pins, what, kind):
    """A consumer that issues P·V without waiting for V's full barrier, or releases K_j while S_j
    is still in flight, is caught on the CPU."""
    from tkjit.passes.sync_check import SyncError
    from tkjit.passes.sync_protocol import MmaWait, NotFirst, Release, Wait
    pins(SPLIT_KV_BARRIERS=True)
    m, plan = plan_attention(ir_of(128, False))
    proto = attention_protocol(m, plan)
    if what == "no V wait":
        bad = _mutate(proto, NotFirst((Wait("v", "full"),)), ())
    else:
        bad = _mutate(_mutate(proto, Release("k"), ()), MmaWait(1), (MmaWait(1), Release("k")))
    with pytest.raises(SyncError) as err:
        check_protocol(bad)
    assert err.value.violation.kind in kind, err.value
    if what == "no V wait":
        assert err.value.violation.ring == "v"


@needs_cuda_tools
@pytest.mark.parametrize("d", [128, 64])
def test_split_kv_and_two_q_slots_assemble(pins, d):
    """Both new paths: no spills, no serialized wgmma, the same HGMMA count, 2 x stages more
    mbarriers initialised."""
    pins(SPLIT_KV_BARRIERS=True, Q_SLOTS=2, Q2_MIN_STAGES=2, Q2_MAX_CONSUMERS=3)
    ptx, meta = emit_hopper_ptx(ir_of(d, False, bkv=128), {"arch": "sm_90a"})
    report, ops = assemble(ptx, meta)
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.stack_frame_bytes == 0, report.log
    assert not {"C7517", "C7519"} & set(report.codes) and not report.setmaxnreg_ignored(), report.log
    assert len([op for op in ops if op.startswith("HGMMA")]) == 2 * (d // 16 + 128 // 16)
    stages = 2 if d == 128 else 5
    assert ptx.count("mbarrier.init") == 2 * 2 + 4 * stages
    assert "ring k" in meta["protocol"] and "ring v" in meta["protocol"]


def test_cross_tile_overlap_is_a_pin_of_persistent_two_slot_kernels(pins):
    """Off by default; pinned, a non-causal kernel with two Q slots runs its tiles' key loops as one
    pipeline (K/V split, one rotation of turns); causal kernels and one Q slot keep the tile loop,
    and the log says why."""
    assert not plan_attention(ir_of(128, False))[1].cross_tile
    assert not plan_attention(ir_of(64, False))[1].cross_tile
    pins(CROSS_TILE=True)
    m, plan = plan_attention(ir_of(128, False, bkv=128))  # one Q slot at D = 128 (3 stages kept)
    log = {d["decision"]: d for d in plan.decisions}
    assert not plan.cross_tile and "second Q slot" in log["cross-tile overlap"]["why"]
    pins(CROSS_TILE=True, Q2_MIN_STAGES=2, PERSISTENT_CAUSAL=True)
    m, plan = plan_attention(ir_of(128, True))
    assert not plan.cross_tile and "causal" in {d["decision"]: d for d in plan.decisions}["cross-tile overlap"]["why"]
    for d, stages in ((128, 2), (64, 5)):
        m, plan = plan_attention(ir_of(d, False, bkv=128))
        log = {x["decision"]: x for x in plan.decisions}
        assert (plan.cross_tile, plan.split_kv, plan.q_slots, plan.stages, plan.turns) == (
            True, True, 2, stages, "across tiles")
        assert log["cross-tile overlap"]["value"] == "on" and "consumer turns" not in log


@pytest.mark.parametrize("d", [128, 64])
def test_cross_tile_protocol_passes_the_checker(pins, d):
    """The next tile's S_0 waits for its Q (the other slot) and K_0, the previous tile's last P·V
    for its V; that V is released after both retired, a tile's Q at its end; every case of the
    checker (tiles of 0 .. 2·stages+1 trips, slots and phases carried over three and four tiles)."""
    pins(CROSS_TILE=True, Q2_MIN_STAGES=2)
    m, plan = plan_attention(ir_of(d, False, bkv=128))
    proto = attention_protocol(m, plan)
    text = proto.text()
    assert "if the CTA handled a tile before this one" in text and "do-while" in text
    assert len(check_protocol(proto).results) >= 12


@pytest.mark.parametrize("what, kind", [("no V wait at the boundary", ("early-read", "wrong-phase")),
                                        ("Q released before the loop", ("release-before-read", "overwrite")),
                                        ("V released before its P·V retires", ("release-before-read",))])
def test_the_checker_catches_a_broken_cross_tile_protocol(pins, what, kind):
    """The previous tile's last P·V issued without waiting for its V, a tile's Q released while
    its key loop still reads it, or that V released before the P·V retired: caught on the CPU."""
    from tkjit.passes.sync_check import SyncError
    from tkjit.passes.sync_protocol import IfPrevTile, MmaWait, Release, Wait
    pins(CROSS_TILE=True, Q2_MIN_STAGES=2)
    m, plan = plan_attention(ir_of(128, False, bkv=128))
    proto = attention_protocol(m, plan)
    if what == "no V wait at the boundary":
        bad = _mutate(proto, IfPrevTile((Wait("v", "full"),)), ())
    elif what == "Q released before the loop":
        bad = _mutate(_mutate(proto, Release("q"), ()), Wait("q", "full"), (Wait("q", "full"), Release("q")))
    else:
        from dataclasses import replace
        (tiles, *drain) = proto.consumer
        body = tuple(st for st in tiles.body)
        i = body.index(MmaWait(1))
        bad = replace(proto, consumer=(replace(tiles, body=body[:i] + (IfPrevTile((Release("v"),)),) + body[i:]),
                                       *drain))
    with pytest.raises(SyncError) as err:
        check_protocol(bad)
    assert err.value.violation.kind in kind, err.value


@needs_cuda_tools
@pytest.mark.parametrize("d", [128, 64])
def test_cross_tile_assembles_without_spills(pins, d):
    """S' needs its own accumulator while O is live at the tile boundary: ptxas fits it in 232
    (D = 128, two consumers) and 160 (D = 64, three) registers without spills; no serialized wgmma
    (the tile body is emitted twice so that none sits under a branch); HGMMAs: the first tile's S_0,
    two key loops, the boundary trip and the last P·V."""
    pins(CROSS_TILE=True, Q2_MIN_STAGES=2)
    ptx, meta = emit_hopper_ptx(ir_of(d, False, bkv=128), {"arch": "sm_90a"})
    report, ops = assemble(ptx, meta)
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.stack_frame_bytes == 0, report.log
    assert not {"C7517", "C7519"} & set(report.codes) and not report.setmaxnreg_ignored(), report.log
    s, pv = d // 16, 128 // 16
    assert len([op for op in ops if op.startswith("HGMMA")]) == s + 3 * (s + pv) + pv
    assert not [op for op in ops if op.startswith(("LDL", "STL"))]
    assert "cross-tile overlap" in {d["decision"] for d in meta["decisions"]}


@pytest.mark.parametrize("d", [64, 128])
def test_causal_grid_is_chosen_at_launch_by_the_key_loop(pins, d):
    """Causal kernels walk tiles like the non-causal ones; their grid expression launches min(tiles,
    SMs) CTAs where the longest key loop is at most SHORT_CAUSAL_TRIPS blocks (the persistent walk
    hides short tiles' starts), one CTA per tile past that (the hardware balances unequal tiles);
    the log says so. PERSISTENT_CAUSAL pins either way."""
    from tkjit.runtime.launcher import compile_grid
    _, meta = emit_hopper_ptx(ir_of(d, True), {"arch": "sm_90a"})
    grid = compile_grid(meta["grid"], ("B", "H", "N"), num_sms=132)
    bq = 192 if d == 64 else 128
    for n, b in ((1024, 16), (1025, 16), (2048, 8), (16384, 1)):
        tiles = b * 16 * -(-n // bq)
        assert grid(B=b, H=16, N=n) == ((min(tiles, 132) if -(-n // 128) <= 8 else tiles), 1, 1), n
    assert grid(B=1, H=1, N=512) == (-(-512 // bq), 1, 1)   # fewer tiles than SMs: one CTA each
    m, plan = plan_attention(ir_of(d, True))
    assert (plan.persistent, plan.grid) == (True, "by trips")
    assert "cdiv(N, 128) <= 8" in {x["decision"]: x for x in plan.decisions}["grid"]["value"]
    pins(PERSISTENT_CAUSAL=True)
    m, plan = plan_attention(ir_of(d, True))
    assert (plan.persistent, plan.grid) == (True, "sms")
    pins(PERSISTENT_CAUSAL=False)
    m, plan = plan_attention(ir_of(d, True))
    assert not plan.persistent and plan.q_slots == 1
