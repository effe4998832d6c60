"""The chunked causal linear attention (examples/linear_attention.tk) through the general sm_90a
lowering, and the capability it needs: a register tile stored to shared memory for a wgmma
(``copy`` rt -> st in a ring loop; the protocol's ``TileWrite`` between two consumer meetings;
codegen/hopper/lower_shared_store.py).

On the CPU: the interpreter against float64 torch; the scheduled IR on the CPU schedule
(interpreter/roles.py) bit for bit; the decisions and the protocol as text; the sync checker
catching a protocol without the meetings or the waits; the PTX lint; the store's addresses on
the PTX simulator against the layout a TMA box writes; the SASS (HGMMA, UTMALDG, no spills)."""
from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import tkjit
from tkjit.errors import NotAvailableError
from tkjit.interpreter.roles import run_roles
from tkjit.passes import sync_protocol as sp
from tkjit.passes.mbarrier import is_tile_write, schedule_of
from tkjit.passes.sync_check import SyncError, check_protocol

from support import needs_cuda_tools
from test_general_lowering import sync_outside_the_protocol

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_spec = importlib.util.spec_from_file_location("tkjit_example_linear_attention", EXAMPLES / "linear_attention.py")
driver = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(driver)


def _kernel(**options):
    return tkjit.load(EXAMPLES / "linear_attention.tk", cache=False, **options)


def _inputs(bsz, h, n, d=64):
    q, k, v = (torch.randn(bsz, h, n, d).bfloat16() / d ** 0.5 for _ in range(3))
    return q, k, v, torch.full((bsz, h, n, d), float("nan")).bfloat16()


@pytest.mark.parametrize("shape", [(1, 2, 150), (2, 1, 128), (1, 1, 40), (1, 1, 64)])
def test_the_interpreter_matches_float64(shape):
    """Ragged N (150: a last chunk of 22 rows), whole chunks, N below one chunk."""
    torch.manual_seed(0)
    q, k, v, o = _inputs(*shape)
    _kernel()(q, k, v, o)
    ref = driver.reference(q, k, v)
    assert not torch.isnan(o.double()).any()
    assert ((o.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_the_chunked_reference_is_causal_linear_attention():
    """The driver's float64 reference (chunk by chunk, as the kernel) is the plain formula."""
    q, k, v = (torch.randn(1, 2, 150, 16, dtype=torch.float64) for _ in range(3))
    plain = (q @ k.transpose(-1, -2)).tril() @ v
    assert torch.allclose(driver.reference(q, k, v, chunk=64), plain)


def test_the_cpu_schedule_gives_the_interpreter_result_bit_for_bit():
    """The scheduled IR run as its roles (TMA landings, the meetings, the tile written and read
    at the wgmma's wait) under several seeds: the plain interpreter's result, bit for bit."""
    k = _kernel(lowering="general")
    torch.manual_seed(1)
    q, kk, v, o = _inputs(1, 2, 150)
    k(q, kk, v, o)
    for seed in (0, 1, 2):
        mine = o.clone().fill_(float("nan"))
        run_roles(k.ir, [q, kk, v, mine], seed=seed)
        assert torch.equal(mine.float().nan_to_num(7.0), o.float().nan_to_num(7.0)), seed


def test_the_decisions_and_the_protocol_say_what_runs():
    k = _kernel(lowering="general")
    text = k.explain()
    assert re.search(r"tile %s \(\S*linear_attention.tk:18:7\): written by the consumers for a wgmma: "
                     r"named barrier, st.shared \+ fence.proxy.async, named barrier \(1 x 128 threads\)", text)
    assert re.search(r"tile write: %s at \S*linear_attention.tk:18:7: st.shared.b32\n +because 16 packed "
                     r"pairs per consumer thread, each at the byte a 128-byte TMA box would put it", text)
    assert "backend: wgmma" in text and "schedule dropped" not in text
    # smem-plan: %s is written every trip, so it lives across the loop's back edge and does not
    # share bytes with the staging tile of the store that follows it in the trip
    assert "reuses the bytes" not in text
    assert "in use while its loop runs: written again every trip" in text
    proto = schedule_of(k.ir).protocol.text()
    trip = proto[proto.index("wait full[c.s] parity ph"):proto.index("release: arrive empty[c.s]")]
    assert [line.strip() for line in trip.splitlines()] == [
        "wait full[c.s] parity ph",
        "mma reading c.s; commit_group", "mma_wait 0",
        "bar.sync: all consumer warpgroups meet",
        "write tile s from registers; fence.proxy.async",
        "bar.sync: all consumer warpgroups meet",
        "mma reading c.s; commit_group", "mma_wait 0",
        "mma reading c.s, tile s (consumer-written); commit_group", "mma_wait 0",
        # O's staged store (the epilogue pass), between the trip's third and fourth products
        "epilogue of O through its staging {",
        "bulk stores: at most 0 group(s) still read their staging (cp.async.bulk.wait_group.read, one thread)",
        "bar.sync staging[c]: this consumer's 4 warps meet",
        "stmatrix a round of O into staging O.0; fence.proxy.async",
        "bar.sync staging[c]: this consumer's 4 warps meet",
        "tma_store staging O.0 -> O (one thread); commit_group", "}",
        "mma reading c.s; commit_group", "mma_wait 0", ""]


# -- the sync checker -----------------------------------------------------------------------
def _written_protocol(consumers: int, drop=(), wait_after_read: bool = True) -> sp.Protocol:
    """One ring loop whose trip writes tile s, then issues a product reading stage c and one
    reading only tile s (a register A); ``drop``: indices of the trip's steps to leave out (0 the
    wait for the stage, 1 the first meeting, 2 the write, 3 the second meeting, 4 and 5 the first
    product and its wait, 6 and 7 the second's); ``wait_after_read=False``: the second product
    is waited for only after the loop."""
    ring = sp.Ring("c", 2, (sp.Load("q", 1024),), 1024, consumers)
    plan = sp.LoopPlan("c", (("c",), ()), in_flight=False, writes=((0, "s"),), tile_reads=((), ("s",)))
    proto = sp.standard_protocol("t", consumers, False, (ring,), (plan,))
    (tiles,) = proto.consumer
    (if_trips,) = tiles.body
    (loop,) = if_trips.body
    body = [st for i, st in enumerate(loop.body) if i not in drop and (wait_after_read or i != 7)]
    after = () if wait_after_read else (sp.MmaWait(0),)
    loop = dataclasses.replace(loop, body=tuple(body))
    consumer = (dataclasses.replace(tiles, body=(dataclasses.replace(if_trips, body=(loop, *after)),)),)
    return dataclasses.replace(proto, consumer=consumer)


def test_the_written_tile_protocol_reads_as_the_steps_say():
    text = _written_protocol(2).text()
    assert text.split("consumer (each of 2):\n")[1] == """\
  for each tile {
    if c.trips > 0 {
      loop c {
        wait full[c.s] parity ph
        bar.sync: all consumer warpgroups meet
        write tile s from registers; fence.proxy.async
        bar.sync: all consumer warpgroups meet
        mma reading c.s; commit_group
        mma_wait 0
        mma reading tile s (consumer-written); commit_group
        mma_wait 0
        release: arrive empty[c.s]
        advance c: s = s+1 mod stages, flip ph on wrap
      }
    }
  }
"""


@pytest.mark.parametrize("consumers", [1, 2])
def test_the_checker_passes_the_written_tile_protocol(consumers):
    assert check_protocol(_written_protocol(consumers)).results


@pytest.mark.parametrize("consumers", [1, 2])
def test_the_checker_catches_a_read_before_the_meeting_after_the_write(consumers):
    with pytest.raises(SyncError) as err:
        check_protocol(_written_protocol(consumers, drop=(3,)))
    assert err.value.violation.kind == "early-read"
    assert "reads tile s before the consumers met after writing it" in str(err.value)


def test_the_checker_catches_a_rewrite_while_another_consumer_still_reads():
    """Without the meeting before the write, consumer 0 may write the next trip's tile while
    consumer 1's wgmma still reads this trip's (or before it read it)."""
    with pytest.raises(SyncError) as err:
        check_protocol(_written_protocol(2, drop=(1,)))
    assert err.value.violation.kind == "overwrite"
    assert "tile s" in str(err.value)


def test_the_checker_catches_a_write_under_the_consumers_own_wgmma():
    """The product that reads the tile left in flight into the next trip: the next write would
    change what it reads."""
    with pytest.raises(SyncError) as err:
        check_protocol(_written_protocol(1, wait_after_read=False))
    assert err.value.violation.kind == "overwrite"
    assert "writes tile s while consumer 0's wgmma reading its previous contents is still in flight" \
        in str(err.value)


def test_the_checker_catches_a_read_of_a_tile_never_written():
    with pytest.raises(SyncError) as err:
        check_protocol(_written_protocol(1, drop=(2,)))
    assert err.value.violation.kind == "early-read"


# -- the PTX and the SASS -------------------------------------------------------------------
def test_every_barrier_and_the_fence_are_protocol_steps():
    """The lint: every named barrier, wgmma wait and mbarrier operation was printed by a protocol
    step; the proxy fence lies inside the TileWrite step, after its stores, and that step sits
    between two consumer meetings."""
    k = _kernel(lowering="general", require_hopper=True)
    ptx = k.asm["ptx"]
    stray = sync_outside_the_protocol(ptx, k.async_ir)
    assert stray == []
    lines = [line.strip() for line in ptx.splitlines()]
    step = lines.index("// step: write tile s from registers; fence.proxy.async")
    end = lines.index("// end step", step)
    region = lines[step:end]
    stores = [i for i, line in enumerate(region) if line.startswith("st.shared.b32")]
    assert len(stores) == 16  # 64 x 64 bf16 over 128 threads: 16 pairs each
    assert region[-1] == "fence.proxy.async.shared::cta;" and max(stores) < len(region) - 1
    before = [line for line in lines[:step] if line.startswith("bar.sync")][-1]
    after = next(line for line in lines[end:] if line.startswith("bar.sync"))
    assert before == after == "bar.sync 1, 128;"


@needs_cuda_tools
def test_the_sass_has_hgmma_and_tma_loads_and_no_spills():
    k = _kernel()  # the default compile (lowering auto) takes the general lowering
    sass = k.asm["sass"]
    assert k.metadata.get("lowering") == "general"
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"]


# -- the store on the PTX simulator ---------------------------------------------------------
WRITE = """
@consumers(1)
kernel w<W = 64>(A: gl<bf16>[N, 64], B: gl<bf16>[N, W], O: gl<f32>[N, W]) {
  for i in blocks(1) {
    acc: rt<f32>[64, W] = zeros()
    for c in 0 .. N / 64 {
      a: st<bf16>[64, 64] = A.tile(c, 0)
      b: st<bf16>[64, W] = B.tile(c, 0)
      s: st<bf16>[64, W] = cvt<bf16>(acc)
      acc = mma_AB(a, s, mma_AB(a, b, acc))
    }
    O.tile(0, 0) = acc
  }
}
"""


def _write_on_the_simulator(width: int) -> tuple[np.ndarray, int]:
    """The TileWrite of a [64, width] bf16 tile whose element (r, c) holds r * width + c (as raw
    16-bit patterns, set from the wgmma accumulator layout: thread 32w + l holds rows 16w + l/4
    (+8), columns 8j + 2(l%4) (+1)), then a barrier and a linear copy of the shared bytes out."""
    from ptxsim import Memory, launch
    from tkjit.codegen.emit_control import fresh
    from support import bare_consumer
    from tkjit.codegen.hopper.lower_shared_store import emit_tile_write
    from tkjit.passes.hopper import swizzle_bytes
    k = tkjit.compile(WRITE, constants={"W": width}, lowering="general", cache=False)
    copy = next(op for op in k.ir.walk() if is_tile_write(op))
    copy.attrs["smem"] = 0
    lk, role = bare_consumer(k.ir)
    b, ctx = lk.b, role.ctx
    ctx._cache[("tid", "tid")] = lk.tid
    b(f"mov.u32 {lk.smem}, tk_smem;")
    rep = fresh(ctx, copy.operands[0].type)
    w, lane = b.reg(), b.reg()
    b(f"shr.u32 {w}, {lk.tid}, 5;", f"and.b32 {lane}, {lk.tid}, 31;")
    for u, band in enumerate(rep.regs):
        for j, chunk in enumerate(band):
            for h, reg in enumerate(chunk):
                row, col, lo, hi = b.reg(), b.reg(), b.reg(), b.reg()
                b(f"shr.u32 {row}, {lane}, 2;", f"mad.lo.u32 {row}, {w}, 16, {row};",
                  f"add.u32 {row}, {row}, {64 * u + 8 * h};", f"and.b32 {col}, {lane}, 3;",
                  f"shl.b32 {col}, {col}, 1;", f"add.u32 {col}, {col}, {8 * j};",
                  f"mad.lo.u32 {lo}, {row}, {width}, {col};", f"add.u32 {hi}, {lo}, 1;",
                  f"shl.b32 {hi}, {hi}, 16;", f"or.b32 {reg}, {lo}, {hi};")
    ctx.bind(copy.operands[0], rep)
    b(*emit_tile_write(role, copy))
    b("bar.sync 0;")
    out = b.reg("b64")
    b(f"ld.param.u64 {out}, [out];", f"cvta.to.global.u64 {out}, {out};")
    words = 64 * width // 2
    for i in range(words // 128):
        idx, sa, v, ga, off = b.reg(), b.reg(), b.reg(), b.reg("b64"), b.reg("b64")
        b(f"add.u32 {idx}, {lk.tid}, {128 * i};", f"shl.b32 {sa}, {idx}, 2;", f"add.u32 {sa}, {sa}, {lk.smem};",
          f"ld.shared.b32 {v}, [{sa}];", f"mul.wide.u32 {off}, {idx}, 4;", f"add.s64 {ga}, {out}, {off};",
          f"st.global.b32 [{ga}], {v};")
    b("ret;")
    ptx = "\n".join([".version 8.0", ".target sm_90a", ".address_size 64",
                     ".extern .shared .align 1024 .b8 tk_smem[];", ".visible .entry w(.param .u64 out)", "{"]
                    + b.namer.declarations() + ["  " + b.lines[0]] + ["  " + x for x in ctx.prologue]
                    + [x if x.endswith(":") else "  " + x for x in b.lines[1:]] + ["}"])
    mem = Memory(1 << 20)
    buf = np.zeros(64 * width, dtype=np.uint16)
    addr = mem.alloc(buf)
    launch(ptx, {"dims": [], "grid": [1], "block": [128, 1, 1], "smem_bytes": 64 * width * 2}, [addr], {},
           mem=mem, max_ctas=1)
    return mem.read_back(addr, buf), swizzle_bytes(copy.result.type)


@pytest.mark.parametrize("width,span", [(64, 128), (128, 128), (32, 64)])
def test_the_write_lands_where_a_tma_box_puts_each_element(width, span):
    """On the PTX simulator (which also flags a shared read racing a write without a barrier):
    element (r, c) lies in panel c / (span / 2), at row r x span + its byte in the row, its 16-byte
    chunk XOR-swizzled with bits 7.. of the offset -- the layout a TMA box of ``span`` bytes
    writes, which the wgmma descriptors read (tests/test_hopper_codegen.py models them)."""
    got, have_span = _write_on_the_simulator(width)
    assert have_span == span
    mask = {128: 7, 64: 3, 32: 1}[span]
    cols = span // 2
    want = np.zeros(64 * width, dtype=np.uint16)
    for r in range(64):
        for c in range(width):
            off = (c // cols) * 64 * span + r * span + (c % cols) * 2
            off ^= ((off >> 7) & mask) << 4
            want[off // 2] = r * width + c
    assert np.array_equal(got, want)


# -- what is refused ------------------------------------------------------------------------
def test_what_the_tile_write_refuses_names_the_copy():
    """Outside a ring loop (its write would be no step of a loop's protocol), a tile not read by
    products, an f32 tile (wgmma reads 16-bit operands here)."""
    from tkjit.codegen.hopper.lower_checks import users_of
    from tkjit.codegen.hopper.lower_shared_store import tile_write_refusal
    from tkjit.ir.types import F32
    k = tkjit.compile(WRITE, lowering="general", cache=False)
    copy = next(op for op in k.ir.walk() if is_tile_write(op))
    users = users_of(k.ir)
    assert tile_write_refusal(copy, True, users) is None
    assert "only inside a loop that streams operands" in tile_write_refusal(copy, False, users).text()
    assert "may only be read by matrix products" in tile_write_refusal(copy, True, {}).text()
    copy.results[0].type = dataclasses.replace(copy.result.type, dtype=F32)
    why = tile_write_refusal(copy, True, users).text()
    assert why.startswith("'copy' at <string>:9:7: a f32 shared tile written from registers")


def test_ping_pong_consumers_are_refused_at_the_copy():
    """Consumers on alternate tiles cannot meet around a tile they write (the mbarrier pass then
    builds no TileWrite step; the lowering refuses the kernel at the copy)."""
    from tkjit.codegen.hopper.lower import refusal
    k = tkjit.compile(WRITE, lowering="general", cache=False)
    k.ir.attrs["pingpong"] = True
    why = refusal(k.ir)
    assert why is not None and why.text().startswith("'copy' at <string>:9:7: ping-pong consumers")


def test_an_accumulator_read_before_its_product_is_updated_in_place_only_if_nothing_later_reads_it():
    """wgmma updates its accumulator in place: a read of it before the product is fine when what
    that read made is used before the product too (or is a shared tile written from it, as
    ``s`` above); a value made from it and read after the product may share its registers."""
    from tkjit.codegen.hopper.lower import refusal
    after = WRITE.replace("acc = mma_AB(a, s, mma_AB(a, b, acc))",
                          "x = acc * 2.0\n      acc = mma_AB(a, s, mma_AB(a, b, acc)) + x")
    why = refusal(tkjit.compile(after, lowering="general", cache=False).ir)
    assert why is not None and "11:26: the accumulator %acc is read after the product" in why.text()
    assert refusal(tkjit.compile(WRITE, lowering="general", cache=False).ir) is None


TWO_CONSUMERS = """
@consumers(2)
kernel two(A: gl<bf16>[N, 128], B: gl<bf16>[N, 128], O: gl<f32>[128, 128]) {
  for i in blocks(1) {
    acc: rt<f32>[128, 128] = zeros()
    for c in 0 .. N / 128 {
      a: st<bf16>[128, 128] = A.tile(c, 0)
      b: st<bf16>[128, 128] = B.tile(c, 0)
      s: st<bf16>[128, 128] = cvt<bf16>(acc)
      acc = mma_AB(a, s, mma_AB(a, b, acc))
    }
    O.tile(0, 0) = acc
  }
}
"""


def written_recurrence(a, b, rows):
    """acc <- A_c bf16(acc) + (A_c B_c + acc) over chunks of ``rows`` rows, in float64; a ragged
    last chunk is zero-padded to ``rows`` rows, as the kernel's tile loads read it."""
    acc = torch.zeros(a.shape[1], b.shape[1], dtype=torch.float64)
    for c0 in range(0, a.shape[0], rows):
        ac, bc = (torch.zeros(rows, t.shape[1], dtype=torch.float64) for t in (a, b))
        ac[:a.shape[0] - c0] = a[c0:c0 + rows].double()
        bc[:b.shape[0] - c0] = b[c0:c0 + rows].double()
        acc = ac @ acc.to(torch.bfloat16).double() + (ac @ bc + acc)
    return acc


def test_two_consumers_write_their_rows_and_meet_over_both_warpgroups():
    """Each consumer writes its 64 rows of the 128 x 128 tile; every consumer's wgmma reads all of
    it as B, so the meetings span both warpgroups (bar.sync 1, 256). The interpreter matches the
    float64 recurrence, the CPU schedule matches the interpreter bit for bit."""
    k = tkjit.compile(TWO_CONSUMERS, lowering="general", require_hopper=True, cache=False)
    ptx = k.asm["ptx"]
    assert sync_outside_the_protocol(ptx, k.async_ir) == []
    assert [line.strip() for line in ptx.splitlines() if line.strip().startswith("bar.sync 1,")] == \
        ["bar.sync 1, 256;"] * 2
    torch.manual_seed(3)
    a, b = ((torch.randn(384, 128) * 0.08).bfloat16() for _ in range(2))
    o = torch.full((128, 128), float("nan"))
    k(a, b, o)
    ref = written_recurrence(a, b, 128)
    assert ((o.double() - ref).norm() / ref.norm()).item() < 1e-3
    for seed in (0, 1):
        mine = torch.full((128, 128), float("nan"))
        run_roles(k.ir, [a, b, mine], seed=seed)
        assert torch.equal(mine, o)


@needs_cuda_tools
def test_two_consumers_sass_has_hgmma_and_tma_loads_and_no_spills():
    k = tkjit.compile(TWO_CONSUMERS, lowering="general", require_hopper=True, cache=False)
    sass = k.asm["sass"]
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"]
