"""The general sm_90a lowering (codegen/hopper/lower.py) on the CPU: every kernel of the corpus
(tests/general_corpus.py) takes it -- PTX through ptxas, SASS with HGMMA and UTMALDG, no spills,
no ptxas warnings -- and is right on the interpreter; what it cannot take is refused with the op
and why (an error under require_hopper, a warning otherwise); the wgmma fragment layout it
relies on; the protocol decision that keeps a wgmma group in flight across trips."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

import tkjit
from tkjit.codegen.layout import WarpGrid
from tkjit.errors import NotAvailableError

from general_corpus import BY_NAME, CASES

ptxas = pytest.importorskip("tkjit.runtime.toolchain")


def _general(case, **extra):
    return tkjit.compile(case.source, constants=case.constants or None, lowering="general",
                         require_hopper=True, cache=False, **extra)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_takes_the_general_lowering(case):
    try:
        k = _general(case)
        sass = k.asm["sass"]
    except NotAvailableError as e:
        if "ptxas" in str(e) or "disassembler" in str(e) or "cuobjdump" in str(e) or "nvdisasm" in str(e):
            pytest.skip(str(e))
        raise
    md = k.metadata
    assert md["backend"] == "wgmma" and md["lowering"] == "general"
    assert "tile program" in k.asm["ptx"].splitlines()[0]
    assert re.search(r"\b[HQ]GMMA", sass) and "UTMALDG" in sass   # QGMMA: fp8
    assert not re.search(r"\b(LDL|STL)\b", sass), "the general lowering spilled"
    report = md["ptxas"]
    assert not [m for m in report["messages"] if m["level"] == "warning"], report["log"]
    assert all(f["spill_store_bytes"] == 0 for f in report["functions"])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_is_right_on_the_interpreter(case):
    torch.manual_seed(0)
    k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
    args = case.make(case.cpu_shape, "cpu")
    want = case.reference(args)
    k(*args)
    for i, ref in zip(case.outputs, want):
        got = args[i].float()
        assert not torch.isnan(got).any()
        err = ((got - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"{case.name}: relative error {err}"


def test_a_16_bit_register_tile_loads_packed():
    """An rt<bf16> read from a bf16 tensor lands in its registers as the pairs it holds: no more
    conversions than the same residual read as an f32 tile (which stays packed too), where it
    once converted every element to f32 and packed it back."""
    import collections
    counts = []
    for decl in ("r: rt<bf16>[128, 128] = R.tile(m, n)", "r: rt<f32>[128, 128] = R.tile(m, n)"):
        src = BY_NAME["residual_bf16"].source.replace("r: rt<bf16>[128, 128] = R.tile(m, n)", decl)
        if "rt<f32>" in decl:
            src = src.replace("cvt<f32>(r)", "r")
        from tkjit.passes import default_pipeline   # one schedule for both (the f32 one could take ping-pong)
        pipeline = str(default_pipeline("sm_90a")).replace("warp-spec", "warp-spec{mode=cooperative}")
        ptx = tkjit.compile(src, lowering="general", require_hopper=True, cache=False, pipeline=pipeline).asm["ptx"]
        counts.append(collections.Counter(re.findall(r"\b(cvt\.f32\.bf16|cvt\.rn\.bf16x2\.f32|ld\.global\.b\d+)", ptx)))
    bf16, f32 = counts
    assert bf16 == f32, (bf16, f32)
    assert bf16["ld.global.b32"] > 0   # the pairs inside the tensor


def test_a_widened_16_bit_tile_is_the_same_code_as_an_f32_load():
    """``r: rt<bf16> = R.tile(..)`` used as ``cvt<f32>(r)`` and ``r: rt<f32> = R.tile(..)`` used as
    ``r`` are one program: the same schedule (ping-pong: both are budgeted at 16 bits) and the
    same PTX, so neither spelling costs the user anything."""
    src = BY_NAME["residual_bf16"].source
    f32 = src.replace("r: rt<bf16>[128, 128]", "r: rt<f32>[128, 128]").replace("cvt<f32>(r)", "r")
    ptx = []
    for text in (src, f32):
        k = tkjit.compile(text, lowering="general", require_hopper=True, cache=False)
        assert "ping-pong: 2 consumers" in k.explain()
        ptx.append([line for line in k.asm["ptx"].splitlines() if not line.lstrip().startswith("//")])
    assert ptx[0] == ptx[1]


def test_a_shared_tile_read_into_registers():
    """``r: rt<f32> = rs`` of a one-shot bf16 tile: one ldmatrix.x4 per 4 packed pairs of a
    thread's share (64 x 128 / 128 threads / 2 = 32 pairs: 8), no pair loads left, no
    conversion before its use, and the residual budgeted at 16 bits."""
    k = tkjit.compile(BY_NAME["residual_shared"].source, lowering="general", require_hopper=True, cache=False)
    ptx = k.asm["ptx"]
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", ptx)) == 8
    assert "ld.shared.b32" not in ptx
    assert "%acc 64, %r 32" in k.explain()


def test_a_tile_loaded_after_a_ring_loop_is_not_placed_over_the_ring():
    """The producer issues a one-shot load written after the K loop while the consumers still
    read the loop's last stages: its bytes may not be lent by the ring (they were, and the GPU
    read a residual half overwritten by the next stages: relative error 0.32 on an H200)."""
    from tkjit.ir.ops import For, Load
    k = tkjit.compile(BY_NAME["residual_shared"].source, require_hopper=True, cache=False)
    ops = list(k.ir.walk())
    loop = next(op for op in ops if isinstance(op, For) and "stage_stride" in op.attrs)
    ring = (min(op.attrs["smem"] for op in loop.regions[0].ops if isinstance(op, Load)),
            loop.attrs["stages"] * loop.attrs["stage_stride"])
    rs = next(op for op in ops if isinstance(op, Load) and op.result.hint == "rs")
    lo, hi = rs.attrs["smem"], rs.attrs["smem"] + rs.result.type.nbytes
    assert hi <= ring[0] or lo >= ring[0] + ring[1], (lo, hi, ring)


def test_a_shared_tile_read_is_refused_clearly_where_it_is_not_lowered():
    """An fp8 tile read into a 16-bit register tile (since session 18 an fp8 tile is read into an
    rt<f32> one, widened exactly)."""
    src = BY_NAME["residual_shared"].source.replace("R: gl<bf16>[M, N]", "R: gl<e4m3>[M, N]") \
        .replace("rs: st<bf16>[128, 128]", "rs: st<e4m3>[128, 128]") \
        .replace("r: rt<f32>[128, 128] = rs", "r: rt<bf16>[128, 128] = rs").replace("silu(acc) + r", "silu(acc) + cvt<f32>(r)")
    with pytest.raises(Exception, match=r"11:5: .*is read into an rt<f32> tile") as err:
        tkjit.compile(src, lowering="general", require_hopper=True, cache=False).asm["ptx"]
    assert "Traceback" not in str(err.value)


def test_an_f32_residual_of_a_16_bit_tensor_is_budgeted_packed():
    """The register estimate counts an f32 tile loaded from a bf16 tensor and read elementwise at
    the 16 bits the lowering holds it in: at 128 x 256 the residual GEMM fits two consumers (the
    accumulator's 128 registers + the residual's 64 + 32), where counting it at 32 bits (128)
    sent the kernel to the mma.sync backend."""
    import warnings
    from tkjit.passes import default_pipeline
    src = BY_NAME["residual_wide"].source
    whole = default_pipeline("sm_90a").replace("tile-split", "tile-split{mode=off}")  # 128 x 256 as written
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k = tkjit.compile(src, cache=False, pipeline=whole)
        assert k.metadata["backend"] == "wgmma"
    assert "%acc 128, %r 64" in k.explain()


COL_SUM = """
kernel col_sums(A: gl<bf16>[M, K], B: gl<bf16>[K, N], S: gl<f32>[N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    S.tile(n) = col_sum(acc)
  }
}
"""


def test_require_hopper_names_the_op_that_stops_it():
    with pytest.raises(NotAvailableError) as info:
        tkjit.compile(COL_SUM, lowering="general", require_hopper=True, cache=False).asm["ptx"]
    text = str(info.value)
    assert "col_sum" in text and "column reduction" in text
    assert ":10:" in text  # the line of col_sum in the kernel


def test_annotation_requires_the_hopper_path_too():
    with pytest.raises(NotAvailableError, match="require_hopper"):
        tkjit.compile("@require_hopper\n" + COL_SUM.lstrip(), lowering="general", cache=False).asm["ptx"]


def test_a_fallback_with_a_matrix_product_warns():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = tkjit.compile(COL_SUM, lowering="general", cache=False)
        assert "register-tile" in k.asm["ptx"].splitlines()[0]
    assert any("mma.sync" in str(w.message) and "col_sum" in str(w.message) for w in caught)
    assert "schedule dropped" in str(k.explain())


def test_auto_takes_the_general_lowering_for_gemms_and_attention():
    """lowering=auto: the plain GEMM and the attention forward take the general lowering (both
    templates were deleted on 2026-11-27, each once the general lowering matched it in the same
    run); the general lowering takes multicast (tests/test_general_multicast.py) and stream-K
    (tests/test_general_stream_k.py) too; rows TMA cannot address take its copying producer."""
    from general_corpus import BY_NAME
    examples = __import__("pathlib").Path(__file__).parents[1] / "examples"
    plain = tkjit.load(str(examples / "gemm.tk"), cache=False)
    assert "tile program" in plain.asm["ptx"].splitlines()[0]
    assert plain.metadata.get("lowering") == "general"
    linear = tkjit.compile(BY_NAME["linear"].source, cache=False)
    linear.asm["ptx"]  # noqa: B018 - the metadata
    assert linear.metadata.get("lowering") == "general"
    epilogue = tkjit.compile(BY_NAME["gemm_bias_relu"].source, cache=False)
    assert "tile program" in epilogue.asm["ptx"].splitlines()[0]
    for d in (64, 128):
        attention = tkjit.load(str(examples / "attention.tk"), constants={"D": d}, cache=False)
        general = tkjit.load(str(examples / "attention.tk"), constants={"D": d}, lowering="general",
                             cache=False)
        assert "tile program" in attention.asm["ptx"].splitlines()[0]
        assert attention.metadata.get("lowering") == "general"
        assert attention.asm["ptx"] == general.asm["ptx"]  # auto is the general lowering
    unaligned = plain._with_unaligned_rows()  # the variant a launch with such rows compiles
    ptx = unaligned.asm["ptx"]
    assert "tile program" in ptx.splitlines()[0] and "$L_tma_producer" in ptx
    assert unaligned.metadata.get("lowering") == "general"


def test_wgmma_rows_interleave_by_slab():
    """A consumer warpgroup owning two 64-row slabs: warp w holds rows 16w.. of each slab."""
    grid = WarpGrid(4, 4, 1, slab_warps=4)
    rows = grid.row_split(128)
    assert (rows.groups, rows.per_warp, rows.interleave) == (4, 2, 4)
    assert [rows.unit_offset(u, 16) for u in range(2)] == [0, 64]
    two = WarpGrid(8, 8, 1, slab_warps=4).row_split(256)   # two consumers, two slabs each
    assert (two.per_warp, two.interleave) == (2, 4)
    one = WarpGrid(8, 8, 1, slab_warps=4).row_split(128)   # one slab each: contiguous = interleaved
    assert (one.per_warp, one.interleave) == (1, 0)


RESCALED = """
kernel rescaled(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[64, 128] = B.tile(k, n)
      acc = mma_AB(a, b, acc * 0.5)
    }
    C.tile(m, n) = acc
  }
}
"""


def test_a_trip_that_reads_its_product_drains_it():
    """wait_group 1 keeps the last group in flight into the next trip only when nothing but the
    next wgmma reads its accumulator; acc * 0.5 reads it, so the trip drains (wait 0) and
    releases its own stage."""
    from tkjit.passes.mbarrier import schedule_of
    plain = schedule_of(_general(CASES[0]).ir).protocol.text()
    assert "mma_wait 1" in plain and "release: arrive empty[k.prev]" in plain
    k = tkjit.compile(RESCALED, lowering="general", cache=False)
    text = schedule_of(k.ir).protocol.text()
    assert "mma_wait 1" not in text and "release: arrive empty[k.s]" in text
    torch.manual_seed(0)
    a, b = torch.randn(130, 200).bfloat16(), torch.randn(200, 140).bfloat16()
    c = torch.full((130, 140), float("nan"))
    k(a, b, c)
    ref = torch.zeros(130, 140)
    for k0 in range(0, 200, 64):
        ref = a.float()[:, k0:k0 + 64] @ b.float()[k0:k0 + 64] + 0.5 * ref
    assert torch.allclose(c, ref, rtol=1e-3, atol=1e-3)


SYNC = re.compile(r"\b(mbarrier\.|bar\.sync|bar\.arrive|barrier\.|wgmma\.wait_group|wgmma\.commit_group|"
                  r"cp\.async\.bulk\.wait_group|cp\.async\.bulk\.commit_group|"
                  r"cp\.async\.wait_all|cp\.async\.wait_group|cp\.async\.commit_group)"
                  r"|\.(release|acquire)\.gpu\b|\bfence\.acq_rel\b")  # stream-K's flags between CTAs too


def sync_outside_the_protocol(ptx: str, async_ir=None) -> list[str]:
    """The synchronization lines no protocol step printed (and, given the kernel's async-schedule
    IR, the step marks that are not its steps: ``steps_not_from_the_ir``)."""
    inside, stray = False, []
    for line in ptx.splitlines():
        text = line.strip()
        if text.startswith("// step:"):
            inside = True
        elif text == "// end step":
            inside = False
        elif SYNC.search(text) and not inside:
            stray.append(text)
    return stray + (steps_not_from_the_ir(ptx, async_ir) if async_ir is not None else [])


RING_INIT = "init the protocol's rings (full[s] and empty[s] of each), then the CTA meets once"
"""The one ``// step:`` that is not a step of the programs: the rings the IR declares, initialized."""


def _events(steps):
    from tkjit.passes import sync_protocol as sp
    for st in steps:
        if isinstance(st, sp.BLOCKS):
            yield from _events(getattr(st, "body", ()))
            yield from _events(getattr(st, "orelse", ()))
        else:
            yield st


def steps_not_from_the_ir(ptx: str, async_ir) -> list[str]:
    """The lint's second half: the ``// step:`` marks of the PTX against the event steps of the
    protocol read back from the async-schedule IR (``protocol_from_ir``). A mark that is no step of
    the IR (``"printed, not in the IR: ..."``) or a step of the IR the PTX never prints
    (``"in the IR, not printed: ..."``; ``HoldStore`` keeps a tile in registers and prints nothing)."""
    from tkjit.passes import sync_protocol as sp
    from tkjit.passes.async_schedule import protocol_from_ir
    proto = protocol_from_ir(async_ir)
    steps = {st.text(): st for st in _events(proto.producer + proto.consumer)}
    marks = [line.strip()[len("// step: "):] for line in ptx.splitlines() if line.strip().startswith("// step: ")]
    allowed = set(steps) | ({RING_INIT} if proto.rings else set())
    out = [f"printed, not in the IR: {m}" for m in dict.fromkeys(marks) if m not in allowed]
    out += [f"in the IR, not printed: {t}" for t, st in steps.items()
            if t not in marks and not isinstance(st, sp.HoldStore)]
    return out


def protocol_lint(k) -> list[str]:
    """The PTX lint of a compiled kernel: every synchronization line inside a ``// step:`` mark, and
    the marks exactly the steps of its async-schedule IR."""
    assert k.async_ir is not None, "no async-schedule IR to take the steps from"
    return sync_outside_the_protocol(k.asm["ptx"], k.async_ir)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_barrier_and_wait_is_a_protocol_step(case):
    """The lint: the general lowering's PTX has no mbarrier operation, named barrier, wgmma or
    bulk-copy wait that a protocol step did not print -- the staged epilogue's named barriers and
    bulk-store waits included (its ``StoreWait``, ``StagingSync``, ``StoreDrain`` steps) -- and the
    steps it prints are those of the async-schedule IR, read back."""
    k = tkjit.compile(case.source, constants=case.constants or None, lowering="general",
                      require_hopper=True, cache=False)
    assert protocol_lint(k) == []


@pytest.mark.parametrize("name", ["gemm", "linear_attention", "attention_nol", "mlp"])
def test_every_barrier_and_wait_of_the_examples_is_a_protocol_step(name):
    """The lint over examples with staged, deferred and in-loop epilogues."""
    from pathlib import Path
    k = tkjit.load(Path(__file__).resolve().parents[1] / "examples" / f"{name}.tk", cache=False)
    assert k.metadata.get("lowering") == "general"
    assert protocol_lint(k) == []


def test_the_lint_takes_its_steps_from_the_ir():
    """A step deleted from the async-schedule IR but still in the PTX, or printed twice over, is a
    finding: the marks are checked against the IR, not against the mbarrier pass's object."""
    k = tkjit.compile(CASES[0].source, lowering="general", cache=False)
    assert protocol_lint(k) == []
    (drain,) = [op for op in k.async_ir.walk() if op.NAME == "store_drain"]
    drain.parent.ops.remove(drain)
    assert protocol_lint(k) == ["printed, not in the IR: bulk stores: every group completed "
                                "(cp.async.bulk.wait_group 0, one thread)"]
    ptx = k.asm["ptx"].replace("// step: mma_wait 1", "// step: mma_wait 2", 1)
    assert "printed, not in the IR: mma_wait 2" in steps_not_from_the_ir(ptx, k.async_ir)


def test_the_lint_catches_a_barrier_of_its_own():
    ptx = tkjit.compile(CASES[0].source, lowering="general", cache=False).asm["ptx"]
    broken = ptx.replace("  ret;", "  bar.sync 3, 256;\n  ret;", 1)
    assert sync_outside_the_protocol(broken) == ["bar.sync 3, 256;"]


GENERAL_EXAMPLES = ["gemm_bias_gelu", "gemm_bias_silu", "bmm", "gemm_alpha_beta", "gemm_atb", "mlp",
                    "gemm_fp8", "attention_nol", "attention_window", "attention_softcap", "attention_alibi",
                    "attention_exp", "attention_mask", "attention_f16", "attention_bwd_dkdv", "attention_bwd_dq",
                    "linear_attention"]


@pytest.mark.parametrize("name", GENERAL_EXAMPLES)
def test_the_examples_take_the_general_lowering_without_spills(name):
    """The examples written as a new user would (default compile, lowering auto) take the general
    lowering: tensor-core products and TMA loads in the SASS, nothing spilled, no ptxas warning."""
    from pathlib import Path
    k = tkjit.load(Path(__file__).resolve().parents[1] / "examples" / f"{name}.tk", cache=False)
    try:
        sass = k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert k.metadata.get("lowering") == "general"
    assert re.search(r"\b[HQ]GMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"]


def test_the_ptx_does_not_depend_on_the_process():
    """Two processes with different string-hash seeds emit the same PTX (the cache and every
    A/B rely on it; a set iterated in hash order once made the producer's prefetches move)."""
    import os
    import subprocess
    import sys
    code = ("import sys, hashlib; sys.path.insert(0, 'tests'); import tkjit; from general_corpus import CASES; "
            "print(hashlib.sha256(''.join(tkjit.compile(c.source, cache=False, lowering='general')"
            ".asm['ptx'] for c in CASES[:4]).encode()).hexdigest())")
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    outs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr
        outs.add(run.stdout.strip())
    assert len(outs) == 1


@pytest.mark.parametrize("d,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_a_level_2_loop_keeps_its_store_in_the_tile(d, causal):
    """The epilogue pass does not defer a persistent tile's store past the next tile's first wgmma
    group where a loop runs at level 2 (two products in flight) and the held tile would leave fewer
    than LEVEL2_SLACK registers free: measured slower, and with one trip counted attention_nol
    deferred and spilled (94 STL at D = 128) under the persistent grid. The MLP (plenty free)
    still defers."""
    from pathlib import Path
    k = tkjit.load(Path(__file__).resolve().parents[1] / "examples" / "attention_nol.tk",
                   constants={"D": d, "CAUSAL": causal}, lowering="general", cache=False)
    text = k.explain()
    assert "deferred to the next tile" not in text
    assert "software-pipelined at level 2 (two products in flight)" in text and "measured slower" in text
    try:
        sass = k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert not re.search(r"\b(LDL|STL)\b", sass)
    mlp = tkjit.load(Path(__file__).resolve().parents[1] / "examples" / "mlp.tk", lowering="general",
                     cache=False)
    assert "deferred to the next tile's first wgmma group" in mlp.explain()


def test_tiles_loaded_once_keep_one_cta_per_tile_where_the_registers_are_tight():
    """grid: a persistent tile loop holds a few registers more than one tile (PERSISTENT_STATE);
    attention_bwd_dkdv's consumers need about 240 of their 240, so its K and V tiles keep one CTA
    per tile (persistent, ptxas spilled one register through the whole kernel), logged; the
    attention forward at D = 128 (192 of 240) stays persistent."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "examples"
    dkdv = tkjit.load(root / "attention_bwd_dkdv.tk", lowering="general", cache=False)
    text = dkdv.explain()
    assert "CTAs, one per tile" in text and "a persistent tile loop holds about 8 more" in text
    fwd = tkjit.load(root / "attention.tk", constants={"D": 128}, lowering="general", cache=False)
    assert "persistent: min(" in fwd.explain()
    try:
        sass = dkdv.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert not re.search(r"\b(LDL|STL)\b", sass)


F32_OUT = """
kernel gemm_f32(A: gl<bf16>[M, K], B: gl<bf16>[N, K], C: gl<f32>[M, N]) {
  for (m, n) in blocks(M / 128, N / 128) {
    acc: rt<f32>[128, 128] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[128, 64] = A.tile(m, k)
      b: st<bf16>[128, 64] = B.tile(n, k)
      acc = mma_ABt(a, b, acc)
    }
    C.tile(m, n) = acc
  }
}
"""


def test_an_f32_output_takes_no_staging_and_its_bytes_go_to_the_ring():
    """The staging is written with stmatrix (16-bit pairs), so a store to an f32 tensor goes from
    the accumulator fragments: no staging tile is planned for it (before, 32 KB were planned and
    never used, and explain() listed them), and the ring takes the bytes (7 stages, not 6)."""
    k = tkjit.compile(F32_OUT, cache=False)
    text = k.explain()
    assert "it stores to f32: the staging is written with stmatrix" in text
    assert "staging tile of store" not in text
    assert "7 stage(s) of 32,768 B" in text
    assert k.metadata["backend"] == "wgmma"
