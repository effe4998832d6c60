"""The async-schedule pass (tkjit/passes/async_schedule.py): the schedule as IR.

For every kernel of the general corpus and the attention/MLP examples: the rewritten IR prints,
parses back to the same text, gives back the mbarrier pass's protocol exactly, and its walk
(``items_of``) is interleave.py's; the CPU roles executor runs the IR *parsed back from its text*
(roles, rings, waits read from the IR alone) in several interleavings and must match the plain
interpreter, as tests/test_roles.py checks for the protocol-driven run. Textual IR in/out:
tests/ir/async-schedule/*.tkir.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.interpreter.roles import ScheduleError, run_roles
from tkjit.ir.parser import parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.passes import sync_protocol as sp
from tkjit.passes.async_schedule import items_of, protocol_from_ir, rewrite, schedule_from_ir
from tkjit.passes.mbarrier import schedule_of

from general_corpus import CASES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SEEDS = (0, 1, 2)


def _same(outputs, mine, ref) -> bool:
    return all(torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)) for i in outputs)


def _copy(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _async(k):
    """The compiled kernel's async-schedule IR, printed and parsed back."""
    text = k.asm["after:async-schedule"]
    parsed = parse_kernel(text)
    assert print_kernel(parsed) == text
    return parsed


def test_the_default_pipeline_ends_with_the_rewrite_and_the_emitter_keeps_the_tile_program():
    case = CASES[0]
    k = tkjit.compile(case.source, cache=False)
    assert k._result.pipeline.endswith(",mbarrier,async-schedule")
    text = k.asm["after:async-schedule"]
    assert "producer {" in text and "consumers {count = " in text and "tma_load {ring = " in text
    assert k.ir is k.async_ir.tile_program  # the kernel the emitter reads, as before the pass
    assert print_kernel(k.async_ir) == text
    assert "consumers {" not in print_kernel(k.ir)
    assert any(d.pass_name == "async-schedule" and "protocol steps" in d.decision for d in k._result.decisions)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_ir_is_the_protocol(case):
    k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
    parsed = _async(k)
    sched = schedule_of(k.ir)
    assert protocol_from_ir(k.async_ir) == sched.protocol  # the rings' source locations too
    assert _plain(protocol_from_ir(parsed)) == _plain(sched.protocol)
    back = schedule_from_ir(parsed)
    assert sorted(back.load_of.values()) == sorted(sched.load_of.values())
    assert sorted(back.loop_of.values()) == sorted(sched.loop_of.values())
    assert len(back.level2) == len(sched.level2)
    assert sorted(back.store_of) == sorted(sched.store_of)


def _plain(proto: sp.Protocol) -> sp.Protocol:
    """The protocol without its rings' source locations (IR parsed back from text has its own spans)."""
    import dataclasses
    return dataclasses.replace(proto, rings=tuple(dataclasses.replace(r, where="") for r in proto.rings))


def _walk_names(items):
    return [(kind, type(st).__name__ if st is not None else None, op.NAME if op is not None else None)
            for kind, st, op in items]


def test_the_walk_read_from_the_ir_is_interleaves():
    """The tile body's and each trip's items, read back from the IR, are interleave.py's."""
    from tkjit.codegen.hopper.interleave import body_ops, interleave, tile_anchor, trip_anchor
    from tkjit.passes.async_schedule import blocks_of
    from tkjit.passes.hopper import block_loop
    k = tkjit.compile(CASES[0].source, cache=False)
    sched = schedule_of(k.ir)
    (tiles,) = [st for st in sched.protocol.consumer if isinstance(st, sp.Tiles)]
    ring_of_load = {op: names[0] for op, names in sched.load_of.items()}
    loop_of = {ring: loop for loop, ring in sched.loop_of.items()}
    want = interleave(list(block_loop(k.ir).regions[0].ops), tiles.body,
                      tile_anchor(ring_of_load, loop_of, list(sched.staged_over_rings), sched.store_of))
    got = items_of(list(blocks_of(k.async_ir).regions[0].ops))
    assert _walk_names(got) == _walk_names([i for i in want if i[2] is None or i[2].NAME != "yield"])
    assert [st for _, st, _ in got] == [st for _, st, op in want if op is None or op.NAME != "yield"]
    (loop,) = sched.loop_of
    (ift,) = [st for st in tiles.body if isinstance(st, sp.IfTrips)]
    trip = interleave(body_ops(loop.regions[0]), ift.body[0].body, trip_anchor(loop, sched.store_of))
    (loop2,) = schedule_from_ir(k.async_ir).loop_of
    assert _walk_names(items_of(loop2.regions[0].ops)) == _walk_names(trip)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_rewritten_ir_runs_as_the_interpreter(case):
    k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
    parsed = _async(k)
    torch.manual_seed(0)
    args = case.make(case.cpu_shape, "cpu")
    ref = _copy(args)
    k(*ref)
    for seed in SEEDS:
        mine = _copy(args)
        run_roles(parsed, mine, seed=seed)
        assert _same(case.outputs, mine, ref), f"{case.name}: schedule {seed} of the rewritten IR differs"


ATTENTION = [("attention_nol", {"CAUSAL": True}), ("attention_softcap", {}), ("attention_window", {}), ("mlp", {}),
             ("attention", {"D": 64}), ("attention", {"D": 64, "CAUSAL": True}), ("attention", {"D": 128}),
             ("attention_nol", {"BKV": 128})]


@pytest.mark.parametrize("name,constants", ATTENTION,
                         ids=[n + "".join(f"-{k}{v}" for k, v in c.items()) for n, c in ATTENTION])
def test_attention_and_the_mlp_run_from_the_rewritten_ir(name, constants):
    """Level 2 (``mma_hold``), split rings, a one-shot Q ring, own trips (causal), a register A."""
    k = tkjit.load(EXAMPLES / f"{name}.tk", cache=False, constants=constants or None,
                   lowering="general" if name == "attention" else None)
    parsed = _async(k)
    assert protocol_from_ir(k.async_ir) == schedule_of(k.ir).protocol
    assert _plain(protocol_from_ir(parsed)) == _plain(schedule_of(k.ir).protocol)
    torch.manual_seed(0)
    if name == "mlp":
        m, d, f = 200, 128, 192
        args = [torch.randn(m, d).bfloat16(), (torch.randn(d, f) / 8).bfloat16(),
                (torch.randn(f, d) / 8).bfloat16(), torch.full((m, d), float("nan")).bfloat16()]
        outputs = (3,)
    else:
        b, h, hkv, n, d = 1, 2, 1, 300, constants.get("D", 128)
        q, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, hkv, hkv))
        args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), d ** -0.5]
        if name == "attention":
            args.insert(4, torch.full((b, h, n), float("nan")))
        if name == "attention_softcap":
            args.append(20.0)
        if name == "attention_window":
            args.append(96)
        outputs = (3, 4) if name == "attention" else (3,)
    ref = _copy(args)
    k(*ref)
    for seed in SEEDS[:2]:
        mine = _copy(args)
        run_roles(parsed, mine, seed=seed)
        assert _same(outputs, mine, ref), f"{name}: schedule {seed} of the rewritten IR differs"


def test_every_example_with_a_schedule_is_rewritten_and_read_back():
    """Every example the Hopper passes schedule: the rewrite prints, parses back and is its protocol."""
    seen = 0
    for path in sorted(EXAMPLES.glob("*.tk")):
        k = tkjit.load(path, cache=False)
        if "consumers" not in k.ir.attrs:
            continue
        assert protocol_from_ir(k.async_ir) == schedule_of(k.ir).protocol, path.name
        assert _plain(protocol_from_ir(_async(k))) == _plain(schedule_of(k.ir).protocol), path.name
        seen += 1
    assert seen >= 10


def _mutated(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_a_release_moved_before_the_wait_in_the_ir_is_caught():
    """Edit the *IR text*: each trip releases its own stage right after issuing the wgmma that
    reads it (before any wait), instead of the previous stage once wait_group 1 retired its
    wgmma: the producer may refill the stage under the wgmma, and some schedule of that IR reads
    the wrong tiles. (tests/test_roles.py makes the same change to the protocol object.)"""
    case = CASES[0]
    k = tkjit.compile(case.source, cache=False)
    text = k.asm["after:async-schedule"]
    text = _mutated(text, "        not_first {\n          ring_release {ring = \"k\", which = \"prev\"};\n        }\n", "")
    text = _mutated(text, "        mma_wait {pending = 0};\n        ring_release {ring = \"k\", which = \"prev\"};\n",
                    "        mma_wait {pending = 0};\n")
    lines = text.splitlines()
    at = next(n for n, line in enumerate(lines) if "= mma_AB" in line)
    parsed = parse_kernel("\n".join(lines[:at + 1] + ['        ring_release {ring = "k"};'] + lines[at + 1:]) + "\n")
    torch.manual_seed(0)
    args = case.make({"M": 128, "N": 256, "K": 640}, "cpu")
    ref = _copy(args)
    k(*ref)
    caught = 0
    for seed in range(8):
        mine = _copy(args)
        try:
            run_roles(parsed, mine, seed=seed)
        except ScheduleError:
            caught += 1
            continue
        caught += not _same(case.outputs, mine, ref)
    assert caught, "no schedule of the edited IR noticed the early release"


def test_every_protocol_step_has_an_op_with_its_fields():
    """One op class per protocol step; its attributes are the step's fields (names: one string)."""
    import dataclasses
    import typing
    from tkjit.ir.ops.async_ops import NAMES, STEP_OP_NAMED
    steps = [*typing.get_args(sp.Event), *sp.BLOCKS]
    assert sorted(STEP_OP_NAMED) == sorted({cls.__name__ for cls in steps})
    for cls in steps:
        op = STEP_OP_NAMED[cls.__name__]
        fields = [f for f in dataclasses.fields(cls) if f.name not in ("body", "orelse")]
        assert list(op.FIELDS) == [f.name for f in fields], cls.__name__
        for f in fields:
            want = {"str": str, "int": int, "bool": bool, "tuple[str, ...]": NAMES}[f.type]
            assert op.FIELDS[f.name] == want, (cls.__name__, f.name)
            assert (f.name in op.OPTIONAL) == (f.default is not dataclasses.MISSING), (cls.__name__, f.name)
        regions = sum(1 for f in dataclasses.fields(cls) if f.name in ("body", "orelse"))
        assert op.NUM_REGIONS == regions, cls.__name__


def test_a_dropped_wait_in_the_ir_is_caught():
    """Drop level 2's first-product waits from the attention trip in the IR text: the softmax reads S
    while its wgmma may still run."""
    k = tkjit.load(EXAMPLES / "attention_nol.tk", constants={"BKV": 128}, cache=False)
    text = k.asm["after:async-schedule"]
    text = _mutated(text, "first_trip {\n          mma_wait {pending = 0};\n        }\n", "")
    text = _mutated(text, "not_first {\n          mma_wait {pending = 1};\n        }\n", "")
    parsed = parse_kernel(text)
    q, kk, v = (torch.randn(1, 1, 300, 128).bfloat16() for _ in range(3))
    with pytest.raises(ScheduleError, match="not waited for"):
        run_roles(parsed, [q, kk, v, torch.empty(1, 1, 300, 128).bfloat16(), 0.1])


def test_rewrite_keeps_its_input():
    k = tkjit.compile(CASES[0].source, cache=False)
    before = print_kernel(k.ir)
    again = rewrite(k.ir)
    assert print_kernel(k.ir) == before and again.tile_program is k.ir
    assert print_kernel(again) == k.asm["after:async-schedule"]


def test_the_emitter_walks_the_rewritten_ir(monkeypatch):
    """The general lowering takes its consumers' walk from the async-schedule IR: with interleave.py
    and pipelined_trip unusable it still emits the same PTX (the GEMM and the level-2 attention);
    and an edit of that IR (a trip's wait moved ahead of the wgmma it waits for) is what it prints."""
    from tkjit.codegen.hopper import lower_consumer
    from tkjit.codegen.hopper.lower import lower_kernel
    kernels = [tkjit.compile(CASES[0].source, cache=False),
               tkjit.load(EXAMPLES / "attention_nol.tk", constants={"BKV": 128}, cache=False, lowering="general")]
    ptx = [k.asm["ptx"] for k in kernels]
    assert all(k.metadata["lowering"] == "general" for k in kernels)

    def refuse(*args, **kw):
        raise AssertionError("the emitter called interleave.py")
    monkeypatch.setattr(lower_consumer, "interleave", refuse)
    monkeypatch.setattr(lower_consumer, "pipelined_trip", refuse)
    for k, want in zip(kernels, ptx):
        assert lower_kernel(k.ir, {}, k.async_ir)[0] == want
    with pytest.raises(AssertionError, match="interleave"):
        lower_kernel(kernels[0].ir, {})  # without the IR it needs interleave.py
    k = kernels[0]
    (loop,) = [op for op in k.async_ir.walk() if op.NAME == "for"]
    ops = loop.regions[0].ops
    wait = next(op for op in ops if op.NAME == "mma_wait")
    issue = next(op for op in ops if op.NAME == "mma_issue")
    ops.remove(wait)
    ops.insert(ops.index(issue), wait)
    edited = lower_kernel(k.ir, {}, k.async_ir)[0]
    assert edited != ptx[0]
    body = edited[edited.index("wgmma.wait_group.sync.aligned 1;") - 400:]
    assert body.index("wgmma.wait_group.sync.aligned 1;") < body.index("wgmma.mma_async")


def test_the_programs_the_emitter_walks_are_read_from_the_ir():
    """The producer's and the consumers' programs the general lowering prints come from the rewrite
    (``protocol_from_ir``): an edited ``expect_tx`` in the IR's producer region is what the PTX arms."""
    from tkjit.codegen.hopper.lower import lower_kernel
    k = tkjit.compile(CASES[0].source, cache=False)
    (arm,) = [op for op in k.async_ir.walk() if op.NAME == "expect_tx"]
    want = arm.attrs["nbytes"]
    assert f", {want};" in k.asm["ptx"]
    arm.attrs["nbytes"] = want + 16
    ptx = lower_kernel(k.ir, {}, k.async_ir)[0]
    assert f", {want + 16};" in ptx and ptx != k.asm["ptx"]


def test_a_step_the_ir_cannot_say_leaves_the_kernel_and_says_why(monkeypatch):
    """A protocol step with no op class (one added to sync_protocol.py before its op): the pass
    leaves the kernel as it is and logs why; the PTX is the protocol-driven one, unchanged."""
    from tkjit.ir.ops import async_ops
    case = next(c for c in CASES if c.name == "gemm_bias_pingpong")
    want = tkjit.compile(case.source, cache=False).asm["ptx"]
    monkeypatch.setattr(async_ops, "STEP_OP_NAMED", {k: v for k, v in async_ops.STEP_OP_NAMED.items() if k != "TurnWait"})
    k = tkjit.compile(case.source, cache=False)
    assert k.async_ir is None and "consumers {" not in k.asm["opt"]
    assert any("not rewritten as IR" in d.decision and "TurnWait" in d.reason for d in k._result.decisions)
    assert k.asm["ptx"] == want



GENERATED_157 = """kernel gen157(s0: f32, X1: gl<f32>[B, M, N], n2: i32, Y3: gl<f32>[B, J, M], X4: gl<bf16>[B, M, N], X5: gl<f16>[B, K, M], X6: gl<f16>[B, N, K], X7: gl<f16>[B, M, N], Y8: gl<f32>[B, I, N], Y9: gl<f32>[B, J, M]) {
  for (b, i, j) in blocks(B, M / 16, N / 16) {
    t1: rt<f32>[16, 16] = X1.tile(b, i, j)
    for l2 in 0 .. 1 {
      r3: rv<f32>[16] = col_max(t1)
      x4: f32 = tanh((s0 - s0))
      t1 = tanh(((t1 * cvt<f32>(l2)) * cvt<f32>(i)))
    }
    t5: rt<f32>[16, 16] = tanh(max(causal_mask(-t1, i * 16, 5), -8.0))
    c6: cv<f32>[16] = cos(row_min(t5))
    Y3.tile(b, j, i) = c6
    t7: rt<f32>[16, 16] = t5
    for l8 in 0 .. 1 {
      t5 = mul_row(t1, c6)
      r9: rv<f32>[16] = col_max(t5)
      sh11: st<bf16>[16, 16] = X4.tile(b, i, j)
      if l8 >= 0 {
        t10: rt<f32>[16, 16] = sh11
        c6 = select(row_max(t10) <= s0, c6, c6)
      }
    }
    acc12: rt<f32>[16, 16] = zeros()
    for k13 in 0 .. K / 16 {
      a14: rt<f16>[16, 16] = X5.tile(b, k13, i)
      b15: rt<f16>[16, 16] = X6.tile(b, j, k13)
      acc12 = mma_AtBt(a14, b15, acc12)
    }
    if !(j > 0) {
      r16: rv<f32>[16] = cos(col_max(acc12))
      r16 = r16
    } else {
      x17: f32 = cvt<f32>(i)
      c6 = row_min(t1)
    }
    for l18 in 0 .. 3 {
      x19: f32 = 0.5
      c6 = row_min(t7)
    }
    x20: f32 = 0.75
    t21: rt<f32>[16, 16] = X7.tile(b, i, j)
    r22: rv<f32>[16] = col_min(t21)
    x23: f32 = s0
    r22 = r22
    Y8.tile(b, i, j) = r22
    Y9.tile(b, j, i) = c6
  }
}
"""
"""tkjit.testing.gen's seed 157: a ring loop whose stage ordinary ops read (its Mma step stands
for no product), beside a product loop."""


def test_a_protocol_step_standing_for_no_op_leaves_the_kernel_unrewritten():
    """interleave.py has no place for that step (the loop's ring tile is read into registers in
    an 'if' of the loop: the mbarrier pass counts it a reader of the trip, but no op of the trip
    stands for it; the read itself in the loop's body is the trip's Read step since session 18):
    the pass leaves the kernel, logs why, and the compile goes on as without the pass (the
    register-tile backend, as the general lowering refuses the kernel)."""
    k = tkjit.compile(GENERATED_157, cache=False)
    assert k.async_ir is None and "consumers {" not in k.asm["opt"]
    d, checked = [d for d in k._result.decisions if d.pass_name == "async-schedule"]
    assert d.decision == "the schedule is not rewritten as IR" and "stands for no op" in d.reason
    assert "sync protocol checked" in checked.decision and "mbarrier pass's protocol object" in checked.reason
    assert k.metadata["backend"] == "mma.sync"


GEMM = (EXAMPLES / "gemm.tk").read_text()


def _close_runs(k, shape, ctas=3, exact_bits=False):
    """The rewritten IR, parsed back, run as its roles against the plain interpreter (split-K and
    stream-K add the partials in another order: to rounding; a multicast pair: bit for bit)."""
    from tkjit.interpreter.roles import Roles
    parsed = _async(k)
    torch.manual_seed(0)
    m, n, kk = shape
    a, b = torch.randn(m, kk).bfloat16(), torch.randn(kk, n).bfloat16()
    ref = torch.full((m, n), float("nan")).bfloat16()
    k(a, b, ref)
    runs = []
    for seed in (0, 1):
        c = torch.full((m, n), float("nan")).bfloat16()
        roles = Roles(parsed, [a, b, c], seed, ctas)
        roles.run()
        runs.append(roles)
        if exact_bits:
            assert torch.equal(c.float().nan_to_num(7.0), ref.float().nan_to_num(7.0)), seed
        else:
            assert not torch.isnan(c).any() and torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=5e-2)
    return runs


def test_split_k_runs_from_the_rewritten_ir():
    k = tkjit.compile(GEMM, filename="gemm.tk", constants={"SPLIT": 2, "BM": 64, "BN": 64}, cache=False)
    assert "split_reduce {ring = " in k.asm["opt"]
    (roles, _) = _close_runs(k, (100, 130, 520))
    assert roles.split == 2 and roles.split_loop is not None


def test_stream_k_runs_from_the_rewritten_ir():
    pipeline = tkjit.passes.default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}")
    k = tkjit.compile(GEMM, filename="gemm.tk", pipeline=pipeline, constants={"BM": 64, "BN": 64}, cache=False)
    assert "stream_k_fixup {ring = " in k.asm["opt"]
    for roles in _close_runs(k, (130, 300, 320), ctas=4):
        assert roles.stream_k is not None and len(roles.stream_k.partials) > 0


def test_a_multicast_pair_runs_from_the_rewritten_ir():
    pipeline = tkjit.passes.default_pipeline("sm_90a").replace("grid", "grid{multicast=2}")
    k = tkjit.compile(GEMM, filename="gemm.tk", pipeline=pipeline, constants={"BM": 64, "BN": 64}, cache=False)
    text = k.asm["opt"]
    assert "cluster_sync {at = \"start\"}" in text and "halves = " in text and "cluster = 2" in text
    (roles, _) = _close_runs(k, (192, 130, 200), exact_bits=True)
    assert roles.pair.ctas == 2 and roles.pair.loads


def _example_ids():
    import test_examples_interpreter as examples
    return list(examples.CASES)


BASE_2 = {"attention_exp"}
"""Examples whose exp scale-fold takes in base 2 after the scale (the plain interpreter runs the IR
before it): the protocol-driven run differs from the interpreter by rounding too."""


@pytest.mark.parametrize("name", _example_ids())
def test_every_example_on_the_general_lowering_runs_from_the_rewritten_ir(name):
    """Every example (as written, lowering='general'; persistent ones over two CTAs, so two-slot
    one-shot rings wrap) that the general lowering takes: its rewrite, parsed back from text, run
    as its roles in two interleavings, gives bit for bit what the protocol-driven run of the tile
    program gives (tests/test_roles.py), and that is the plain interpreter's result -- bit for bit,
    or close where a Hopper pass changed the arithmetic (scale-fold's exp in base 2). An example
    the general lowering does not take is skipped, saying why."""
    import test_examples_interpreter as examples
    case = examples.CASES[name]
    k = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk", lowering="general", cache=False)
    if k.metadata.get("lowering") != "general" or k.async_ir is None:
        pytest.skip(f"{name}: backend {k.metadata.get('backend')}, not the general lowering")
    parsed = _async(k)
    torch.manual_seed(0)
    args, outs, _ = case.make(case.shapes[0], {})
    idx = [i for i, a in enumerate(args) if any(a is o for o in outs)]
    ref = _copy(args)
    k(*ref)
    by_protocol = _copy(args)
    run_roles(k.ir, by_protocol, seed=0, ctas=2)
    folded = name in BASE_2  # scale-fold takes its exp in base 2: not the interpreter's bits
    for seed in (0, 1):
        mine = _copy(args)
        run_roles(parsed, mine, seed=seed, ctas=2)
        assert _same(idx, mine, by_protocol), f"{name}: schedule {seed} of the rewritten IR differs"
        if not folded:
            assert _same(idx, mine, ref), f"{name}: schedule {seed} differs from the interpreter"
        for i in idx:
            assert torch.allclose(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0), rtol=2e-2, atol=2e-2)


def test_an_early_release_runs_from_the_rewritten_ir():
    """``mbarrier{release=early}``: the one-slot Q released after the loop's drain, in the IR."""
    from tkjit.passes import DEFAULT_PIPELINE
    k = tkjit.load(EXAMPLES / "attention.tk", constants={"D": 128}, lowering="general", cache=False,
                   pipeline=DEFAULT_PIPELINE.replace("mbarrier", "mbarrier{release=early}"))
    text = k.asm["opt"]
    assert text.index('ring_release {ring = "q"}') < text.index('staged_store {store = "O"')
    parsed = _async(k)
    torch.manual_seed(1)
    b, h, n, d = 1, 2, 700, 128
    q, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, 1, 1))
    args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")), d ** -0.5]
    ref = _copy(args)
    k(*ref)
    mine = _copy(args)
    run_roles(parsed, mine, seed=0, ctas=2)
    assert _same((3, 4), mine, ref)
