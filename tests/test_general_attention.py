"""examples/attention.tk (with its L output) through the general lowering, on the CPU: the
schedule options the passes and the lowering choose for it, and why (issue 18). Each test
compiles the example as the GPU benchmark does (benchmarks/attention_general.py) and reads the
decision log, the PTX or the SASS; the GPU figures are in docs/hopper-codegen.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.passes import DEFAULT_PIPELINE
from tkjit.passes.hopper import wgmma_n

from test_general_lowering import sync_outside_the_protocol

SOURCE = (Path(__file__).resolve().parents[1] / "examples" / "attention.tk").read_text()
SHAPES = [(128, False), (128, True), (64, False), (64, True)]


def general(d: int, causal: bool, **extra):
    return tkjit.compile(SOURCE, filename="attention.tk", constants={"D": d, "CAUSAL": causal},
                         lowering="general", require_hopper=True, cache=False, **extra)


def test_the_widest_wgmma_that_divides_the_columns():
    assert wgmma_n(176) == 176          # one m64n176k16, not eleven m64n16k16
    assert wgmma_n(128, 64) == 128
    assert wgmma_n(384) == 192
    assert wgmma_n(320, 64) == 64       # an MN-major B is read in whole 64-column atoms
    assert wgmma_n(320) == 160
    assert wgmma_n(12) is None


def test_176_key_blocks_are_one_wgmma_wide():
    ptx = general(128, False).asm["ptx"]
    assert "m64n176k16" in ptx and "m64n16k16" not in ptx


@pytest.mark.parametrize("d,causal", SHAPES)
def test_padding_masks_only_on_edge_tiles(d, causal):
    """The row reductions of the scores (whose key columns past N are padding) branch on the
    block's valid count: unmasked on every block inside N, masked only at the edge."""
    k = general(d, causal)
    ptx = k.asm["ptx"]
    assert len(re.findall(r"^\$L_edge_\d+:", ptx, re.M)) >= 2  # row_max and row_sum, in the loop
    text = k.explain()
    assert "padding masks: edge tiles only" in text and "row_max at attention.tk" in text


def test_level_2_at_d64_takes_the_producers_registers():
    """D = 64, three consumers: S (64) + the in-flight P (32) + O (32) + 32 = 160 registers do
    not fit beside a producer of 40 (152), so reg-budget keeps the producer at 24."""
    text = general(64, False).explain()
    assert "level 2: the second product runs one trip behind" in text
    assert "setmaxnreg: producer 24, consumers 160" in text
    assert "level 2 of the loop at attention.tk" in text


ONE_RING = "canonicalize,layout,warp-spec,pipeline,smem-plan,mbarrier{split=off},reg-budget,grid"
ONE_TILE = DEFAULT_PIPELINE.replace("grid,", "grid{overlap=-1},")
"""One CTA per tile (the default before session 13's cross-tile overlap of Q): the ring is
free after the loop, so the epilogue's staging goes over it and the ring keeps its stages."""


def test_level_2_over_one_ring_needs_three_stages():
    """D = 128 with 176-key blocks has a 2-stage ring: level 2 over one ring would hold each
    stage half a trip longer than the producer can wait (measured 0.51-0.58x of the template
    against 0.69-0.75x without), so with split rings off the loop keeps level 1 (and by default
    V gets a ring of its own: test_split_rings_...)."""
    text = general(128, False, pipeline=ONE_RING).explain()
    assert "2 stage(s)" in text and "level 2" not in text
    assert "setmaxnreg: producer 40, consumers 232" in text
    causal = general(128, True, pipeline=ONE_TILE).explain()  # 128-key blocks: 3 stages, level 2, one ring
    assert "3 stage(s)" in causal and "level 2: the second product runs one trip behind" in causal
    assert "a ring of its own" not in causal


@pytest.mark.parametrize("d,causal", SHAPES)
def test_the_example_with_l_has_no_spills_and_a_checked_protocol(d, causal):
    k = general(d, causal)
    try:
        sass = k.asm["sass"]
    except tkjit.errors.NotAvailableError as e:
        pytest.skip(str(e))
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"]
    stray = sync_outside_the_protocol(k.asm["ptx"], k.async_ir)
    assert stray == []


def _heavy_order(lin, counts, axis, chunk):
    """A model of emit_control.heavy_indices: (indices) of linear tile ``lin``."""
    others = [d for d in range(len(counts)) if d != axis]
    heads = 1
    for d in others:
        heads *= counts[d]
    chunk = min(max(chunk, 1), heads)
    per = chunk * counts[axis]
    first = lin // per * chunk
    height = min(heads - first, chunk)
    ii, head = lin % per // height, first + lin % per % height
    idx = [None] * len(counts)
    idx[axis] = counts[axis] - 1 - ii
    for k, d in enumerate(reversed(others)):
        if k == len(others) - 1:
            idx[d] = head
            break
        idx[d], head = head % counts[d], head // counts[d]
    return tuple(idx)


@pytest.mark.parametrize("counts", [(1, 16, 128), (4, 16, 32), (3, 5, 7), (2, 3, 1), (7,), (5, 3)])
def test_heaviest_first_visits_every_tile_once(counts):
    import itertools
    tiles = list(itertools.product(*[range(c) for c in counts]))
    for axis in range(len(counts)):
        for chunk in (0, 1, 2, 3, 16, 10 ** 6):
            order = [_heavy_order(t, counts, axis, chunk) for t in range(len(tiles))]
            assert sorted(order) == tiles
            assert order[0][axis] == counts[axis] - 1  # the heaviest first


def test_causal_tiles_run_heaviest_first_and_others_in_order():
    causal, plain = general(128, True), general(128, False)
    assert "tile order: heaviest first along %i" in causal.explain()
    assert "heaviest" not in plain.explain()
    window = tkjit.load(Path(__file__).resolve().parents[1] / "examples" / "attention_window.tk",
                        cache=False)  # its loop starts later as it ends later: equal trips
    assert "heaviest" not in window.explain()
    off = general(128, True, pipeline="canonicalize,layout,warp-spec,pipeline,smem-plan,mbarrier,"
                                      "reg-budget,grid{heavy=-1}")
    from tkjit.passes.hopper import block_loop
    assert "heaviest" not in off.explain() and "heavy" not in block_loop(off.ir).attrs
    assert block_loop(causal.ir).attrs["heavy"] == 2


@pytest.mark.parametrize("budget", [1, 4, 5, 1 << 30])
def test_the_heaviest_first_ptx_covers_every_tile(budget, monkeypatch):
    """The emitted index arithmetic on the PTX simulator (register-tile backend, the block loop
    given the grid pass's attribute by hand; no ring loop, so each head counts 1 byte and the
    budget caps the chunk: one head, chunks of 3 and 3 (cap 4), 3 and 3 (cap 5), all):
    every tile written once, in place."""
    import torch
    monkeypatch.setattr("tkjit.passes.hopper.L2_BUDGET", budget)
    from simkit import lower, simulate
    src = """
kernel copy(X: gl<f32>[B, H, N, 16], Y: gl<f32>[B, H, N, 16]) {
  for (b, h, i) in blocks(B, H, N / 16) {
    x: rt<f32>[16, 16] = X.tile(b, h, i, 0)
    Y.tile(b, h, i, 0) = x + 1.0
  }
}
"""
    k = lower(src)
    blocks = next(op for op in k.body.ops if op.NAME == "blocks")
    blocks.attrs["heavy"] = 2
    x = torch.randn(2, 3, 80, 16)
    (y,) = simulate(k, [x, torch.empty_like(x)], [1], max_ctas=64)
    assert torch.equal(y, x + 1.0)


SPLIT = ONE_TILE  # the default pipeline (mbarrier{split=auto}), one CTA per tile as ONE_RING


def test_split_rings_give_level_2_its_refill_distance_at_two_stages():
    """mbarrier (split=auto): at D = 128 with 176-key blocks (2 stages) K and V get rings of
    their own, so level 2 applies: K's stage is released once S retires, V's a trip later."""
    from tkjit.passes.mbarrier import schedule_of
    k = general(128, False, pipeline=SPLIT)
    text = k.explain()
    assert "ring j_v: a ring of its own for the second product's tiles" in text
    assert "level 2: the second product runs one trip behind" in text
    assert "setmaxnreg: producer 40, consumers 232" in text
    proto = schedule_of(k.ir).protocol.text()
    assert "tma_load k -> j.s" in proto and "tma_load v -> j_v.s" in proto
    assert "release: arrive empty[j.s]" in proto and "release: arrive empty[j_v.prev]" in proto
    one = general(128, False, pipeline=ONE_RING)
    k.asm["ptx"], one.asm["ptx"]  # (the metadata comes with the PTX)
    assert k.ir.attrs["split_bars"] == one.ir.attrs["smem"]  # j_v's barriers after smem-plan's map
    assert k.metadata["smem_bytes"] == one.metadata["smem_bytes"] + 32  # 2 stages x (full, empty)
    for d, causal in ((128, True), (64, False)):  # 3 and 6 stages: one ring, as without the option
        assert "a ring of its own" not in general(d, causal, pipeline=SPLIT).explain()


def test_overlap_off_keeps_one_ring_at_two_stages():
    """mbarrier{overlap=off}: no level 2, so no ring of its own for the second product's tiles
    (a split ring without level 2 left V's ring never waited for: the checker caught it as an
    early read and the compile failed)."""
    from tkjit.passes import DEFAULT_PIPELINE
    k = general(128, False, pipeline=DEFAULT_PIPELINE.replace("mbarrier", "mbarrier{overlap=off}"))
    text = k.explain()
    assert "2 stage(s)" in text and "a ring of its own" not in text and "level 2" not in text
    assert "sync protocol checked" in text


def _split_protocol():
    from tkjit.passes.mbarrier import schedule_of
    return schedule_of(general(128, False, pipeline=SPLIT).ir).protocol


def _replace_loop_body(proto, edit):
    """``proto`` with its consumer's key loop body passed through ``edit``."""
    import dataclasses
    from tkjit.passes import sync_protocol as sp

    def walk(steps):
        out = []
        for st in steps:
            if isinstance(st, sp.Loop) and st.ring == "j":
                st = dataclasses.replace(st, body=tuple(edit(st.body)))
            elif hasattr(st, "body"):
                st = dataclasses.replace(st, body=tuple(walk(st.body)))
            out.append(st)
        return out
    return dataclasses.replace(proto, consumer=tuple(walk(proto.consumer)))


def test_the_split_protocol_is_checked_and_its_broken_forms_caught():
    from tkjit.passes import sync_protocol as sp
    from tkjit.passes.sync_check import SyncError, check_protocol
    proto = _split_protocol()
    assert "no violation" in check_protocol(proto).text()
    no_v_wait = _replace_loop_body(proto, lambda body: [s for s in body if s != sp.Wait("j_v", "full")])
    early_k = _replace_loop_body(proto, lambda body: [sp.Release("j") if s == sp.Release("j") else s
                                                      for s in body if not isinstance(s, sp.First)
                                                      and s != sp.NotFirst((sp.MmaWait(1),))])
    for broken in (no_v_wait, early_k):
        with pytest.raises(SyncError):
            check_protocol(broken)


def test_the_split_schedule_matches_the_interpreter_on_the_cpu():
    import torch
    from tkjit.interpreter.roles import run_roles
    k = general(128, False, pipeline=SPLIT)
    torch.manual_seed(0)
    b, h, n, d = 1, 2, 300, 128
    q, kk, v = (torch.randn(b, h, n, d).bfloat16() for _ in range(3))
    args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")),
            d ** -0.5]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    for seed in (0, 1):
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_roles(k.ir, mine, seed=seed)
        assert torch.equal(mine[3].float().nan_to_num(7.0), ref[3].float().nan_to_num(7.0))
        assert torch.equal(mine[4].nan_to_num(7.0), ref[4].nan_to_num(7.0))


def test_the_split_kernel_has_no_spills_and_only_protocol_syncs():
    k = general(128, False, pipeline=SPLIT)
    try:
        sass = k.asm["sass"]
    except tkjit.errors.NotAvailableError as e:
        pytest.skip(str(e))
    assert sass.count("HGMMA.64x176x16") == 2 * 8 and not re.search(r"\b(LDL|STL)\b", sass)
    assert sync_outside_the_protocol(k.asm["ptx"], k.async_ir) == []


def even_heavy_order(heads: int, n: int, cap: int) -> list[tuple[int, int]]:
    """(head, heavy index) of each linear tile under the heaviest-first order: the heads in
    m = cdiv(heads, min(cap, heads)) chunks as even as can be (the first heads mod m of one head
    more), inside a chunk the heavy index descending, the heads fastest."""
    cap = max(1, min(cap, heads))
    m = -(-heads // cap)
    sizes = [heads // m + (c < heads % m) for c in range(m)]
    order, first = [], 0
    for size in sizes:
        order += [(first + h, n - 1 - ii) for ii in range(n) for h in range(size)]
        first += size
    return order


@pytest.mark.parametrize("heads,n,cap", [(16, 3, 5), (16, 2, 6), (6, 5, 4), (7, 2, 3), (5, 3, 1),
                                         (4, 4, 100), (3, 1, 2)])
def test_the_heaviest_first_chunks_are_even(heads, n, cap, monkeypatch):
    """emit_control.heavy_indices on the PTX simulator, one thread per tile storing the (head,
    heavy index) it computed: the chunks are as even as the cap allows (16 heads under a cap of
    5: 4/4/4/4, not 5/5/5/1, whose last head's longest tile would start near the end)."""
    import numpy as np
    from types import SimpleNamespace

    from ptxsim import Memory, launch
    from tkjit.codegen.emit_control import heavy_indices
    from tkjit.ir.core import Block
    monkeypatch.setattr("tkjit.passes.hopper.L2_BUDGET", cap)  # no ring loop: a head counts 1 B
    regs = {"b32": [], "pred": []}

    def new(kind):
        regs[kind].append(f"%{'r' if kind == 'b32' else 'p'}{len(regs[kind])}")
        return regs[kind][-1]
    op = SimpleNamespace(attrs={"heavy": 1}, regions=[Block()], walk=lambda: iter(()))
    lin, heads_r, n_r = new("b32"), new("b32"), new("b32")
    body = [f"mov.u32 {lin}, %ctaid.x;", f"mov.u32 {heads_r}, {heads};", f"mov.u32 {n_r}, {n};"]
    idx = heavy_indices(SimpleNamespace(new=new), op, lin, [heads_r, n_r], body)
    out, off = "%rd0", "%rd1"
    body += ["ld.param.u64 %rd0, [out];", "cvta.to.global.u64 %rd0, %rd0;",
             f"mul.wide.u32 {off}, {lin}, 8;", f"add.s64 {out}, {out}, {off};",
             f"st.global.b32 [{out}], {idx[0]};", f"st.global.b32 [{out}+4], {idx[1]};", "ret;"]
    ptx = "\n".join([".version 8.0", ".target sm_90a", ".address_size 64",
                     ".visible .entry order(.param .u64 out)", "{",
                     f"  .reg .b32 %r<{len(regs['b32'])}>;", f"  .reg .pred %p<{max(1, len(regs['pred']))}>;",
                     "  .reg .b64 %rd<2>;"] + ["  " + x for x in body] + ["}"])
    mem = Memory(1 << 16)
    buf = np.full(2 * heads * n, -1, dtype=np.int32)
    addr = mem.alloc(buf)
    launch(ptx, {"dims": [], "grid": [heads * n], "block": [1, 1, 1], "smem_bytes": 0}, [addr], {},
           mem=mem, max_ctas=heads * n)
    got = mem.read_back(addr, buf).reshape(-1, 2)
    assert [tuple(int(x) for x in r) for r in got] == even_heavy_order(heads, n, cap)
