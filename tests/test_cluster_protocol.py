"""The push exchange of a row block split over a cluster (``cluster_sum {exchange = "push"}``,
codegen/emit_cluster.py) and its compile-time check (codegen/cluster_protocol.py): the PTX and
SASS of the examples, the steps the emitter records, and every way of breaking them that the
check must catch (a store before the peers' mbarriers are initialised, a wrong byte count, a
missing rank, an exchange run twice on its one-phase mbarrier, a read before the partials land, a
CTA that exits while peers still store into it, an exchange some CTAs skip)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import tkjit
from tkjit.codegen import cluster_protocol, emit_cluster
from tkjit.codegen.cluster_protocol import PushProtocol, Step, check_push_protocol
from tkjit.errors import NotAvailableError, PassError, TkError
from tkjit.ir.parser import parse_kernel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _recorded(name: str, k: int, d: int = 8192, moments: bool = False) -> tuple[PushProtocol, object]:
    """The protocol the emitter recorded (and checked) for an example split over k CTAs (a mean
    and its variance in two cluster_sum exchanges unless ``moments``: tests/test_cluster_moments.py)."""
    seen = []
    real = cluster_protocol.check_push_protocol

    def spy(proto):
        seen.append(PushProtocol(proto.k, list(proto.steps)))
        return real(proto)
    emit_cluster.check_push_protocol = spy
    try:
        kernel = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": d},
                            pipeline=f"canonicalize,stream-cols{{cluster={k} moments={str(moments).lower()}"
                                     f"{'' if moments else ' variance=two'}}}")
        kernel.asm["ptx"]
    finally:
        emit_cluster.check_push_protocol = real
    (proto,) = seen
    return proto, kernel


def _sass_ops(sass: str) -> list[str]:
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)


@pytest.mark.parametrize("name, k, reductions", [("rmsnorm", 8, 1), ("layernorm", 4, 2), ("residual_layernorm", 8, 2)])
def test_the_push_exchange_waits_on_one_local_mbarrier(name, k, reductions):
    proto, kernel = _recorded(name, k)
    assert [s.kind for s in proto.steps] == (["init"] * reductions + ["arrive", "cwait"]
                                             + ["push", "wait", "read"] * reductions)
    ptx = kernel.asm["ptx"]
    assert ptx.startswith("// tkjit") and "\n.version 8.1\n" in ptx  # st.async: PTX ISA 8.1
    lines = [ln.strip() for ln in ptx.splitlines()]
    cluster_bars = [ln for ln in lines if ln.startswith("barrier.cluster")]
    assert cluster_bars == ["barrier.cluster.arrive.relaxed.aligned;", "barrier.cluster.wait.acquire.aligned;"]
    assert sum("mbarrier.init.shared::cta.b64" in ln for ln in lines) == reductions
    assert sum(ln.endswith(f"], {k * 64};") and "arrive.expect_tx" in ln for ln in lines) == reductions
    assert sum("try_wait.parity.acquire.cluster" in ln for ln in lines) == reductions
    assert sum("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32" in ln for ln in lines) == 2 * reductions
    assert not any("ld.shared::cluster" in ln for ln in lines)
    wait = lines.index("barrier.cluster.wait.acquire.aligned;")
    assert wait < min(i for i, ln in enumerate(lines) if "st.async" in ln)
    kernel.binary  # noqa: B018
    fn = kernel.metadata["ptxas"]["functions"][0]
    assert fn["spill_store_bytes"] == fn["spill_load_bytes"] == fn["stack_frame_bytes"] == 0
    ops = _sass_ops(kernel.asm["sass"])
    assert ops.count("UCGABAR_ARV") == ops.count("UCGABAR_WAIT") == 1
    assert ops.count("STAS") == 2 * reductions and not any(o.startswith("MEMBAR") for o in ops)
    assert any(d.decision == "cluster_exchange: push" and f"{reductions} exchange(s)" in d.reason
               for d in kernel.decisions)


def test_the_exchange_scratch_lives_through_the_whole_kernel():
    _, kernel = _recorded("layernorm", 4)
    kernel.binary  # noqa: B018
    (shared,) = [d.reason for d in kernel.decisions if d.decision.startswith("shared_memory")]
    assert shared.count("scratch of cluster_sum (whole kernel)") == 2
    spots = re.findall(r"scratch of cluster_sum \(whole kernel\) at (\d+) \((\d+) B\)", shared)
    (a, na), (b, nb) = [(int(x), int(y)) for x, y in spots]
    assert na == nb == 16 + 4 * 64 and (a + na <= b or b + nb <= a)  # one mbarrier and 4 slots each, apart


def _mutate(proto: PushProtocol, fn) -> PushProtocol:
    return PushProtocol(proto.k, [s for s in (fn(s) for s in proto.steps) if s is not None])


def test_the_recorded_protocols_pass_and_every_breakage_is_caught():
    proto, _ = _recorded("residual_layernorm", 8)
    assert check_push_protocol(proto) > 10
    cases = {
        "no cluster wait before the first store": (lambda s: None if s.kind == "cwait" else s,
                                                   "before its initialisation"),
        "no cluster arrive": (lambda s: None if s.kind == "arrive" else s, "deadlock"),
        "armed for k-1 partials": (lambda s: dataclasses.replace(s, nbytes=s.nbytes - 64) if s.kind == "init" else s,
                                   "expects"),
        "a rank left out": (lambda s: dataclasses.replace(s, to=s.to[1:]) if s.kind == "push" else s,
                            "not to each of the 8"),
        "waits on the wrong parity": (lambda s: dataclasses.replace(s, parity=1) if s.kind == "wait" else s,
                                      "before the partials of all CTAs"),
        "no wait": (lambda s: None if s.kind == "wait" else s, "before the partials of all CTAs"),
        "no wait and no read": (lambda s: None if s.kind in ("wait", "read") else s, "after it exited"),
        "the exchange in a loop": (lambda s: dataclasses.replace(s, where=(("for", 1),))
                                   if s.kind in ("push", "wait", "read") and s.exchange == 1 else s,
                                   "overwrites a slot|before the partials of all CTAs"),
        "the exchange under an if": (lambda s: dataclasses.replace(s, where=(("if", 2),))
                                     if s.kind in ("push", "wait", "read") and s.exchange == 0 else s,
                                     "deadlock|after it exited|before the partials"),
    }
    for what, (fn, message) in cases.items():
        with pytest.raises(NotAvailableError, match=message):
            check_push_protocol(_mutate(proto, fn))
            pytest.fail(what)


def test_a_second_init_of_the_same_mbarrier_is_caught():
    proto = PushProtocol(2, [Step("init", 0, nbytes=128), Step("init", 0, nbytes=128), Step("arrive"),
                             Step("cwait"), Step("push", 0, nbytes=64, to=(0, 1)), Step("wait", 0), Step("read", 0)])
    with pytest.raises(NotAvailableError, match="initialised twice"):
        check_push_protocol(proto)


LOOPED_IR = """kernel @looped(%Y: gl<f32>[R, 64]) {
  %R = dim {name = "R"} : i32
  %c16 = const {value = 16} : i32
  %0 = cdiv %R, %c16 : i32
  blocks {cluster = 4} %0 {
  ^(%i: i32):
    %r = cluster_rank : i32
    %t = fill {value = 1.0} : rt<f32>[16, 16]
    %z = zeros : cv<f32>[16]
    %a = const {value = 0} : i32
    %b = const {value = 2} : i32
    %one = const {value = 1} : i32
    %acc = for %a, %b, %one, %z : cv<f32>[16] {
    ^(%c: i32, %p: cv<f32>[16]):
      %v = row_sum %t : cv<f32>[16]
      %s = cluster_sum {exchange = "push"} %v : cv<f32>[16]
      %n = add %p, %s : cv<f32>[16]
      yield %n
    }
    %o = add_row %t, %acc : rt<f32>[16, 16]
    store %Y, %o, %i, %r
  }
}
"""


def test_a_push_exchange_in_a_loop_is_refused_at_its_line():
    kernel = tkjit.compile(LOOPED_IR, filename="looped.tkir", pipeline="")
    with pytest.raises(NotAvailableError, match="cluster exchange protocol") as e:
        kernel.asm["ptx"]
    assert "looped.tkir:16:" in str(e.value)
    plain = tkjit.compile(LOOPED_IR.replace(' {exchange = "push"}', ""), filename="looped.tkir", pipeline="")
    assert "barrier.cluster.arrive.release.aligned" in plain.asm["ptx"]  # the barrier form runs anywhere


def test_the_option_and_the_attribute_are_checked():
    with pytest.raises(PassError, match="exchange must be"):
        tkjit.load(EXAMPLES / "rmsnorm.tk", constants={"D": 8192},
                   pipeline="canonicalize,stream-cols{exchange=pull}").asm["after:stream-cols"]
    with pytest.raises(TkError, match="exchange must be one of"):
        parse_kernel(LOOPED_IR.replace('"push"', '"pull"'))
    barrier = tkjit.load(EXAMPLES / "rmsnorm.tk", constants={"D": 8192},
                         pipeline="canonicalize,stream-cols{exchange=barrier}")
    assert 'cluster_sum {exchange = "barrier"}' in barrier.asm["after:stream-cols"]
    assert "st.async" not in barrier.asm["ptx"] and "\n.version 8.0\n" in barrier.asm["ptx"]
