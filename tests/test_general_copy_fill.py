"""A no-product kernel's row block filled by its consumers (warp-spec's ``fill``, the protocol's
``CopyFill`` step, codegen/hopper/lower_copy_fill.py), on the CPU: warp-spec chooses it and logs
why (``fill=tma`` pins the producer; a persistent grid keeps it), no producer, mbarrier or tensor
map; the step prints cp.async.wait_all and the consumers' barrier inside its mark (the protocol
lint, which now also covers non-bulk cp.async waits); the checker takes it as a write and a
meeting; the IR after the async rewrite runs on the roles interpreter and the PTX on the
simulator bit for bit as the register-tile backend's PTX of the same IR."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.passes import DEFAULT_PIPELINE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NORMS = ["rmsnorm", "softmax", "layernorm", "residual_layernorm"]
FILL_STEP = "fill tile x_row by cp.async; cp.async.wait_all; bar.sync: all consumer warpgroups meet"


def _general(name, pipeline=None, **extra):
    return tkjit.load(EXAMPLES / f"{name}.tk", lowering="general", require_hopper=True, cache=False,
                      pipeline=pipeline, **extra)


def _decisions(k, decision_part):
    return [d for d in k.explain().decisions if decision_part in str(d.get("value", d))]


@pytest.mark.parametrize("name", NORMS)
def test_warp_spec_lets_the_consumers_fill_the_row_block_and_says_why(name):
    k = _general(name)
    text = str(k.explain())
    assert re.search(r"row block %x_row(, %res_row)?: filled by the consumers with cp\.async", text)
    assert "auto: the consumers fill the block themselves" in text
    assert "so no producer: no TMA, no mbarrier, no tensor map" in text
    assert 'fill = "cp.async"' in k.asm["after:warp-spec"] and "producer = false" in k.asm["after:warp-spec"]
    ptx = k.asm["ptx"]
    assert "cp.async.cg.shared.global" in ptx
    assert not re.search(r"mbarrier|cp\.async\.bulk|tensormap|setmaxnreg", ptx)
    assert ".reqntid 128," in ptx and k.metadata["block"] == [128, 1, 1]
    assert "consumers fill the row block themselves" in text  # the backend's decision
    if name == "residual_layernorm":  # x's copies in flight while res's are issued; res's wait lands both
        assert "fill tile x_row by cp.async, its copies left in flight" in k.metadata["protocol"]
    else:
        assert FILL_STEP in k.metadata["protocol"]
    # explain() names the layout the fill writes and says there is no producer (not layout's
    # TMA swizzle as the last word, nor a producer the async schedule does not have)
    assert "%x_row: laid out in the register-tile backend's row-XOR layout, not the layout pass's swizzle" in text
    assert "the schedule as IR: no producer and 1 consumer(s)" in text
    assert re.search(r"named barrier 1, at the protocol's \d scratch_sync step", text)
    if name == "residual_layernorm":  # two row blocks: two steps, the second's wait lands both
        assert FILL_STEP.replace("x_row", "res_row") in k.metadata["protocol"]
        assert "the copies of tile(s)" not in k.metadata["protocol"]  # (no fill_wait step)
        assert "(wait = deferred) leaves its copies in flight beside the next block's copies" in text


def test_fill_tma_pins_the_producer_and_a_persistent_grid_keeps_it():
    pinned = _general("rmsnorm", pipeline=DEFAULT_PIPELINE.replace("warp-spec", "warp-spec{fill=tma}", 1))
    text = str(pinned.explain())
    assert "row block %x_row: filled by the producer's TMA" in text and "warp-spec{fill=tma}" in text
    assert "cp.async.bulk.tensor" in pinned.asm["ptx"] and "cp.async.cg" not in pinned.asm["ptx"]
    assert "row-XOR layout" not in text and "the schedule as IR: a producer and 1 consumer(s)" in text
    resident = _general("rmsnorm", pipeline=DEFAULT_PIPELINE.replace(
        "stream-cols", "stream-cols{resident=2 stages=4}", 1))
    text = str(resident.explain())
    assert "filled by the producer's TMA" in text and "a persistent block loop" in text
    with pytest.raises(tkjit.errors.TkError, match="fill must be auto, tma, cp.async"):
        _general("rmsnorm", pipeline=DEFAULT_PIPELINE.replace("warp-spec", "warp-spec{fill=yes}", 1)).asm["ptx"]


@pytest.mark.parametrize("name", NORMS)
def test_the_fill_step_prints_every_wait_and_barrier_of_the_fill(name):
    """The protocol lint (every synchronization line inside a step mark, the marks exactly the
    async-schedule IR's steps; cp.async.wait_all/wait_group/commit_group included): the fill's
    wait and the consumers' barrier are the copy_fill step's, copy_cols reads print no barrier."""
    from test_general_lowering import protocol_lint
    k = _general(name)
    assert protocol_lint(k) == []
    ptx = k.asm["ptx"]
    step = FILL_STEP.replace("x_row", "res_row") if name == "residual_layernorm" else FILL_STEP
    assert re.search(r"// step: " + re.escape(step) + r"\n\s*cp\.async\.wait_all;\n\s*bar\.sync 1, 128;\n"
                     r"\s*// end step", ptx)
    waits = [line.strip() for line in ptx.splitlines() if line.strip().startswith("cp.async.wait")]
    assert waits == ["cp.async.wait_all;"] and "bar.sync 0" not in ptx
    wait = ", wait = false" if name == "residual_layernorm" else ""  # (stream-cols: wait = deferred)
    assert f'copy_fill {{tile = "x_row"{wait}, anchored = true}}' in k.asm["after:async-schedule"]


def test_the_lint_catches_a_fill_wait_outside_its_step():
    from test_general_lowering import sync_outside_the_protocol
    k = _general("rmsnorm")
    broken = k.asm["ptx"].replace(f"// step: {FILL_STEP}\n", "", 1)
    assert "cp.async.wait_all;" in sync_outside_the_protocol(broken)


def test_the_checker_takes_the_fill_as_a_write_then_a_meeting():
    """Unrolled for the checker, copy_fill is a write of the tile by each consumer (checked as a
    consumer-written tile's: no wgmma reading it in flight) and then the consumers' meeting."""
    from tkjit.passes.async_schedule import protocol_from_ir
    from tkjit.passes.sync_unroll import ARRIVE, TILE_WRITE, WAIT, Layout, unroll
    k = _general("softmax")
    proto = protocol_from_ir(k.async_ir)
    assert not proto.rings and not proto.persistent
    (tiles,) = proto.consumer
    assert [type(st).__name__ for st in tiles.body][:2] == ["CopyFill", "ScratchSync"]
    layout = Layout.of(proto)
    assert layout.tiles == ("x_row",)
    actions = unroll(proto, proto.consumer, (0,), layout)
    assert [a.op for a in actions[:3]] == [TILE_WRITE, ARRIVE, WAIT]
    assert actions[1].arg == actions[2].arg == layout.sync_bar


@pytest.mark.parametrize("name", NORMS)
def test_the_rewritten_schedule_runs_on_the_roles_interpreter(name):
    """The IR after the async rewrite (and the tile program with its protocol), run as the general
    lowering schedules it in two interleavings: the plain interpreter's result, bit for bit."""
    from test_general_no_product import _norm_case
    from tkjit.interpreter.roles import run_roles
    k = _general(name)
    args, outs = _norm_case(name, 20, 1024)
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    for seed in (0, 1):
        for ir in (k.async_ir, k.ir):
            mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            run_roles(ir, mine, seed=seed)
            for i in outs:
                assert torch.equal(mine[i].view(torch.int16), ref[i].view(torch.int16)), (name, seed)


@pytest.mark.parametrize("name, r, d", [("rmsnorm", 20, 1024), ("softmax", 33, 1024), ("layernorm", 7, 1024),
                                        ("residual_layernorm", 20, 1024), ("rmsnorm", 17, 2048),
                                        ("softmax", 5, 2048)])
def test_the_filled_kernels_agree_on_the_ptx_simulator(name, r, d):
    """The PTX on the simulator at row counts that are not multiples of the 16-row blocks (the
    cp.async pieces past the tensor zero-filled, the stores clipped): bit for bit the register-tile
    backend's PTX of the same IR, within a bf16 unit of the interpreter, ptxas clean, no spills."""
    from test_general_no_product import _norm_case, _sass, assert_simulated_agree
    constants = None if d == 1024 else {"C" if name == "softmax" else "D": d}
    src = (EXAMPLES / f"{name}.tk").read_text()
    general = tkjit.compile(src, lowering="general", require_hopper=True, cache=False, constants=constants)
    auto = tkjit.compile(src, cache=False, constants=constants,
                         pipeline="canonicalize,stream-cols,mask-branch,scale-fold")
    assert "cp.async.cg" in general.asm["ptx"] and "register-tile" in auto.asm["ptx"].splitlines()[0]
    assert not re.search(r"\b(LDL|STL)\b", _sass(general)), "spilled"
    assert not [m for m in general.metadata["ptxas"]["messages"] if m["level"] == "warning"]
    args, outs = _norm_case(name, r, d)
    assert_simulated_agree(general, auto, args, outs)


def test_a_missing_fill_barrier_is_caught_on_the_simulator(monkeypatch):
    """The simulator check can fail: the fill's wait dropped (the reads race the copies)."""
    from test_general_no_product import _norm_case, _simulated
    from tkjit.codegen.hopper.lower_consumer import ConsumerRole

    def broken(role, step):  # the fill's meeting without its cp.async.wait_all
        role.consumer_sync(step)
    monkeypatch.setattr(ConsumerRole, "fill_wait", broken)
    src = (EXAMPLES / "softmax.tk").read_text()
    general = tkjit.compile(src, lowering="general", require_hopper=True, cache=False)
    assert "cp.async.wait_all;" not in [line.strip() for line in general.asm["ptx"].splitlines()]
    args, outs = _norm_case("softmax", 20, 1024)
    try:
        (got,) = _simulated(general, args, outs)
    except Exception:  # noqa: BLE001 - the simulator may also refuse the racy read outright
        return
    (ref,) = _simulated(tkjit.compile(src, cache=False, pipeline="canonicalize,stream-cols,mask-branch,scale-fold"),
                        args, outs)
    assert not torch.equal(got.view(torch.int16), ref.view(torch.int16))


def _wide_resln():
    """Residual + LayerNorm at D = 4096: stream-cols splits the row block over a cluster of 4 and
    marks both blocks' loads wait = deferred, ahead of the first chunk's loads straight from global
    memory and their row sum (the shift of the moments)."""
    return _general("residual_layernorm", constants={"D": 4096})


def test_blocks_filled_in_flight_are_awaited_before_their_first_reader():
    """Both blocks' copies are issued with no wait (copy_fill {wait = false}); one fill_wait lands
    them and the consumers meet right before the first op that reads either block (the first chunk
    loop), after the work that does not -- as the register-tile backend waits for deferred loads.
    The PTX prints one cp.async.wait_all, inside that step's marks."""
    from test_general_lowering import protocol_lint
    k = _wide_resln()
    proto = k.metadata["protocol"]
    for tile in ("x_row", "res_row"):
        assert f"fill tile {tile} by cp.async, its copies left in flight" in proto
    assert "the copies of tile(s) x_row, res_row land: cp.async.wait_all; bar.sync" in proto
    lines = k.asm["after:async-schedule"].splitlines()
    at = next(n for n, line in enumerate(lines) if 'fill_wait {tiles = "x_row,res_row", anchored = true}' in line)
    before, after = "\n".join(lines[:at]), lines[at + 1:]
    assert 'copy_fill {tile = "x_row", wait = false' in before and 'copy_fill {tile = "res_row", wait = false' in before
    assert "%x_first = load" in before and "= row_sum %" in before  # the work that reads neither block
    first = next(line for line in after if "scratch_sync" not in line)
    assert " = for " in first and "copy_cols %x_row" not in before
    assert protocol_lint(k) == []
    waits = [line.strip() for line in k.asm["ptx"].splitlines() if line.strip().startswith("cp.async.wait")]
    assert waits == ["cp.async.wait_all;"]
    assert "leaves its copies in flight beside the next block's copies" in str(k.explain())


def test_a_read_of_a_block_still_in_flight_is_caught_by_the_roles_interpreter():
    """Residual + LayerNorm at D = 1024: x's copies stay in flight until res's copy_fill waits
    (its cp.async.wait_all lands both). With that step's wait dropped from the IR text (wait =
    false), the first chunk's copy_cols reads blocks whose copies are in flight, and the roles
    interpreter says so; the IR as rewritten runs (test_the_rewritten_schedule_runs_on_the_roles_interpreter)."""
    from test_general_no_product import _norm_case
    from tkjit.interpreter.roles import ScheduleError, run_roles
    from tkjit.ir.parser import parse_kernel
    k = _general("residual_layernorm")
    text = k.asm["after:async-schedule"]
    assert 'copy_fill {tile = "x_row", wait = false, anchored = true}' in text
    waiting = 'copy_fill {tile = "res_row", anchored = true}'
    assert text.count(waiting) == 1
    broken = parse_kernel(text.replace(waiting, 'copy_fill {tile = "res_row", wait = false, anchored = true}'))
    args, _ = _norm_case("residual_layernorm", 20, 1024)
    with pytest.raises(ScheduleError, match="whose cp.async copies are in flight"):
        run_roles(broken, args)
