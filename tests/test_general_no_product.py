"""Kernels with no matrix product (norms, softmax, rotary) through the general sm_90a lowering,
on the CPU: ``lowering='general'`` takes them -- pinned to warp-spec{fill=tma}, a TMA producer for
the row block stream-cols keeps in shared memory and copy_cols of its swizzled panels
(lower_copy_cols.py; fill=auto's consumer cp.async fill: test_general_copy_fill.py), consumers only where
warp-spec gave no producer, the register-tile backend's warp grid for their consumers
(lower_layout.py) -- with ptxas clean, no spills, the decisions logged; the consumer-only rotary
agrees with the interpreter on the PTX simulator at ragged shapes, and the TMA-fed norms and
softmax run there too (its TMA loads, mbarriers and roles) bit for bit as the register-tile
backend's PTX of the same IR; ``lowering='auto'`` keeps the TMA-fed ones on the register-tile
backend and takes the general lowering for the consumers-only rotary (measured); every barrier is a protocol step (the
consumers' scratch barriers: ``ScratchSync``)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.errors import NotAvailableError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NORMS = ["rmsnorm", "softmax", "layernorm", "residual_layernorm"]


def _one_cta_pipeline():
    from tkjit.passes import DEFAULT_PIPELINE
    return DEFAULT_PIPELINE.replace("stream-cols", "stream-cols{cluster=none}", 1)


ONE_CTA = _one_cta_pipeline()
"""Wide rows on one CTA each (stream-cols' cluster split, the default at D = 4096: test_general_cluster.py)."""


def _tma_pipeline():
    from tkjit.passes import DEFAULT_PIPELINE
    return DEFAULT_PIPELINE.replace("warp-spec", "warp-spec{fill=tma}", 1)


TMA = _tma_pipeline()
"""The row block filled by the producer's TMA (warp-spec{fill=tma}); fill=auto lets the consumers
fill it with cp.async (tests/test_general_copy_fill.py)."""


REGISTER_TILE = "canonicalize,stream-cols,mask-branch,scale-fold"
"""The passes before the first target-specific one: the register-tile backend's IR (its PTX is what
auto gave the norms before the consumers' fill took D = 1024 to the general lowering)."""


def _tma(name, **extra):
    return _general(name, pipeline=TMA, **extra)


def test_what_is_not_lowered_yet_is_refused_at_its_op():
    """Wide rows on one CTA: the streamed chunks through a ring with no product are refused with
    the op and why (the cluster split is lowered: test_general_cluster.py)."""
    with pytest.raises(NotAvailableError, match="ring loop with no matrix product"):
        _general("rmsnorm", constants={"D": 4096}, pipeline=ONE_CTA).asm["ptx"]


def _general(name, **extra):
    return tkjit.load(EXAMPLES / f"{name}.tk", lowering="general", require_hopper=True, cache=False, **extra)


def _sass(k):
    try:
        return k.asm["sass"]
    except NotAvailableError as e:
        if any(tool in str(e) for tool in ("ptxas", "disassembler", "cuobjdump", "nvdisasm")):
            pytest.skip(str(e))
        raise


@pytest.mark.parametrize("name", NORMS + ["rotary"])
@pytest.mark.parametrize("d", [None, 2048])
def test_no_product_kernels_take_the_general_lowering(name, d):
    if d is not None and name in ("rotary", "residual_layernorm"):
        pytest.skip("rotary has one width; residual + LayerNorm at 2048 takes stream-cols' cluster split, "
                    "filled by the producer's TMA (test_general_cluster.py)")
    constants = None if d is None else {"C" if name == "softmax" else "D": d}
    k = _general(name, constants=constants)
    sass = _sass(k)
    md = k.metadata
    assert md["lowering"] == "general" and "tile program" in k.asm["ptx"].splitlines()[0]
    assert not re.search(r"\b[HQ]GMMA", sass)  # nothing to multiply
    assert "UTMALDG" not in sass  # the row block by the consumers' cp.async (LDGSTS); rotary: none
    assert ("LDGSTS" in sass) == (name != "rotary")
    if name != "rotary":  # pinned to the producer's TMA: the same kernel with a TMA load
        assert "UTMALDG" in _sass(_tma(name, constants=constants))
    assert not re.search(r"\b(LDL|STL)\b", sass), "the general lowering spilled"
    report = md["ptxas"]
    assert not [m for m in report["messages"] if m["level"] == "warning"], report["log"]
    assert all(f["spill_store_bytes"] == 0 for f in report["functions"])
    text = str(k.explain())
    assert "consumer layout" in text and "schedule dropped" not in text


def test_the_row_block_chunks_are_16_byte_reads_of_the_tma_panels():
    """copy_cols of the TMA-loaded row block: one ld.shared.v4 per row and 32-column group, at the
    swizzled unit (XOR with the row's key), the panel from the unit's high bits."""
    ptx = _tma("rmsnorm").asm["ptx"]
    assert ptx.count("ld.shared.v4.b32") == 8  # 2 passes x 2 groups of 32 of a warp's 64 columns x 2 rows
    assert "cp.async.bulk.tensor" in ptx
    text = str(_tma("rmsnorm").explain())
    assert "consumer layout: 1x4 warps, contiguous columns" in text
    assert "consumer scratch" in text


def test_auto_takes_the_consumer_filled_row_blocks_at_every_width():
    """Under auto, the norms and softmax (a row block kept in shared memory, which warp-spec lets the
    consumers fill with cp.async) take the general lowering -- the very PTX of lowering=general --
    at D = 1024 and at wider rows (since session 18: 0.98-1.05x the register-tile backend,
    lower_layout.FILL_MEASURED); pinned to the producer's TMA fill they keep the register-tile
    backend, with the measured reason."""
    for name in NORMS:
        k = tkjit.load(EXAMPLES / f"{name}.tk", cache=False)
        assert k.metadata["lowering"] == "general"
        assert k.asm["ptx"] == _general(name).asm["ptx"]
    for name in ("rmsnorm", "layernorm", "softmax"):
        constants = {"C" if name == "softmax" else "D": 2048}
        k = tkjit.load(EXAMPLES / f"{name}.tk", cache=False, constants=constants)
        assert k.metadata["lowering"] == "general" and k.asm["ptx"] == _general(name, constants=constants).asm["ptx"]
        assert "lowering=auto takes it at every row width" in str(k.explain())
    k = tkjit.load(EXAMPLES / "rmsnorm.tk", cache=False, pipeline=TMA)
    assert "register-tile" in k.asm["ptx"].splitlines()[0]
    assert "0.88-0.98x on the norm and softmax rows" in str(k.explain())


def test_auto_takes_the_general_lowering_for_consumers_only_in_the_contiguous_order():
    """Rotary (no shared tile, so no producer) under auto: the general lowering, its consumers'
    tiles in the contiguous column order (16-byte loads and stores, no staging), as measured
    faster than the register-tile backend; warp-spec and smem-plan say why."""
    k = tkjit.load(EXAMPLES / "rotary.tk", cache=False)
    ptx = k.asm["ptx"]
    assert k.metadata["lowering"] == "general" and "tile program" in ptx.splitlines()[0]
    assert ptx.count("ld.global.v4.b32") == 16 and ptx.count("st.global.v4.b32") == 8
    assert "ld.global.b16" not in ptx and "stmatrix" not in ptx and "cp.async.bulk" not in ptx
    text = str(k.explain())
    assert "consumer layout: 4x1 warps, contiguous columns" in text
    assert "the consumers' register tiles take the contiguous column order" in text
    assert re.search(r"store at \S*rotary.tk:13:5: from registers: no staging tile\n\s+because no "
                     r"matrix product, and its consumers hold it in the contiguous column order", text)
    assert "0 B of dynamic shared memory" in text


def test_auto_keeps_consumers_only_in_the_fragment_order_on_the_register_tile_backend():
    """The same kernel with a position-dependent op (causal_mask: the fragment order) is refused
    under auto with the measured reason; lowering=general still takes it."""
    src = (EXAMPLES / "rotary.tk").read_text().replace(
        "Y.tile(b, h, i, 0) = x1 * cos - x2 * sin",
        "Y.tile(b, h, i, 0) = causal_mask(x1 * cos - x2 * sin, i * BN, 0)")
    assert "causal_mask" in src
    k = tkjit.compile(src, cache=False)
    assert "register-tile" in k.asm["ptx"].splitlines()[0]
    assert "in the mma fragment's column order" in str(k.explain())
    g = tkjit.compile(src, cache=False, lowering="general")
    assert g.metadata["lowering"] == "general" and "consumer layout: 4x1 warps, fragment columns" in str(g.explain())


def test_smem_plan_gives_a_norm_no_staging_its_store_cannot_use():
    """RMSNorm's output tile is held in the contiguous column order (and its 16 rows are no 64-row
    slab either): smem-plan plans no staging, so its shared memory is the row block, the scratch and
    the barriers (34,176 B: 6 CTAs an SM, not 5 with the 8 KB staging it never used); filled by the
    consumers, no barriers and no 1 KB for rounding the base up to 1,024 (no swizzled tile:
    lower.smem_slack): 33,024 B, the register-tile backend's own."""
    assert _general("rmsnorm").metadata["smem_bytes"] == 33024 == tkjit.load(
        EXAMPLES / "rmsnorm.tk", cache=False, pipeline="canonicalize,stream-cols,mask-branch,scale-fold").metadata["smem_bytes"]
    k = _tma("rmsnorm")
    assert k.metadata["smem_bytes"] == 34176
    text = str(k.explain())
    assert "staging tile of store" not in text
    assert re.search(r"from registers: no staging tile\n\s+because no matrix product, and its consumers hold it "
                     r"in the contiguous column order .*: the bytes would only cost CTAs an SM", text)


SCALE = """
kernel scale2<BM = 128, BN = 64>(X: gl<bf16>[M, N], Y: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) {
    r: rt<f32>[BM, BN] = X.tile(m, n)
    Y.tile(m, n) = cvt<bf16>(r * 2.0)
  }
}
"""


@pytest.mark.parametrize("bm, staged", [(128, False), (64, True)])
def test_a_tile_whose_warps_hold_runs_of_bands_is_not_staged(bm, staged):
    """No product: the register-tile grid (4x1 warps) gives warp w rows 32w .. 32w + 31 of a
    128-row tile, while the staging's stmatrix writes a wgmma accumulator's slabs (band u of warp w
    at row 64u + 16w): smem-plan stages none, and the PTX simulator's output is the input doubled
    (staged, rows 16 .. 31 came from rows 32 .. 47). A 64-row tile, one band a warp, is the slab
    layout and keeps its staging."""
    from simkit import simulate
    k = tkjit.compile(SCALE, constants={"BM": bm}, lowering="general", require_hopper=True, cache=False)
    text = str(k.explain())
    assert ("staged: stmatrix + TMA store" in text) == staged
    if not staged:
        assert "warps hold 2 band(s) of 16 rows each in a run, not a warpgroup's 64-row slabs" in text
    torch.manual_seed(0)
    x = torch.randn(2 * bm + 56, 128).bfloat16()
    (y,) = simulate(k._result.tkir, [x, torch.empty_like(x)], [1], ptx_meta=(k.asm["ptx"], dict(k.metadata)))
    assert torch.equal(y.float(), x.float() * 2)


from tkjit.passes import DEFAULT_PIPELINE  # noqa: E402

ESTIMATE = TMA.replace("reg-budget", "reg-budget{bound=estimate}", 1)
"""The producer's TMA fill with the estimate's .maxnreg bound (reg-budget's bound before session 18)."""


def test_reg_budget_lowers_maxnreg_to_the_ctas_shared_memory_holds():
    """reg-budget{bound=estimate}: LayerNorm D = 1024: shared memory holds 6 CTAs an SM, the
    estimate's .maxnreg 104 only 3; 96 holds 4 and still leaves 16 beside the 66 live fragment
    registers (80 would not: 5 CTAs, ptxas spilled there). RMSNorm D = 2048: shared memory holds 3,
    which 88 already does."""
    k = _general("layernorm", pipeline=ESTIMATE)
    assert ".maxnreg 96" in k.asm["ptx"] and ".minnctapersm 1" in k.asm["ptx"]
    assert "lowered to 96 so that registers hold 4 CTAs an SM (shared memory holds 6" in str(k.explain())
    k = _general("rmsnorm", pipeline=ESTIMATE, constants={"D": 2048})
    assert ".maxnreg 88" in k.asm["ptx"] and "lowered to" not in str(k.explain())


@pytest.mark.parametrize("name, d", [("layernorm", 1024), ("rmsnorm", 4096), ("softmax", 4096), ("layernorm", 4096)])
def test_a_kernel_with_no_setmaxnreg_leaves_its_registers_to_ptxas(name, d):
    """bound=auto: no .maxnreg and no .minnctapersm for a kernel with no setmaxnreg (the consumers'
    cp.async fill or a producer warp), said in explain(); the registers ptxas then takes leave room for as many CTAs an SM or more (under .maxnreg with
    .minnctapersm 1 it took more: 48 against 40 for RMSNorm D = 4096, one CTA an SM fewer), and it
    spills nothing, or at most the occupancy build's few bytes (LayerNorm D = 4096: 4 B at 48
    registers for 5 CTAs an SM)."""
    constants = None if d == 1024 else {"C" if name == "softmax" else "D": d}
    for pipeline in (None, TMA):
        free = _general(name, pipeline=pipeline, constants=constants)
        bound = _general(name, pipeline=(pipeline or DEFAULT_PIPELINE).replace("reg-budget", "reg-budget{bound=estimate}", 1),
                         constants=constants)
        assert 'registers = "ptxas"' in free.asm["after:reg-budget"] and ".maxnreg" in bound.asm["ptx"]
        assert ".minnctapersm" not in free.asm["ptx"] and "no .maxnreg: ptxas chooses" in str(free.explain())
        if ".maxnreg" in free.asm["ptx"]:  # ptxas's own count held fewer CTAs an SM: the occupancy build
            (cap,) = re.findall(r"\.maxnreg (\d+)", free.asm["ptx"])
            assert f".maxnreg {cap}: ptxas's own" in str(free.explain())
        for k in (free, bound):
            k.binary  # noqa: B018 - assembled: ptxas's report
        fns = [k.metadata["ptxas"]["functions"][0] for k in (free, bound)]
        threads = free.metadata["block"][0]
        ctas = [65536 // (-(-fn["registers"] // 8) * 8 * threads) for fn in fns]  # an SM, by registers
        from tkjit.codegen.hopper.occupancy import SPILL_BYTES  # (the occupancy build's allowance)
        assert ctas[0] >= ctas[1] and fns[0]["spill_store_bytes"] <= SPILL_BYTES, (ctas, fns)


def test_reg_budget_maxnreg_pin():
    from tkjit.passes import DEFAULT_PIPELINE
    k = _general("rmsnorm", pipeline=DEFAULT_PIPELINE.replace("reg-budget", "reg-budget{maxnreg=64}"))
    assert ".maxnreg 64" in k.asm["ptx"]
    assert "pinned by the pass option maxnreg" in str(k.explain())


def test_a_kernel_with_no_producer_runs_its_consumers_alone():
    ptx = _general("rotary").asm["ptx"]
    assert "setmaxnreg" not in ptx and "mbarrier.init" not in ptx
    assert "sub.u32" in ptx  # (its consumer index is the warpgroup itself)
    text = str(_general("rotary").explain())
    assert "without a producer" in text


def test_every_barrier_is_a_protocol_step_the_scratch_ones_included():
    """The protocol lint (test_general_lowering.py), with its steps from the async-schedule IR: the
    consumers' named barrier around the scratch of a row reduction across warp columns is the
    ``ScratchSync`` step the mbarrier pass puts before the tile op holding the reduction
    (``scratch_sync {ops}`` in the IR), each of its ``bar.sync 1`` inside that step's mark.
    Rotary has none."""
    from test_general_lowering import protocol_lint
    assert protocol_lint(_general("rotary")) == []
    for name in NORMS:
        k = _general(name)
        assert protocol_lint(k) == [], name
        ptx = k.asm["ptx"]
        assert re.search(r"// step: bar\.sync: all consumer warpgroups meet around the shared scratch of "
                         r"row_(sum|max)\n\s*bar\.sync 1, 128;\n\s*// end step", ptx), name
        assert "scratch_sync {ops = " in k.asm["after:async-schedule"]


def test_the_scratch_step_is_read_from_the_ir_and_checked_as_a_meeting():
    """Delete the ``scratch_sync`` from the IR: the lowering then prints the scratch barriers outside
    any step and the lint names them. The checker takes the step as a meeting of the consumers on
    their named barrier (an arrival and a wait in each consumer's unrolled program)."""
    from test_general_lowering import protocol_lint
    from tkjit.codegen.hopper.lower import lower_kernel
    from tkjit.passes.async_schedule import protocol_from_ir
    from tkjit.passes.sync_unroll import unroll
    k = _tma("rmsnorm")
    proto = protocol_from_ir(k.async_ir)
    (tiles,) = proto.consumer
    assert [type(st).__name__ for st in tiles.body][:2] == ["Wait", "ScratchSync"]
    from tkjit.passes.sync_unroll import ARRIVE, WAIT, Layout
    layout = Layout.of(proto)
    actions = unroll(proto, proto.consumer, (0,) * 3 if proto.persistent else (0,), layout)
    meets = [(a.op, a.label) for a in actions if a.arg == layout.sync_bar]
    tiles_run = 3 if proto.persistent else 1
    assert meets == [(ARRIVE, "bar.sync: arrive"), (WAIT, "bar.sync: wait for every consumer")] * tiles_run
    (op,) = [op for op in k.async_ir.walk() if op.NAME == "scratch_sync"]
    op.parent.ops.remove(op)
    ptx = lower_kernel(k.ir, {}, k.async_ir)[0]
    assert "bar.sync 1, 128;" in ptx and "shared scratch" not in ptx
    k._result.asm["ptx"] = ptx
    stray = protocol_lint(k)
    assert stray and set(stray) == {"bar.sync 1, 128;"}


def _rotary_case(n):
    torch.manual_seed(n)
    x = torch.randn(1, 2, n, 128).bfloat16()
    cos, sin = torch.randn(n, 64).bfloat16(), torch.randn(n, 64).bfloat16()
    return [x, cos, sin, torch.zeros(1, 2, n, 128).bfloat16()]


@pytest.mark.parametrize("n", [100, 64, 9])
def test_the_consumer_only_kernel_agrees_with_the_interpreter_on_the_ptx_simulator(n):
    """Rotary as lowering=auto compiles it (the general lowering, consumers only, the contiguous
    column order: 16-byte loads and stores straight from registers, no TMA), at ragged N and N
    below one tile: the same bits as the interpreter, nothing written outside the output."""
    from simkit import simulate
    src = (EXAMPLES / "rotary.tk").read_text()
    k = tkjit.compile(src, require_hopper=True, cache=False)
    ptx, md = k.asm["ptx"], dict(k.metadata)
    assert md["lowering"] == "general" and "stmatrix" not in ptx
    args = _rotary_case(n)
    interp = tkjit.compile(src, cache=False)
    want = [a.clone() for a in args]
    interp(*want)
    (got,) = simulate(k._result.tkir, args, [3], ptx_meta=(ptx, md))
    assert torch.equal(got.view(torch.int16), want[3].view(torch.int16))


@pytest.mark.parametrize("n, d", [(100, 128), (9, 64)])
def test_the_row_sums_of_the_attention_backward_agree_on_the_ptx_simulator(n, d):
    """examples/attention_bwd_prep.tk (Di = row_sum(dO * O)) through the general lowering: consumers
    only, 16-byte loads, each warp's rows whole. On the simulator at ragged N: within f32 rounding
    of float64, as the register-tile backend's PTX of the same IR is (lowering=auto keeps it there,
    with the measured reason: a reduction with no producer)."""
    src = (EXAMPLES / "attention_bwd_prep.tk").read_text()
    auto = tkjit.compile(src, cache=False, lowering="general", require_hopper=True, constants={"D": d})
    rt = tkjit.compile(src, cache=False, constants={"D": d})
    assert auto.metadata["lowering"] == "general" and "ld.global.v4.b32" in auto.asm["ptx"]
    assert "register-tile" in rt.asm["ptx"].splitlines()[0]
    assert "attention_bwd_prep's row sums through the general lowering 0.95-0.96x" in str(rt.explain())
    torch.manual_seed(n)
    o, do = (torch.randn(1, 2, n, d).bfloat16() for _ in range(2))
    args = [o, do, torch.full((1, 2, n), float("nan"))]
    (mine,), (theirs,) = _simulated(auto, args, [2]), _simulated(rt, args, [2])
    assert not torch.isnan(mine).any()
    exact = (o.double() * do.double()).sum(-1)
    for got in (mine, theirs):  # (the column order sums each row's f32 partials in another order)
        torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-5)


def test_a_mutation_of_the_simulated_kernel_is_caught():
    """The simulator check can fail: the general lowering's PTX with one product's operands
    swapped (x2 * sin -> x2 * cos) disagrees with the interpreter."""
    from simkit import simulate
    from tkjit.passes import DEFAULT_PIPELINE
    src = (EXAMPLES / "rotary.tk").read_text()
    k = tkjit.compile(src.replace("x1 * cos - x2 * sin", "x1 * cos - x2 * cos"), lowering="general",
                      require_hopper=True, cache=False, pipeline=DEFAULT_PIPELINE.replace(",epilogue", ""))
    args = _rotary_case(100)
    want = [a.clone() for a in args]
    tkjit.compile(src, cache=False)(*want)
    (got,) = simulate(k._result.tkir, args, [3], ptx_meta=(k.asm["ptx"], dict(k.metadata)))
    assert not torch.equal(got.view(torch.int16), want[3].view(torch.int16))


def _norm_case(name, r, d):
    torch.manual_seed(r + d)
    x = (torch.randn(r, d) * 2 + 0.5).bfloat16()
    w, b, res = torch.randn(d).bfloat16(), torch.randn(d).bfloat16(), torch.randn(r, d).bfloat16()
    y, y2 = torch.zeros(r, d).bfloat16(), torch.zeros(r, d).bfloat16()
    if name == "rmsnorm":
        return [x, w, y, 1e-6], [2]
    if name == "softmax":
        return [x, y], [1]
    if name == "layernorm":
        return [x, w, b, y, 1e-5], [3]
    return [x, res, w, b, y, y2, 1e-5], [4, 5]


def _simulated(k, args, outs):
    from simkit import simulate
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    return simulate(k._result.tkir, args, outs, ptx_meta=(k.asm["ptx"], dict(k.metadata)))


def assert_simulated_agree(general, auto, args, outs):
    """``general``'s PTX on the simulator: bit for bit ``auto``'s (the register-tile backend's PTX of
    the same IR) and within a bf16 unit of the interpreter (``auto`` called on CPU tensors)."""
    mine, theirs = _simulated(general, args, outs), _simulated(auto, args, outs)
    want = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    auto(*want)  # the interpreter
    for got, ref, i in zip(mine, theirs, outs):
        assert torch.equal(got.view(torch.int16), ref.view(torch.int16))
        torch.testing.assert_close(got.float(), want[i].float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("name, r, d", [("rmsnorm", 20, 1024), ("softmax", 33, 1024), ("layernorm", 7, 1024),
                                        ("residual_layernorm", 20, 1024), ("rmsnorm", 17, 2048),
                                        ("softmax", 5, 2048)])
def test_the_tma_fed_kernels_agree_on_the_ptx_simulator(name, r, d):
    """The general lowering's PTX on the simulator -- the producer's TMA boxes swizzled into shared
    memory and complete_tx on the one-shot ring's mbarrier, the consumers' wait, copy_cols of the
    swizzled panels, the cross-warp reductions behind barrier 1 -- at row counts that are not
    multiples of the 16-row blocks: bit for bit the register-tile backend's PTX of the same IR
    (the same emitters, the same arithmetic), within a bf16 unit of the interpreter, nothing
    written outside the outputs."""
    constants = None if d == 1024 else {"C" if name == "softmax" else "D": d}
    src = (EXAMPLES / f"{name}.tk").read_text()
    general = tkjit.compile(src, lowering="general", require_hopper=True, cache=False, constants=constants,
                            pipeline=TMA)
    auto = tkjit.compile(src, cache=False, constants=constants, pipeline=REGISTER_TILE)
    assert "cp.async.bulk.tensor" in general.asm["ptx"] and "tile program" in general.asm["ptx"]
    assert "register-tile" in auto.asm["ptx"].splitlines()[0]
    args, outs = _norm_case(name, r, d)
    assert_simulated_agree(general, auto, args, outs)


def test_a_wrong_swizzle_key_is_caught_on_the_simulator(monkeypatch):
    """The simulator check can fail: copy_cols reading the panels with a wrong swizzle key."""
    from tkjit.codegen.hopper import lower_copy_cols
    real = lower_copy_cols.emit_copy_cols

    def broken(ctx, op):
        return [line.replace(", 7;", ", 3;") if line.startswith("and.b32") else line for line in real(ctx, op)]
    monkeypatch.setattr(lower_copy_cols, "emit_copy_cols", broken)
    src = (EXAMPLES / "rmsnorm.tk").read_text()
    general = tkjit.compile(src, lowering="general", require_hopper=True, cache=False, pipeline=TMA)
    args, outs = _norm_case("rmsnorm", 20, 1024)
    (got,) = _simulated(general, args, outs)
    (ref,) = _simulated(tkjit.compile(src, cache=False, pipeline=REGISTER_TILE), args, outs)
    assert not torch.equal(got.view(torch.int16), ref.view(torch.int16))


def test_no_product_takes_a_producer_warp_and_no_setmaxnreg():
    """warp-spec gives a kernel with no product a producer *warp* (no setmaxnreg, no wgmma: nothing
    needs a whole warpgroup), reg-budget no setmaxnreg and a .maxnreg of the consumers' estimated
    need: 160 threads at about 88 registers instead of 256 at 248 (one CTA an SM, measured at
    0.42-0.71x of the register-tile backend on an H200), here lowered to 80, which holds the 5 CTAs
    an SM 88 would not. The IR says so, and the PTX follows."""
    k = _general("rmsnorm", pipeline=ESTIMATE)
    ir = k.asm["after:reg-budget"]
    assert "producer_warp = true" in ir and "threads = 160" in ir and "regs =" not in ir
    text = str(k.explain())
    assert "1 producer warp + 1 consumer warpgroup = 160 threads" in text
    assert "no setmaxnreg; .maxnreg 80 for all 160 threads" in text
    assert "cdiv(R, 16) CTAs, one per tile" in text and "no matrix product: a memory-bound kernel" in text
    ptx = k.asm["ptx"]
    assert "setmaxnreg" not in ptx and ".reqntid 160" in ptx and ".maxnreg 80" in ptx
    assert "setp.lt.u32" in ptx.split("$L_producer")[0]  # threads 0..31 branch to the producer
    gemm = tkjit.load(EXAMPLES / "gemm.tk", cache=False)  # with a product: a warpgroup, setmaxnreg
    assert "producer_warp" not in gemm.asm["opt"] and "setmaxnreg" in gemm.asm["ptx"]


def test_the_consumer_only_schedule_runs_on_the_roles_interpreter():
    """The IR after the Hopper passes, run as the general lowering schedules it
    (interpreter/roles.py, three interleavings): rotary's consumer-only schedule is the plain run
    bit for bit. (The norms' ring tile read by copy_cols is not taken by the roles interpreter
    yet: docs/hopper-codegen.md.)"""
    from tkjit.interpreter.roles import run_roles
    k = tkjit.load(EXAMPLES / "rotary.tk", cache=False, lowering="general")
    args = _rotary_case(100)
    ref = [a.clone() for a in args]
    k(*ref)
    for seed in (0, 1, 2):
        mine = [a.clone() for a in args]
        run_roles(k.ir, mine, seed=seed)
        assert torch.equal(mine[3].view(torch.int16), ref[3].view(torch.int16))


FORMS = ["direct=true", "loads=registers", "cache=none", "loads=shared stages=4", "resident=2 stages=4",
         "force=true cache=shared cols=128 direct=true", "cache=none loads=registers resident=2"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm"])
def test_every_stream_form_takes_the_general_lowering_and_agrees_on_the_simulator(name, form):
    """stream-cols' other forms of the same kernels (direct loads, registers, no cache, deeper
    rings of one-shot tiles, persistent grids, both orders): through the general lowering ptxas
    clean with no spills -- the consumers take as many warps as the register-tile backend would
    (warp-spec: 2 warpgroups for residual + LayerNorm's 16 x 1024 tiles without the cache) -- and
    bit for bit the register-tile backend's PTX on the simulator at a ragged row count."""
    from tkjit.passes import DEFAULT_PIPELINE
    pipe = DEFAULT_PIPELINE.replace("stream-cols", f"stream-cols{{{form}}}", 1)
    src = (EXAMPLES / f"{name}.tk").read_text()
    general = tkjit.compile(src, lowering="general", require_hopper=True, cache=False, pipeline=pipe)
    sass = _sass(general)
    assert not re.search(r"\b(LDL|STL)\b", sass), "spilled"
    assert not [m for m in general.metadata["ptxas"]["messages"] if m["level"] == "warning"]
    auto = tkjit.compile(src, cache=False, pipeline=REGISTER_TILE.replace("stream-cols", f"stream-cols{{{form}}}", 1))
    assert "register-tile" in auto.asm["ptx"].splitlines()[0]
    args, outs = _norm_case(name, 20, 1024)
    for got, ref in zip(_simulated(general, args, outs), _simulated(auto, args, outs)):
        assert torch.equal(got.view(torch.int16), ref.view(torch.int16))
    if (name, form) == ("residual_layernorm", "cache=none"):
        assert general.metadata["block"] == [256, 1, 1]


def test_the_occupancy_build_keeps_a_cap_that_holds_a_cta_more_and_spills_little():
    """LayerNorm D = 4096 (8 warps, 33,824 B a CTA: shared memory holds 6 CTAs an SM): ptxas's own
    54 registers hold 4; assembled again under .maxnreg 48 it holds 5, spilling 4 B, and that build
    is the PTX the kernel keeps (the PTX stage's own text, logged as the backend's decision)."""
    k = _general("layernorm", constants={"D": 4096})
    assert ".maxnreg 48" in k.asm["ptx"] and ".minnctapersm" not in k.asm["ptx"]
    text = str(k.explain())
    assert ".maxnreg 48: ptxas's own 54 registers held 4 CTA(s) of 256 threads an SM" in text
    k.binary  # noqa: B018 - the cubin the cap was assembled into
    fn = k.metadata["ptxas"]["functions"][0]
    assert fn["registers"] == 48 and 0 < fn["spill_store_bytes"] <= 4


def test_the_occupancy_build_is_dropped_when_it_spills_more_and_says_so():
    """The rule on a made-up report (codegen/hopper/occupancy.py): a cap is tried only where shared
    memory holds more CTAs than the registers do; kept within SPILL_BYTES of spill, else dropped
    with the reason."""
    from tkjit.codegen.hopper.occupancy import SPILL_BYTES, capped
    from tkjit.runtime.toolchain import FunctionReport, PtxasReport

    def report(registers, spill=0):
        return PtxasReport(functions=(FunctionReport(name="k", registers=registers, spill_store_bytes=spill),),
                           messages=(), log="")
    ptx = ".visible .entry k()\n.reqntid 256, 1, 1\n{\n}\n"
    meta = {"lowering": "general", "block": [256, 1, 1], "smem_bytes": 33_824}
    tried = []

    def assemble(text, regs=48, spill=SPILL_BYTES):
        tried.append(text)
        return b"cubin", report(regs, spill)
    build, decision = capped(ptx, meta, report(54), assemble)
    assert ".maxnreg 48" in tried[0] and build[0] == tried[0] and decision["value"] == 48
    build, decision = capped(ptx, meta, report(54), lambda text: assemble(text, 48, SPILL_BYTES + 4))
    assert build is None and "so ptxas's own count stays" in decision["why"]
    assert capped(ptx, meta, report(40), assemble) == (None, None)  # 6 CTAs: as many as shared memory holds
    assert capped(ptx.replace(".reqntid", ".maxnreg 64\n.reqntid"), meta, report(54), assemble) == (None, None)
    assert capped(ptx, {**meta, "lowering": None}, report(54), assemble) == (None, None)
