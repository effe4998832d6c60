"""Per-consumer causal trip counts in the general lowering (passes/own_trips.py, the protocol's
``Loop(part="own"/"rest")``, codegen/hopper/lower_own_trips.py), on the CPU: what the pass decides
for the attention examples and why, the protocol the sync checker explores (and the broken forms
it catches), the scheduled program on the roles interpreter against the plain interpreter (bit
for bit: a wholly masked trip adds exactly nothing), and the PTX/SASS. The pass's IR in/out tests
are tests/ir/own-trips/*.tkir; the GPU test is tests/gpu/test_general_attention_own_trips_gpu.py."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.interpreter.roles import run_roles
from tkjit.passes import sync_protocol as sp
from tkjit.passes.mbarrier import protocol_of
from tkjit.passes.own_trips import OwnPlan
from tkjit.passes.sync_check import SyncError, check_protocol
from tkjit.passes.sync_report import default_cases

from test_general_lowering import sync_outside_the_protocol

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def general(name: str = "attention", d: int = 64, causal: bool = True, **extra):
    return tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk",
                         constants={"D": d, "CAUSAL": causal}, lowering="general", cache=False, **extra)


def test_d64_causal_consumers_run_their_own_trips():
    text = general().explain()
    assert "for at attention.tk:33:5: each consumer runs its own trips; the rest idle" in text
    assert "consumer 0: min(T, max(q0 + 63 - 128·lo + 128, 0) / 128)" in text
    assert "consumer 2: min(T, max(q0 + 191 - 128·lo + 128, 0) / 128)" in text
    assert "conditions checked on the later trips at run time: gt at attention.tk:38:12 true" in text
    assert "loop at attention.tk:33:5: per-consumer trip counts in the protocol" in text
    proto = protocol_of(general().ir)
    assert proto.own_trips and "over this consumer's own trips" in proto.text()
    assert "loop j over the tile's trips after this consumer's own" in proto.text()


@pytest.mark.parametrize("name", ["attention", "attention_nol"])
def test_nothing_to_skip_at_d128_and_no_mask_without_causal(name):
    """128-row blocks over 128-key blocks: each consumer's rows reach the tile's last key block
    (the pass says so and the protocol keeps the tile's trips); without the mask there is
    nothing to prove a trip wholly masked, and the pass says nothing."""
    text = general(name, 128, True).explain()
    assert "every consumer runs the tile's trips" in text and "nothing to skip" in text
    assert not protocol_of(general(name, 128, True).ir).own_trips
    plain = general(name, 64, False)
    assert "own trips" not in plain.explain() and not protocol_of(plain.ir).own_trips


def test_off_without_the_pass():
    from tkjit.passes import DEFAULT_PIPELINE
    pipeline = DEFAULT_PIPELINE.replace("own-trips,", "")
    k = general(pipeline=pipeline)
    assert not protocol_of(k.ir).own_trips and "idle_trip" not in k.asm["ptx"]


def test_the_formula_counts_the_key_blocks_a_consumers_rows_see():
    plan = OwnPlan(loop=None, q0=None, q0_ops=[], scale=128, step=1, rows=64)
    for i in range(40):
        q0, trips = 192 * i, min(10 ** 6, -(-192 * (i + 1) // 128))
        for c in range(3):
            last = q0 + 64 * c + 63  # the consumer's last query row
            seen = sum(1 for j in range(trips) if 128 * j <= last)
            assert plan.own(c, q0, 0, trips) == seen
    assert plan.own(0, -500, 0, 4) == 0 and plan.own(2, 10 ** 6, 0, 4) == 4


# -- the protocol, checked ----------------------------------------------------------------------
def _proto():
    return protocol_of(general().ir)


def _rest_body(proto, fn):
    def walk(steps):
        out = []
        for st in steps:
            if isinstance(st, sp.Loop) and st.part == "rest":
                st = dataclasses.replace(st, body=tuple(fn(list(st.body))))
            elif hasattr(st, "body"):
                st = dataclasses.replace(st, body=tuple(walk(st.body)))
            out.append(st)
        return out
    return dataclasses.replace(proto, consumer=tuple(walk(proto.consumer)))


def test_the_protocol_passes_the_checker_with_consumers_own_trips():
    proto = _proto()
    report = check_protocol(proto, default_cases(proto))
    assert "no violation" in report.text()
    assert any(not isinstance(e, int) for r in report.results for e in r.case)  # own-trip cases ran


def test_the_checker_catches_idle_trips_that_do_not_wait_or_do_not_release():
    proto = _proto()
    no_wait = _rest_body(proto, lambda body: [s for s in body if not isinstance(s, sp.Wait)])
    with pytest.raises(SyncError) as err:
        check_protocol(no_wait, default_cases(no_wait))
    assert err.value.violation.kind == "bad-release"
    no_release = _rest_body(proto, lambda body: [s for s in body if not isinstance(s, sp.Release)])
    with pytest.raises(SyncError):
        check_protocol(no_release, default_cases(no_release))
    stop_early = _rest_body(proto, lambda body: [])  # a consumer that stops at its own trips
    with pytest.raises(SyncError):
        check_protocol(stop_early, default_cases(stop_early))


# -- the scheduled program against the interpreter --------------------------------------------
def _inputs(name: str, b: int, h: int, hkv: int, n: int, d: int, scale: float):
    torch.manual_seed(n + h)
    q = torch.randn(b, h, n, d).bfloat16()
    k, v = (torch.randn(b, hkv, n, d).bfloat16() for _ in range(2))
    args = [q, k, v, torch.full((b, h, n, d), float("nan")).bfloat16()]
    if name == "attention":
        args.append(torch.full((b, h, n), float("nan")))
    return args + [scale]


def _roles_equal(kernel, args, seeds=(0, 1)) -> bool:
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kernel(*ref)  # the plain interpreter (no GPU here)
    outs = range(3, len(args) - 1)
    for seed in seeds:
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_roles(kernel.ir, mine, seed=seed)
        if not all(torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)) for i in outs):
            return False
    return True


@pytest.mark.parametrize("name,b,h,hkv,n,sign", [("attention", 1, 2, 1, 300, 1), ("attention", 1, 1, 1, 700, -1),
                                                 ("attention_nol", 1, 2, 2, 200, 1), ("attention", 1, 1, 1, 50, 1)])
def test_the_schedule_matches_the_interpreter_bit_for_bit(name, b, h, hkv, n, sign):
    """Each consumer stores only its own rows (interpreter/roles.py: ``row_share``), so rows a
    consumer would compute wrong by skipping too much would show; a negative scale runs the
    program as written (scale-fold's else branch: the mask after the scaling)."""
    kernel = general(name)
    assert protocol_of(kernel.ir).own_trips
    assert _roles_equal(kernel, _inputs(name, b, h, hkv, n, 64, sign * 64 ** -0.5))


def test_the_interpreter_check_fails_when_a_consumer_skips_a_trip_it_needs(monkeypatch):
    """The check above can fail: consumer 1 stopping one trip early changes its rows."""
    kernel = general()
    own = OwnPlan.own
    monkeypatch.setattr(OwnPlan, "own", lambda self, c, q0, lo, t: max(0, own(self, c, q0, lo, t) - (c == 1)))
    assert not _roles_equal(kernel, _inputs("attention", 1, 1, 1, 300, 64, 0.125), seeds=(0,))


# -- the PTX ------------------------------------------------------------------------------------
def test_the_ptx_computes_own_trips_and_idles_with_only_protocol_syncs():
    k = general()
    ptx = k.asm["ptx"]
    assert ptx.count("// own trips:") == 1 and re.search(r"div\.u32 %r\d+, %r\d+, 128;", ptx)
    assert len(re.findall(r"^\$L_idle_trip_\d+:", ptx, re.M)) == 1
    assert sync_outside_the_protocol(ptx, k.async_ir) == []
    try:
        sass = k.asm["sass"]
    except tkjit.errors.NotAvailableError as e:
        pytest.skip(str(e))
    assert "HGMMA" in sass and not re.search(r"\b(LDL|STL)\b", sass)


# -- the own count's PTX on the simulator ---------------------------------------------------------
def _own_counts_on_the_simulator(kernel, n: int, i: int) -> list[int]:
    """The consumers' ``own_count`` PTX (lower_own_trips.py) for block row ``i`` at N = ``n``, run
    on the PTX simulator (tests/ptxsim.py runs no wgmma, mbarrier or TMA, so not the whole
    kernel): the kernel body's and the block body's scalars from a dim N and block index i, the
    tile's trip count as the consumers print it, then the own count of each consumer warpgroup."""
    import numpy as np
    from ptxsim import Memory, launch
    from support import bare_consumer
    from tkjit.codegen.hopper.lower_own_trips import own_count
    from tkjit.codegen.hopper.lower_producer import is_scalar_op, ring_trips
    from tkjit.codegen.hopper.program import RingRegs
    from tkjit.codegen.values import Scalar
    from tkjit.ir.ops import Dim
    from tkjit.ir.types import I32
    from tkjit.passes.own_trips import own_loops
    lk, role = bare_consumer(kernel.ir)
    b, ctx = lk.b, role.ctx
    role.index = b.reg()
    b(f"shr.u32 {role.index}, {lk.tid}, 7;")  # consumer c: threads 128c ..
    params = {}
    for name in ("n", "iblk"):
        params[name] = b.reg()
        b(f"ld.param.u32 {params[name]}, [{name}];")
    for op in kernel.ir.body.ops:
        if isinstance(op, Dim):
            ctx.bind(op.result, Scalar(params["n"] if op.attrs["name"] == "N" else b.mov(1), I32))
        elif is_scalar_op(op):
            b(*ctx.emit_op(op))
    for a in lk.blocks.regions[0].args:
        ctx.bind(a, Scalar(params["iblk"] if a is lk.blocks.regions[0].args[-1] else b.mov(0), I32))
    (loop,) = own_loops(kernel.ir)
    for op in lk.blocks.regions[0].ops:
        if op is loop:
            break
        if is_scalar_op(op) and all(id(x) in ctx.values for x in op.operands):
            b(*ctx.emit_op(op))
    ring = lk.schedule.loop_of[loop]
    role.rings = {ring: RingRegs(lk.proto.ring(ring), b.mov(0), b.mov(0), b.mov(0), b.mov(0), b.mov(0))}
    ring_trips(role, ring, loop)
    own = own_count(role, ring, loop)
    out, off = b.reg("b64"), b.reg("b64")
    b(f"ld.param.u64 {out}, [out];", f"cvta.to.global.u64 {out}, {out};",
      f"mul.wide.u32 {off}, {lk.tid}, 4;", f"add.s64 {out}, {out}, {off};",
      f"st.global.b32 [{out}], {own};", "ret;")
    ptx = "\n".join([".version 8.0", ".target sm_90a", ".address_size 64",
                     ".visible .entry own(.param .u64 out, .param .u32 n, .param .u32 iblk)", "{"]
                    + b.namer.declarations() + ["  " + b.lines[0]] + ["  " + x for x in ctx.prologue]
                    + [x if x.endswith(":") else "  " + x for x in b.lines[1:]] + ["}"])
    threads = 128 * lk.consumers
    mem = Memory(1 << 16)
    buf = np.full(threads, -1, dtype=np.int32)
    addr = mem.alloc(buf)
    launch(ptx, {"dims": [], "grid": [1], "block": [threads, 1, 1], "smem_bytes": 0}, [addr, n, i], {},
           mem=mem, max_ctas=1)
    got = mem.read_back(addr, buf)
    assert all((got[128 * c:128 * (c + 1)] == got[128 * c]).all() for c in range(lk.consumers))
    return [int(got[128 * c]) for c in range(lk.consumers)]


@pytest.mark.parametrize("n,i", [(4096, 0), (4096, 1), (4096, 2), (4096, 7), (4096, 21), (300, 1), (1000, 5),
                                 (128, 0), (200, 1)])
def test_the_own_count_ptx_on_the_simulator(n, i):
    """Consumer c's own trips of block row i: the key blocks j < T with 128·j <= 192·i + 64c + 63,
    every trip when one of the later ones does not cross the diagonal (the example's condition,
    (j + 1)·128 > 192·i + 1, always holds there), none when its first row 192·i + 64c is at or
    past N (the rows-past-the-end rule: 4096/21, 300/1, 1000/5, 128/0 and 200/1 have such
    consumers)."""
    got = _own_counts_on_the_simulator(general(), n, i)
    assert got == _want_own(n, i)


def _want_own(n: int, i: int, past_end: bool = True) -> list[int]:
    trips = max(0, min(-(-n // 128), -(-192 * (i + 1) // 128)))
    return [0 if past_end and 192 * i + 64 * c >= n else
            sum(1 for j in range(trips) if 128 * j <= 192 * i + 64 * c + 63) for c in range(3)]


WRONG_SIDE = ((EXAMPLES / "attention.tk").read_text()
              .replace("if (j + 1) * BKV > i * BQ + 1 {", "if j * BKV < i * BQ {"))
"""The mask applied only on blocks left of the block's first row: on the trips past a consumer's
own the condition fails, so the pass's assumption is checked false at run time and every trip is
each consumer's own (the program's meaning is the interpreter's, whatever it computes)."""


def test_a_condition_that_fails_at_run_time_makes_every_trip_the_consumers_own():
    assert WRONG_SIDE != (EXAMPLES / "attention.tk").read_text()
    k = tkjit.compile(WRONG_SIDE, filename="attention.tk", constants={"D": 64, "CAUSAL": True},
                      lowering="general", cache=False)
    assert "each consumer runs its own trips" in k.explain()
    assert _roles_equal(k, _inputs("attention", 1, 1, 1, 700, 64, 0.125), seeds=(0,))
    for n, i in ((4096, 0), (4096, 3)):
        trips = min(32, -(-192 * (i + 1) // 128))
        assert _own_counts_on_the_simulator(k, n, i) == [trips] * 3
