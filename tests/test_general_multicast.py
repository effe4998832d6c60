"""2-CTA clusters with TMA multicast (grid{multicast=2}) as a schedule option of the general
sm_90a lowering: the mbarrier pass's decision (passes/pairs.py) and protocol (shared rings
``cluster = 2``, ``ClusterSync`` at start and exit, checked), the pair's PTX (cluster launch of
whole pairs, half of each shared load multicast, releases on the peer's barriers, every cluster
barrier a protocol step), the SASS (UTMALDG multicast, cluster barriers, no cluster-scope memory
barrier before the remote releases, no spills), where it is not taken and why, and the pair's
CPU schedule (tkjit/interpreter/roles.py) against the plain interpreter, odd tile rows included.
The GPU runs are tests/gpu/test_general_multicast_gpu.py."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.errors import NotAvailableError
from tkjit.interpreter.roles import ScheduleError, run_roles
from tkjit.passes import default_pipeline
from tkjit.passes import sync_protocol as sp
from tkjit.passes.mbarrier import schedule_of
from tkjit.passes.sync_check import check_protocol

from test_general_lowering import sync_outside_the_protocol

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GEMM = (EXAMPLES / "gemm.tk").read_text()
ABT = GEMM.replace("B: gl<bf16>[K, N]", "B: gl<bf16>[N, K]") \
    .replace("st<bf16>[BK, BN] = B.tile(k, n)", "st<bf16>[BN, BK] = B.tile(n, k)").replace("mma_AB(", "mma_ABt(")
MULTICAST = default_pipeline("sm_90a").replace("grid", "grid{multicast=2}")

BIAS = """
kernel pair_bias<BM = 64, BN = 64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], rb: gl<f32>[M], cb: gl<f32>[N],
                                   C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / BM, N / BN) schedule(persistent, group = 8) {
    acc: rt<f32>[BM, BN] = zeros()
    for k in 0 .. K / 64 {
      a: st<bf16>[BM, 64] = A.tile(m, k)
      b: st<bf16>[64, BN] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    r: cv<f32>[BM] = rb.tile(m)
    c: rv<f32>[BN] = cb.tile(n)
    C.tile(m, n) = cvt<bf16>(relu(add_row(add_col(acc, c), r)))
  }
}
"""


def _compile(source=GEMM, lowering="general", **constants):
    return tkjit.compile(source, pipeline=MULTICAST, constants=constants or None, lowering=lowering,
                         require_hopper=lowering == "general", cache=False)


def _decision(k, name: str):
    return next(d for d in k.decisions.for_pass("mbarrier") if d.subject == name)


def test_the_mbarrier_pass_pairs_the_ctas_and_says_why():
    k = _compile()
    proto = schedule_of(k.ir).protocol
    (ring,) = proto.rings
    assert ring.cluster == 2 and "empty[4] count 2 x 2" in proto.text()
    assert proto.producer[0] == sp.ClusterSync("start") and isinstance(proto.producer[1], sp.Tiles)
    exit_at = proto.consumer.index(sp.ClusterSync("exit"))
    assert proto.consumer[0] == sp.ClusterSync("start") and isinstance(proto.consumer[exit_at - 1], sp.Tiles)
    # after it only the staged epilogue's own steps (its last held tile, the bulk-store drain)
    assert all(isinstance(st, (sp.IfHeld, sp.StoreDrain)) for st in proto.consumer[exit_at + 1:])
    check_protocol(proto)  # one CTA's view, the peer mirroring it
    d = _decision(k, "block loop")
    assert d.decision == "multicast: pairs of CTAs share 1 load(s)"
    assert "%b (panels: 2 of 4 panels, 16384 of 32768 B)" in d.reason
    assert "multicast: pairs of CTAs share 1 load(s)" in k.explain()
    assert "empty[s] count 2 x 2" in k.explain()


def test_without_the_option_nothing_changes():
    k = tkjit.compile(GEMM, lowering="general", cache=False)
    proto = schedule_of(k.ir).protocol
    assert all(r.cluster == 1 for r in proto.rings) and "barrier.cluster" not in proto.text()
    assert "multicast" not in k.explain()


def test_the_checker_takes_the_exit_as_a_meeting():
    """A ClusterSync("exit") among the consumers is their meeting: one consumer passing it alone
    deadlocks (here: only one of the two consumers' programs has it)."""
    from tkjit.passes.sync_unroll import ARRIVE, STAGING_SYNC, STAGING_WRITE, STORE_DRAIN, STORE_WAIT, TMA_STORE, unroll
    proto = schedule_of(_compile().ir).protocol
    epilogue = (STORE_WAIT, STAGING_SYNC, STAGING_WRITE, TMA_STORE, STORE_DRAIN)  # the consumer's own staging
    actions = [a for a in unroll(proto, proto.consumer, (2,)) if a.op not in epilogue]
    assert [a.op for a in actions[-2:]] == [ARRIVE, 0]  # bar arrive, then wait (opcode 0)
    assert unroll(proto, proto.producer, (2,))[0].op != ARRIVE  # "start" orders nothing more
    broken = dataclasses.replace(proto, consumer=(sp.Tiles(proto.consumer[1].body), sp.ClusterSync("start")))
    with pytest.raises(ValueError):
        unroll(broken, broken.consumer, (2,))


@pytest.mark.parametrize("name, source, constants, boxes", [
    ("mma_AB", GEMM, {}, 2),            # half of B: 2 of its 4 64-column panels
    ("mma_ABt", ABT, {}, 1),            # K-major B: one panel, 128 of its 256 rows
    ("64x64", GEMM, {"BM": 64, "BN": 64}, 1),
])
def test_the_pair_ptx(name, source, constants, boxes):
    k = _compile(source, **constants)
    ptx, md = k.asm["ptx"], k.metadata
    bm, bn = constants.get("BM", 128), constants.get("BN", 256)
    assert md["lowering"] == "general" and ".reqnctapercluster 2, 1, 1" in ptx
    assert md["grid"] == [["mul", ["min", ["mul", ["cdiv", ["cdiv", ["dim", "M"], bm], 2],
                                           ["cdiv", ["dim", "N"], bn]],
                                   ["cdiv", ["add", ["num_sms"], -1], 2]], 2]]
    loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared\S*[^;]*;", ptx)
    multicast = [x for x in loads if ".multicast::cluster" in x]
    assert len(multicast) == boxes and all(x.endswith(", 3;") for x in multicast)
    assert len(loads) - len(multicast) == bm // 64 * 0 + 1  # A: one 64-column panel, this CTA's own
    assert ptx.count("mbarrier.arrive.shared::cluster.b64") == 2  # in- and after-loop releases
    assert "mbarrier.arrive.release.cluster" not in ptx  # (MEMBAR.ALL.GPU before every release)
    consumers = bm // 64
    assert re.search(rf"mbarrier\.init\.shared::cta\.b64 \[%r\d+\+0\], {2 * consumers};", ptx)
    assert ptx.count("barrier.cluster.arrive.release.aligned;") == 3  # start: each role; exit: consumers
    assert "%clusterid.x" in ptx and "%nclusterid.x" in ptx
    stray = sync_outside_the_protocol(ptx, k.async_ir)
    assert stray == []
    if name == "mma_ABt":
        b_map = next(p for p in md["params"] if p.get("kind") == "tensormap" and p["tensor"] == "B")
        assert b_map["box"] == [64, 128]


@pytest.mark.parametrize("source", [GEMM, ABT], ids=["mma_AB", "mma_ABt"])
def test_the_pair_sass(source):
    k = _compile(source)
    try:
        sass = k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert "UTMALDG.2D.MULTICAST" in sass and re.search(r"UTMALDG\.2D\s", sass)
    assert "UCGABAR_ARV" in sass and "UCGABAR_WAIT" in sass
    assert re.search(r"\bHGMMA", sass) and not re.search(r"\b(LDL|STL)\b", sass)
    # the cluster barriers' .release only (one per role's ClusterSync: 3), none before the remote
    # releases (SYNCS.ARRIVE...RED), which with .release.cluster measured 0.63-0.9x on the template
    assert sass.count("MEMBAR.ALL.GPU") == sass.count("UCGABAR_ARV") == 3
    assert "SYNCS.ARRIVE.TRANS64.RED" in sass
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"]


@pytest.mark.parametrize("source, constants, why", [
    (GEMM, {"BN": 128}, "not with ping-pong consumers"),
    (GEMM, {"SPLIT": 2}, "split-K already makes each tile a cluster"),
    (GEMM.replace("B.tile(k, n)", "B.tile(k + m - m, n)"), {}, "no ring load's coordinates are free of %m"),
])
def test_where_the_pair_is_not_taken_the_log_says_why(source, constants, why):
    k = _compile(source, **constants)
    d = _decision(k, "block loop")
    assert d.decision == "multicast not taken" and why in d.reason
    assert ".reqnctapercluster 2" not in k.asm["ptx"] or constants.get("SPLIT") == 2
    assert all(r.cluster == 1 for r in schedule_of(k.ir).protocol.rings)


def test_auto_takes_the_general_pair():
    """Since the pair's GPU run (H200, 2026-11-27: tests/gpu/test_general_multicast_gpu.py, and
    benchmarks/gemm_variants.py timing it against the template's pair in one run)."""
    k = _compile(lowering="auto")
    assert ".multicast::cluster" in k.asm["ptx"] and k.metadata["lowering"] == "general"
    assert k.metadata["gemm"]["multicast"] == 2


def _unaligned(lowering="auto"):
    """The variant a launch with rows TMA cannot address compiles (kernel.py ``_with_unaligned_rows``)."""
    variant = _compile(lowering=lowering)._with_unaligned_rows()
    assert variant is not None and variant.options.unaligned_rows
    return variant


@pytest.mark.parametrize("lowering", ["auto", "general"])
def test_the_unaligned_rows_variant_declines_the_pair_and_says_why(lowering):
    """Multicast is an optimization: where the copying producer may run (it fills only its own
    CTA's stage), the pair is not taken and the kernel runs unpaired (no GEMM template)."""
    v = _unaligned(lowering)
    d = _decision(v, "block loop")
    assert d.decision == "multicast not taken"
    assert "not in the variant for rows TMA cannot address (compile option unaligned_rows)" in d.reason
    assert "multicast not taken" in v.explain()
    proto = schedule_of(v.ir).protocol
    assert all(r.cluster == 1 for r in proto.rings) and "barrier.cluster" not in proto.text()
    ptx = v.asm["ptx"]
    assert v.metadata["lowering"] == "general" and "multicast" not in v.metadata["gemm"]
    assert ".multicast::cluster" not in ptx and "barrier.cluster" not in ptx and "mapa" not in ptx
    assert ".reqnctapercluster" not in ptx and ".explicitcluster" not in ptx
    copy_path = ptx.split("$L_tma_producer")[1]  # the copying producer, beside the TMA one
    assert "ld.global.nc.b16" in copy_path and "st.shared.b16" in copy_path
    stray = sync_outside_the_protocol(ptx, v.async_ir)
    assert stray == []
    # the aligned kernel keeps its pair
    assert ".multicast::cluster" in _compile(lowering=lowering).asm["ptx"]


def test_the_unaligned_rows_variant_runs_unpaired_on_the_cpu_schedule():
    """Rows TMA cannot address (K = 130: 260-byte rows of A): the declined pair's schedule
    (tkjit/interpreter/roles.py) matches the plain interpreter, bit for bit."""
    torch.manual_seed(5)
    v = _unaligned()
    assert schedule_of(v.ir).pair.ctas == 1
    a, b = torch.randn(192, 130).bfloat16(), torch.randn(130, 200).bfloat16()
    ref = torch.full((192, 200), float("nan")).bfloat16()
    tkjit.compile(GEMM, cache=False)(a, b, ref)  # the plain interpreter (no GPU here)
    for seed in (0, 1):
        c = torch.full((192, 200), float("nan")).bfloat16()
        run_roles(v.ir, [a, b, c], seed=seed)
        assert torch.equal(c.float().nan_to_num(7.0), ref.float().nan_to_num(7.0)), seed


def _run(source, constants, a, b, extra=()):
    k = tkjit.compile(source, pipeline=MULTICAST, constants=constants, cache=False)
    m, n = a.shape[0], b.shape[0] if source is ABT else b.shape[1]
    ref = torch.full((m, n), float("nan")).bfloat16()
    k(a, b, *extra, ref)
    return k, ref


@pytest.mark.parametrize("source, constants, shape", [
    (GEMM, {"BM": 64, "BN": 64}, (256, 128, 256)),       # tile multiples, 2 unit rows
    (GEMM, {"BM": 64, "BN": 64}, (192, 130, 200)),       # 3 tile rows: the off-edge CTA; ragged N, K
    (ABT, {"BM": 64, "BN": 64}, (130, 70, 130)),         # rows halved (K-major B), ragged
], ids=["multiples", "odd-rows", "abt-ragged"])
def test_pair_schedules_match_the_interpreter(source, constants, shape):
    """Both CTAs of each pair as coroutines, every shared load landing as two halves in both,
    releases on both CTAs' barriers: the plain interpreter's result, bit for bit."""
    m, n, kk = shape
    torch.manual_seed(0)
    a = torch.randn(m, kk).bfloat16()
    b = (torch.randn(n, kk) if source is ABT else torch.randn(kk, n)).bfloat16()
    k, ref = _run(source, constants, a, b)
    assert schedule_of(k.ir).pair.ctas == 2
    for seed in (0, 1, 2):
        c = torch.full((m, n), float("nan")).bfloat16()
        run_roles(k.ir, [a, b, c], seed=seed)
        assert torch.equal(c.float().nan_to_num(7.0), ref.float().nan_to_num(7.0)), seed


def test_a_pair_epilogue_with_row_and_column_vectors_matches():
    """The off-edge CTA's row vector lies past its tensor too: zeros, nothing stored."""
    torch.manual_seed(2)
    a, b = torch.randn(150, 130).bfloat16(), torch.randn(130, 100).bfloat16()
    rb, cb = torch.randn(150), torch.randn(100)
    k = tkjit.compile(BIAS, pipeline=MULTICAST, cache=False)
    assert schedule_of(k.ir).pair.ctas == 2
    ref = torch.full((150, 100), float("nan")).bfloat16()
    k(a, b, rb, cb, ref)
    for seed in (0, 1):
        c = torch.full((150, 100), float("nan")).bfloat16()
        run_roles(k.ir, [a, b, rb, cb, c], seed=seed)
        assert torch.equal(c.float().nan_to_num(7.0), ref.float().nan_to_num(7.0))


def test_a_pair_releasing_only_its_own_barriers_is_caught(monkeypatch):
    """Rings not marked shared (each CTA's consumers release only their own empty[s], count not
    doubled): a producer refills a stage in both CTAs while the peer still reads it, or a half
    never lands -- some schedule differs from the interpreter or fails."""
    import tkjit.passes.mbarrier as mb
    real = mb.schedule_of

    def unshared(kernel):
        s = real(kernel)
        rings = tuple(dataclasses.replace(r, cluster=1) for r in s.protocol.rings)
        s.protocol = dataclasses.replace(s.protocol, rings=rings)
        return s
    torch.manual_seed(0)
    a, b = torch.randn(128, 2048).bfloat16(), torch.randn(2048, 64).bfloat16()
    k, ref = _run(GEMM, {"BM": 64, "BN": 64}, a, b)
    monkeypatch.setattr(mb, "schedule_of", unshared)
    caught = 0
    for seed in range(12):
        c = torch.full((128, 64), float("nan")).bfloat16()
        try:
            run_roles(k.ir, [a, b, c], seed=seed)
        except ScheduleError:
            caught += 1
            continue
        caught += not torch.equal(c.float().nan_to_num(7.0), ref.float().nan_to_num(7.0))
    assert caught > 0


def test_with_stream_k_the_pair_is_taken_and_stream_k_is_not():
    """grid{multicast=2,stream_k=1}: the pair's walk decides the CTA's tiles, so stream-K is not
    applied (logged by the mbarrier pass and the lowering) and the kernel is the pair alone, byte
    for byte (as the GEMM template did; no fallback to another backend)."""
    both = tkjit.compile(GEMM, pipeline=MULTICAST.replace("grid{multicast=2}", "grid{multicast=2,stream_k=1}"),
                         cache=False)
    ptx = both.asm["ptx"]
    assert both.metadata["lowering"] == "general" and "serial_launches" not in both.metadata
    assert _decision(both, "block loop").decision == "multicast: pairs of CTAs share 1 load(s)"
    assert "no multicast pair" in _decision(both, "@gemm").reason
    why = next(d.reason for d in both.decisions.for_pass("codegen") if d.decision == "stream-K: none")
    assert "the multicast pair walks tile pairs" in why
    strip = lambda ptx: [line for line in ptx.splitlines() if not line.strip().startswith("//")]
    assert strip(ptx) == strip(_compile(lowering="auto").asm["ptx"])


def test_every_pair_protocol_starts_and_ends_with_the_cluster_syncs():
    """A multicast pair's programs open with ClusterSync("start") (no peer writes or arrives before
    the barriers are initialized) and the consumers' close with ClusterSync("exit"), ping-pong
    consumers' included: their branch once returned before the syncs, and the pair hung on an
    H200 (pairs.py)."""
    from tkjit.passes import sync_protocol as sp
    ring = sp.Ring("k", 4, (sp.Load("a", 16384), sp.Load("b", 16384)), 32768, 1, cluster=2)
    plan = sp.LoopPlan("k", (("k",),))
    for pingpong in (False, True):
        proto = sp.standard_protocol("g", 2, True, (ring,), (plan,), pingpong=pingpong, cluster=2)
        assert proto.producer[0] == sp.ClusterSync("start"), pingpong
        assert proto.consumer[0] == sp.ClusterSync("start") and proto.consumer[-1] == sp.ClusterSync("exit"), pingpong
        alone = sp.standard_protocol("g", 2, True, (ring,), (plan,), pingpong=pingpong, cluster=1)
        assert not any(isinstance(st, sp.ClusterSync) for st in (*alone.producer, *alone.consumer))


def _schedule_errors(k, args, seeds: int) -> list[str]:
    """The ScheduleErrors the roles interpreter reports over ``seeds`` schedules of ``k``'s IR."""
    from tkjit.interpreter.roles import ScheduleError
    caught = []
    for seed in range(seeds):
        try:
            run_roles(k.ir, [t.clone() if isinstance(t, torch.Tensor) else t for t in args], seed=seed)
        except ScheduleError as e:
            caught.append(str(e))
    return caught


def test_a_pair_without_its_start_sync_is_caught_by_the_roles_interpreter(monkeypatch):
    """CTAs start at independent times and each initializes its own barriers: with the pair's
    ClusterSync steps taken out, some schedule has a CTA release or multicast into its peer before
    the peer started, which the roles interpreter reports (the hang ping-pong pairs had on an H200
    came from exactly that gap, pairs.py). With them, every schedule runs."""
    from tkjit.passes import sync_protocol as sp
    torch.manual_seed(0)
    a, b = torch.randn(256, 256).bfloat16(), torch.randn(256, 128).bfloat16()
    k, ref = _run(GEMM, {"BM": 64, "BN": 64}, a, b)
    assert schedule_of(k.ir).pair.ctas == 2
    for seed in range(4):
        c = torch.full((256, 128), float("nan")).bfloat16()
        run_roles(k.ir, [a, b, c], seed=seed)
        assert torch.equal(c.float().nan_to_num(7.0), ref.float().nan_to_num(7.0)), seed
    monkeypatch.setattr(sp, "paired", lambda prod, cons, cluster: (prod, cons))
    caught = _schedule_errors(k, [a, b, torch.full((256, 128), float("nan")).bfloat16()], 8)
    assert any("before that CTA initialized its barriers" in e for e in caught), caught
    assert all("before that CTA initialized" in e or "after that CTA exited" in e for e in caught), caught


def test_the_compile_time_check_refuses_a_pair_without_its_cluster_syncs(monkeypatch):
    """The sync check explores one CTA with its peer mirroring it; a pair's start and exit syncs
    are checked by structure (sync_check.pair_violation): taken out, the compile stops."""
    from tkjit.passes import sync_protocol as sp
    monkeypatch.setattr(sp, "paired", lambda prod, cons, cluster: (prod, cons))
    with pytest.raises(tkjit.TkError, match="unordered-pair.*do not open with the pair's cluster barrier"):
        tkjit.compile(GEMM, pipeline=MULTICAST, constants={"BM": 64, "BN": 64}, cache=False).asm["ptx"]


def test_a_pair_without_its_exit_sync_is_caught_by_the_roles_interpreter(monkeypatch):
    """With only the start sync, some schedule has a CTA exit while its peer's consumers still
    release stages on its barriers: the roles interpreter reports it."""
    from tkjit.passes import sync_protocol as sp
    torch.manual_seed(0)
    a, b = torch.randn(256, 256).bfloat16(), torch.randn(256, 128).bfloat16()
    k, _ = _run(GEMM, {"BM": 64, "BN": 64}, a, b)
    start = sp.ClusterSync("start")
    monkeypatch.setattr(sp, "paired", lambda prod, cons, cluster: ((start, *prod), (start, *cons)))
    caught = _schedule_errors(k, [a, b, torch.full((256, 128), float("nan")).bfloat16()], 12)
    assert caught and all("after that CTA exited" in e for e in caught), caught


GELU = (EXAMPLES / "gemm_bias_gelu.tk").read_text()


def _pingpong_pair(monkeypatch, source, constants):
    """``source`` compiled as a multicast pair with ping-pong consumers: pairs.py's refusal lifted
    in-process (as benchmarks/probes/pingpong_pairs.py does), nothing else changed."""
    from tkjit.passes import pairs
    monkeypatch.setattr(pairs, "pair_plan", pairs.lifting_pingpong())
    k = tkjit.compile(source, pipeline=MULTICAST, constants=constants, cache=False)
    assert k.ir.attrs.get("pingpong") and schedule_of(k.ir).pair.ctas == 2
    return k


def _walk_on_the_simulator(monkeypatch, k, gelu: bool, shape):
    """``k``'s PTX on the simulator with its wgmmas skipped (tests/ptxsim.py ``SKIP_WGMMA``: the
    accumulators stay zero), 4 SMs: 2 pairs, each walking several units. Every output element
    is then the epilogue of zero -- gelu(bias) or 0 -- where a tile was stored, NaN where none."""
    import ptxsim
    from simkit import simulate
    monkeypatch.setattr(ptxsim, "SKIP_WGMMA", True)
    m, n, kk = shape
    torch.manual_seed(0)
    a, b, bias = torch.randn(m, kk).bfloat16(), torch.randn(kk, n).bfloat16(), torch.randn(n).bfloat16()
    args = [a, b, bias, torch.empty(m, n).bfloat16()] if gelu else [a, b, torch.empty(m, n).bfloat16()]
    (got,) = simulate(k._result.tkir, args, [len(args) - 1], ptx_meta=(k.asm["ptx"], dict(k.metadata)))
    want = torch.nn.functional.gelu(bias.float()).bfloat16() if gelu else torch.zeros(n).bfloat16()
    return got, want.expand(m, n)


PINGPONG_PAIRS = [(GELU, {"BN": 128}, True), (GEMM, {"BN": 128}, False)]


@pytest.mark.parametrize("source, constants, gelu", PINGPONG_PAIRS, ids=["gelu", "gemm"])
def test_the_pingpong_pair_walks_every_tile_on_the_ptx_simulator(monkeypatch, source, constants, gelu):
    """The ping-pong pair's PTX (the refusal lifted) on the PTX simulator with more units than
    pairs: 2 pairs of 4-5 units each (ragged M with the off-edge peer tile, ragged N and K, 9 K
    trips over 6 stages). The consumers alternate over their CTA's units, the producer walks all
    of them: every tile is stored and the run ends (no deadlock). Session 17: the consumers'
    walk strode by %nctaid.x (twice the pairs) while the producer's strode by %nclusterid.x, so
    the consumers skipped units whose stages the producer filled, which hung the H200 at
    (1000, 3000, 520) -- see the test below."""
    k = _pingpong_pair(monkeypatch, source, constants)
    got, want = _walk_on_the_simulator(monkeypatch, k, gelu, (600, 300, 520))
    assert not got.isnan().any()
    assert torch.equal(got, want)
    ptx = k.asm["ptx"]
    assert "%nctaid.x" not in ptx and ptx.count("%nclusterid.x") == 2  # (both roles' walks)


def test_a_pingpong_pair_whose_consumers_stride_by_ctas_hangs_on_the_ptx_simulator(monkeypatch):
    """The bug the H200 hung on (session 16 and 17): ping-pong consumers walking the persistent
    grid by %nctaid.x while the pair's producer walks units by %nclusterid.x. The consumers take
    fewer units than the producer fills; the producer waits for empty stages forever, the
    consumers wait at the exit cluster barrier for it: the simulator reports the deadlock there
    (and at a shorter K, where the producer's fills fit the ring, the units left unstored)."""
    import ptxsim

    from tkjit.codegen.hopper import lower_consumer
    monkeypatch.setattr(lower_consumer, "walk_stride", lambda k: "%nctaid.x")
    k = _pingpong_pair(monkeypatch, GELU, {"BN": 128})
    with pytest.raises(ptxsim.SimError, match=r"deadlock: every CTA of the cluster waits.*barrier\.cluster\.wait.*"
                                              r"mbarrier\.try_wait"):
        _walk_on_the_simulator(monkeypatch, k, True, (600, 300, 520))
    got, _ = _walk_on_the_simulator(monkeypatch, k, True, (600, 300, 130))
    assert got.isnan().any()
