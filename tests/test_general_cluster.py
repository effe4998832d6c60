"""A row block split over a cluster (stream-cols' ``cluster``: the norms and softmax at D = 4096 and
8192) through the general sm_90a lowering, on the CPU (codegen/hopper/lower_cluster.py): the
register-tile backend's cluster emitters behind the fragment-layout interface, the cluster launch
(``.reqnctapercluster k``, the grid k x the blocks, the tile from ``%clusterid.x``), each exchange's
mbarrier and slots in shared memory of their own, and the cluster barriers and exchanges as
protocol steps (``ClusterArrive``, ``ClusterExchange``, ``ClusterWait``): read from the
async-schedule IR, linted in the PTX, modelled by the one-CTA sync check, the exchanges checked
across CTAs by cluster_protocol.py. ``lowering='auto'`` keeps these kernels on the register-tile
backend until session 18; auto takes the general lowering since)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.errors import NotAvailableError

from test_general_no_product import REGISTER_TILE, _norm_case, _sass, _simulated, assert_simulated_agree

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NORMS = ["rmsnorm", "residual_layernorm", "layernorm", "softmax"]
EXCHANGES = {"rmsnorm": ["cluster_sum"], "softmax": ["cluster_max", "cluster_sum"],
             "layernorm": ["cluster_sum", "cluster_sum"], "residual_layernorm": ["cluster_moments"]}
"""The exchanges stream-cols' default split gives each example (its ops, in program order)."""


def _tma_fill():
    from tkjit.passes import DEFAULT_PIPELINE
    return DEFAULT_PIPELINE.replace("warp-spec", "warp-spec{fill=tma}", 1)


def _general(name, d, **extra):
    """The example through the general lowering, its row block filled by the producer's TMA unless
    ``pipeline`` says otherwise (the path with a producer and its cluster steps; fill=auto's
    consumer fill is tested below)."""
    extra.setdefault("pipeline", _tma_fill())
    return tkjit.load(EXAMPLES / f"{name}.tk", constants={"C" if name == "softmax" else "D": d},
                      lowering="general", require_hopper=True, cache=False, **extra)


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("d", [4096, 8192])
def test_the_cluster_split_takes_the_general_lowering(name, d):
    k = _general(name, d)
    ctas = d // 1024  # stream-cols' cluster=auto: slices of 1024 columns
    sass = _sass(k)
    md, ptx = k.metadata, k.asm["ptx"]
    assert md["lowering"] == "general" and md["cluster"] == [ctas, 1, 1]
    assert md["grid"] == [["mul", ["cdiv", ["dim", "R"], 16], ctas]]
    assert f".reqnctapercluster {ctas}, 1, 1" in ptx and ".version 8.1" in ptx
    assert ptx.count("%clusterid.x") == 2  # each role's tile: its cluster's
    assert "UTMALDG" in sass and not re.search(r"\b[HQ]GMMA", sass)
    assert not re.search(r"\b(LDL|STL)\b", sass), "the general lowering spilled"
    report = md["ptxas"]
    assert not [m for m in report["messages"] if m["level"] == "warning"], report["log"]
    assert all(f["spill_store_bytes"] == 0 for f in report["functions"])
    text = str(k.explain())
    assert f"cluster: {ctas}" in text and "schedule dropped" not in text
    assert "cluster_exchange: push" in text  # the cross-CTA check of the recorded steps ran


@pytest.mark.parametrize("name", NORMS)
def test_every_cluster_barrier_and_exchange_is_a_protocol_step(name):
    """The protocol lint (test_general_lowering.py): every barrier.cluster, mbarrier init, arm and
    wait of the exchanges is inside the mark of a step read from the async-schedule IR."""
    from test_general_lowering import protocol_lint
    k = _general(name, 4096)
    assert protocol_lint(k) == []
    ir = k.asm["after:async-schedule"]
    assert ir.count("cluster_arrive") == 2 and ir.count("cluster_wait;") == 1
    assert ir.count("cluster_exchange {") == len(EXCHANGES[name])
    ptx = k.asm["ptx"]
    for line in ("barrier.cluster.arrive.relaxed.aligned;", "barrier.cluster.wait.acquire.aligned;",
                 "barrier.cluster.wait.acquire;", "fence.mbarrier_init.release.cluster;"):
        assert line in ptx, line


@pytest.mark.parametrize("name", NORMS)
def test_the_protocol_opens_with_the_arrival_and_the_first_exchange_waits(name):
    from tkjit.passes import sync_protocol as sp
    from tkjit.passes.async_schedule import protocol_from_ir
    k = _general(name, 8192)
    proto = protocol_from_ir(k.async_ir)
    ops = EXCHANGES[name]
    assert proto.producer[0] == sp.ClusterArrive() and proto.producer[-1] == sp.ClusterWait()
    assert proto.consumer[0] == sp.ClusterArrive(len(ops))
    (tiles,) = [st for st in proto.consumer if isinstance(st, sp.Tiles)]
    exchanges = [st for st in tiles.body if isinstance(st, sp.ClusterExchange)]
    assert exchanges == [sp.ClusterExchange(op, 8, i == 0) for i, op in enumerate(ops)]


def test_the_sync_check_models_the_cluster_steps():
    """In the one-CTA model an exchange is a meeting of the consumers (the peers mirror this CTA);
    the arrival must open each program (it publishes the mbarrier inits before any remote store),
    and the wait of the producer orders nothing in one CTA."""
    import dataclasses

    from tkjit.passes import sync_protocol as sp
    from tkjit.passes.async_schedule import protocol_from_ir
    from tkjit.passes.sync_check import check_protocol
    from tkjit.passes.sync_unroll import ARRIVE, WAIT, Layout, unroll
    k = _general("softmax", 4096)
    proto = protocol_from_ir(k.async_ir)
    layout = Layout.of(proto)
    actions = unroll(proto, proto.consumer, (0,), layout)
    meets = [a.op for a in actions if a.arg == layout.sync_bar]
    scratch = sum(isinstance(st, sp.ScratchSync) for st in sp.all_steps(proto.consumer))
    assert meets == [ARRIVE, WAIT] * (scratch + 2)  # the scratch barriers and the two exchanges
    check_protocol(proto)
    late = dataclasses.replace(proto, consumer=(proto.consumer[1], proto.consumer[0]))
    with pytest.raises(ValueError, match="ClusterArrive must come before"):
        unroll(late, late.consumer, (0,), Layout.of(late))


def test_an_exchange_without_the_arrival_step_is_refused():
    """Delete the consumers' ``cluster_arrive`` from the IR: nothing would initialise the exchanges'
    mbarriers, and the lowering says so instead of printing a kernel that hangs."""
    from tkjit.codegen.hopper.lower import lower_kernel
    k = _general("rmsnorm", 4096)
    consumers = next(op for op in k.async_ir.body.ops if op.NAME == "consumers")
    (arrive,) = [op for op in consumers.regions[0].ops if op.NAME == "cluster_arrive"]
    arrive.parent.ops.remove(arrive)
    with pytest.raises(NotAvailableError, match="no ClusterArrive step"):
        lower_kernel(k.ir, {}, k.async_ir)


def test_the_exchanges_the_lowering_records_are_checked_across_ctas(monkeypatch):
    """The general lowering's exchanges go through the register-tile backend's emitter, which
    records each cross-CTA step and checks them over every interleaving (cluster_protocol.py):
    drop the recorded mbarrier waits and the read before the partials landed is caught."""
    from tkjit.codegen import cluster_protocol
    from tkjit.codegen.hopper.lower import lower_kernel
    k = _general("rmsnorm", 4096)
    add = cluster_protocol.PushProtocol.add

    def no_wait(self, kind, **kw):
        if kind != "wait":
            add(self, kind, **kw)
    monkeypatch.setattr(cluster_protocol.PushProtocol, "add", no_wait)
    with pytest.raises(NotAvailableError, match="reads the slots before the partials of all CTAs landed"):
        lower_kernel(k.ir, {}, k.async_ir)


def test_each_exchange_has_shared_memory_of_its_own():
    """Peers store into an exchange's slots whenever they reach it: its mbarrier and slots are
    placed for the whole kernel, apart from each other and from the cross-warp scratch."""
    k = _general("softmax", 8192)
    from tkjit.codegen.hopper.lower import LoweredKernel
    lk = LoweredKernel(k.ir, {}, k.async_ir)
    regions = sorted((r.offset, r.offset + r.size) for r in lk.scratch.scratch.values())
    assert len(set(regions)) >= 3  # the shared cross-warp scratch, and one region per exchange
    exchanges = [(what, r) for what, r, _ in lk.scratch.items if what.startswith("exchange of")]
    assert [w for w, _ in exchanges] == ["exchange of cluster_max (whole kernel)", "exchange of cluster_sum (whole kernel)"]
    (_, ra), (_, rb) = exchanges
    assert not ra.overlaps(rb) and ra.offset % 16 == 0 and rb.offset % 16 == 0
    assert lk.smem_bytes >= rb.offset + rb.size


def test_what_the_lowering_does_not_take_is_refused_at_its_op():
    """The barrier exchange (barrier.cluster per exchange: the producer warp would never meet
    there) is refused at the exchange; so is the copying producer (option unaligned_rows)."""
    from tkjit.passes import DEFAULT_PIPELINE
    pipeline = DEFAULT_PIPELINE.replace("stream-cols", "stream-cols{exchange=barrier}", 1)
    with pytest.raises(NotAvailableError, match="exchange = \"barrier\""):
        _general("rmsnorm", 4096, pipeline=pipeline).asm["ptx"]
    from tkjit.codegen.hopper.lower import refusal
    k = _general("rmsnorm", 4096)
    why = refusal(k.ir, {"unaligned_rows": True, "lowering": "general"})
    assert why is not None and "copying producer" in why.why


@pytest.mark.parametrize("name, d", [("rmsnorm", 4096), ("residual_layernorm", 8192), ("softmax", 4096)])
def test_auto_takes_the_cluster_split_through_the_general_lowering_and_says_why(name, d):
    """Since session 18 (the consumers' fill in flight, registers left to ptxas, no alignment
    slack: 0.98-1.05x the register-tile backend, lower_layout.FILL_MEASURED) auto takes the
    general lowering for a row block split over a cluster: the very PTX of lowering=general."""
    auto = tkjit.load(EXAMPLES / f"{name}.tk", constants={"C" if name == "softmax" else "D": d}, cache=False)
    assert auto.metadata.get("lowering") == "general" and auto.metadata["cluster"] == [d // 1024, 1, 1]
    assert auto.asm["ptx"] == _general(name, d, pipeline=None).asm["ptx"]
    assert "a row block split over a cluster included" in str(auto.explain())


@pytest.mark.parametrize("fill", ["tma", "auto"])
@pytest.mark.parametrize("name, r, d", [("rmsnorm", 20, 4096), ("softmax", 9, 8192), ("layernorm", 17, 4096),
                                        ("residual_layernorm", 20, 4096)])
def test_the_cluster_split_agrees_on_the_ptx_simulator(name, r, d, fill):
    """The general lowering's PTX on the simulator, each cluster's CTAs run together
    (tests/ptxsim.py: mapa, st.async into a peer's shared memory completing its mbarrier's bytes,
    the cluster barrier over every thread of the cluster), at row counts that are not multiples of
    the 16-row blocks, the row block filled by the producer's TMA (``warp-spec{fill=tma}``) or by
    the consumers (auto): bit for bit the register-tile backend's PTX of the same IR,
    within a bf16 unit of the interpreter, nothing written outside the outputs."""
    src = (EXAMPLES / f"{name}.tk").read_text()
    constants = {"C" if name == "softmax" else "D": d}
    general = tkjit.compile(src, lowering="general", require_hopper=True, cache=False, constants=constants,
                            pipeline=_tma_fill() if fill == "tma" else None)
    assert ("cp.async.bulk.tensor" in general.asm["ptx"]) == (fill == "tma")
    auto = tkjit.compile(src, cache=False, constants=constants, pipeline=REGISTER_TILE)  # (the reference)
    assert ".reqnctapercluster" in general.asm["ptx"] and "register-tile" in auto.asm["ptx"].splitlines()[0]
    args, outs = _norm_case(name, r, d)
    assert_simulated_agree(general, auto, args, outs)


def test_a_remote_store_before_the_peers_init_is_caught_on_the_simulator():
    """Without the first exchange's cluster barrier wait a CTA pushes into a peer whose exchange
    mbarrier is not initialised yet: the simulator says so."""
    import dataclasses

    from ptxsim import SimError
    k = _general("rmsnorm", 4096)
    ptx = k.asm["ptx"]
    assert ptx.count("barrier.cluster.wait.acquire.aligned;") == 1
    broken = ptx.replace("barrier.cluster.wait.acquire.aligned;", "", 1)
    args, outs = _norm_case("rmsnorm", 20, 4096)
    fake = dataclasses.make_dataclass("K", ["asm", "metadata", "_result"])(
        {"ptx": broken}, k.metadata, k._result)
    with pytest.raises(SimError, match="used before its init"):
        _simulated(fake, args, outs)


def test_the_consumers_fill_a_split_row_block_by_default_and_the_tma_fill_when_pinned():
    """warp-spec{fill=auto} lets the consumers fill their slice over a cluster too (measured faster
    than the TMA fill there) and says why: no producer, so neither the producer's cluster steps
    nor its threads, the consumers' arrival and exchanges as before; {fill=tma} keeps the
    producer's 288 threads."""
    from test_general_lowering import protocol_lint
    from tkjit.passes import sync_protocol as sp
    from tkjit.passes.async_schedule import protocol_from_ir
    pinned = _general("rmsnorm", 4096)
    assert pinned.metadata["block"] == [288, 1, 1]
    assert "warp-spec{fill=tma}" in str(pinned.explain())
    k = _general("rmsnorm", 4096, pipeline=None)
    assert "auto: the consumers fill their CTA's slice of the row block themselves" in str(k.explain())
    assert k.metadata["block"] == [256, 1, 1] and k.metadata["cluster"] == [4, 1, 1]
    proto = protocol_from_ir(k.async_ir)
    assert not any(isinstance(st, (sp.ClusterArrive, sp.ClusterWait)) for st in proto.producer)
    assert proto.consumer[0] == sp.ClusterArrive(1)
    assert protocol_lint(k) == []
    ptx = k.asm["ptx"]
    assert "cp.async.cg.shared.global" in ptx and "cp.async.bulk.tensor" not in ptx
    sass = _sass(k)
    assert "LDGSTS" in sass and "UTMALDG" not in sass and not re.search(r"\b(LDL|STL)\b", sass)
