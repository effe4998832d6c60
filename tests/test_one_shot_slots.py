"""Tiles loaded once per tile, overlapped across a persistent CTA's tiles (session 13): the grid
pass makes such a block loop persistent (with the launch-time grid ``by_trips`` where tiles differ
in work), the pipeline pass gives the one-shot tiles two slots where the rings keep 3 stages, and
the mbarrier pass makes them a ring of two stages used tile after tile. The sync checker explores
it and catches the broken variants; the roles interpreter runs it (slots wrapping several times)
bit for bit as the plain interpreter; the PTX addresses the second slot; the launch grid chooses
by the longest loop."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.interpreter.roles import ScheduleError, run_roles
from tkjit.passes import DEFAULT_PIPELINE
from tkjit.passes.sync_check import check_protocol, default_cases, find_violation
from tkjit.passes.sync_protocol import (Advance, Load, LoopPlan, OneShotUse, Release, Ring, Tiles,
                                        Wait, standard_protocol)
from tkjit.runtime.launcher import compile_grid

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE = (EXAMPLES / "attention.tk").read_text()


def attention(slots: int = 2, empty: int = 3):
    q = Ring("q", slots, (Load("q", 49152),), 49152, empty, one_shot=True)
    kv = Ring("kv", 2, (Load("k", 32768), Load("v", 32768)), 65536, 3)
    return standard_protocol("attn", 3, True, (q, kv),
                             (OneShotUse("q"), LoopPlan("kv", (("kv", "q"), ("kv",)), pipelined=True)))


def _strip(steps, drop):
    out = []
    for st in steps:
        if drop(st):
            continue
        if hasattr(st, "body"):
            fields = {"body": _strip(st.body, drop)}
            if getattr(st, "orelse", ()):
                fields["orelse"] = _strip(st.orelse, drop)
            st = dataclasses.replace(st, **fields)
        out.append(st)
    return tuple(out)


def _failing(proto) -> dict:
    out = {}
    for case in default_cases(proto):
        v, _ = find_violation(proto, case)
        if v is not None:
            out[case] = v.kind
    return out


def test_two_slots_pass_every_case_and_print_as_slots():
    proto = attention()
    assert "ring q: one-shot, 2 slots x 49152 B" in proto.text()
    report = check_protocol(proto)
    assert all(r.exhaustive for r in report.results) and "no violation" in report.text()
    assert any(len(case) >= 3 for case in default_cases(proto))  # a CTA's third tile reuses slot 0


def _tile_start_release():
    good = attention()
    body = [st for st in good.consumer[0].body if st not in (Wait("q", "full"), Release("q"))]
    return dataclasses.replace(good, consumer=(Tiles((Wait("q", "full"), Release("q"), *body)),))


BROKEN = {
    # name: (protocol, the kinds its failing cases report)
    "consumers never advance to the next slot": (
        dataclasses.replace(attention(), consumer=_strip(attention().consumer, lambda s: s == Advance("q"))),
        {"overwrite", "wrong-phase"}),
    "the producer fills a slot without waiting for its release": (
        dataclasses.replace(attention(), producer=_strip(attention().producer,
                                                         lambda s: s == Wait("q", "empty", 1))),
        {"wrong-phase"}),
    "a slot's empty barrier counts one consumer": (attention(empty=1), {"overwrite"}),
    "the slot released when the tile starts": (_tile_start_release(), {"overwrite"}),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_slot_protocols_are_caught(name):
    proto, kinds = BROKEN[name]
    failing = _failing(proto)
    assert failing, f"{name}: not caught"
    assert set(failing.values()) <= kinds, failing
    assert all(len(case) >= 3 for case in failing)  # only a third tile on the CTA reuses a slot


def _general(d=64, causal=False, pipeline=None):
    return tkjit.compile(SOURCE, filename="attention.tk", constants={"D": d, "CAUSAL": causal},
                         lowering="general", cache=False, pipeline=pipeline)


def test_the_passes_choose_and_log_the_overlap():
    k = _general(64)
    log = str(k.explain())
    assert "persistent: min(B * H * cdiv(N, 192), num_sms) CTAs" in log
    assert "%q: 2 slots" in log and "ring q (attention.tk:23:26): one-shot, 2 slots" in log
    assert "one-shot, 2 slots x 24576 B" in k.protocol
    ptx = k.asm["ptx"]
    assert "24576, %r" in ptx  # stage address: slot * 24,576 B + the shared base
    assert ptx.count("mbarrier.init.shared::cta.b64") == 2 * (2 + 4)  # 2 slots + 4 stages, full + empty
    assert "%q: one slot" in str(_general(128).explain())  # 2 slots would leave the ring 1 stage
    one = _general(64, pipeline=DEFAULT_PIPELINE.replace("pipeline,", "pipeline{slots=1},"))
    assert "%q: one slot" in str(one.explain()) and "one-shot x 24576 B" in one.protocol


def test_auto_goes_persistent_and_the_grid_option_keeps_one_cta_per_tile():
    """Tiles of equal work loading Q once per tile: ``auto`` takes the persistent grid (the
    general lowering is the only one); ``grid{overlap=-1}`` keeps one CTA per tile, one slot."""
    auto = tkjit.compile((EXAMPLES / "attention_nol.tk").read_text(), filename="attention_nol.tk",
                         constants={"D": 64}, cache=False)
    assert auto.metadata["grid"][0][0] == "min" and "num_sms" in str(auto.metadata["grid"])
    off = _general(64, pipeline=DEFAULT_PIPELINE.replace("grid,", "grid{overlap=-1},"))
    assert off.metadata["grid"] == [["mul", ["mul", ["dim", "B"], ["dim", "H"]], ["cdiv", ["dim", "N"], 192]]]
    assert "slot" not in off.protocol


@pytest.mark.parametrize("d,bq,n", [(64, 192, 1024), (64, 192, 1025), (64, 192, 2048), (128, 128, 1024),
                                    (128, 128, 1100), (128, 128, 8192)])
def test_the_causal_grid_is_chosen_at_launch_by_the_longest_loop(d, bq, n):
    """Persistent (min(tiles, SMs) CTAs, here 8 SMs) where the last query block's key loop has at
    most 8 trips of 128 keys, one CTA per tile past that -- in the launcher's generated code."""
    k = _general(d, causal=True)
    assert "persistent where the longest loop has at most 8 trips" in str(k.explain())
    tiles = 2 * 8 * -(-n // bq)
    (grid, _, _) = compile_grid(k.metadata["grid"], ("B", "H", "N"), 8)(B=2, H=8, N=n)
    assert grid == (min(tiles, 8) if -(-n // 128) <= 8 else tiles)


@pytest.mark.parametrize("causal", [False, True])
def test_the_slots_run_on_the_cpu_as_the_interpreter(causal):
    """Two CTAs over 10 tiles (192 rows, N = 900, two heads): each CTA's Q slots wrap twice."""
    k = _general(64, causal)
    torch.manual_seed(1)
    b, h, hkv, n, d = 1, 2, 1, 900, 64
    q, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, hkv, hkv))
    args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")),
            d ** -0.5]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    for seed in (0, 1):
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_roles(k.ir, mine, seed=seed, ctas=2)
        for i in (3, 4):
            assert torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)), seed


def test_a_consumer_that_stays_on_one_slot_is_caught_on_the_cpu(monkeypatch):
    """The schedule swapped after the compile (the checker refuses it at compile time): consumers
    that never advance past slot 0 read a tile's Q from the wrong slot or wait forever."""
    from tkjit.passes import mbarrier
    k = _general(64)
    original = mbarrier.standard_protocol

    def stuck(*a, **kw):
        proto = original(*a, **kw)
        q = next(r.name for r in proto.rings if r.one_shot)
        return dataclasses.replace(proto, consumer=_strip(proto.consumer, lambda s: s == Advance(q)))

    monkeypatch.setattr(mbarrier, "standard_protocol", stuck)
    torch.manual_seed(1)
    b, h, n, d = 1, 2, 900, 64
    q, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, 1, 1))
    args = [q, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")),
            d ** -0.5]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    caught = 0
    for seed in range(3):
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        try:
            run_roles(k.ir, mine, seed=seed, ctas=2)
        except ScheduleError:
            caught += 1
            continue
        caught += not all(torch.equal(mine[i].nan_to_num(7.0), ref[i].nan_to_num(7.0)) for i in (3, 4))
    assert caught


def test_an_early_release_comes_after_the_last_product_reading_the_tile():
    """``mbarrier{release=early}`` (off by default, not yet timed): a one-slot Q is released
    right after the loop's drain, before the epilogue, so the producer's next Q load runs under
    it; the checker passes it, and a release inside the loop (before the last product reading Q)
    is caught."""
    q = Ring("q", 1, (Load("q", 49152),), 49152, 3, one_shot=True)
    kv = Ring("kv", 2, (Load("k", 32768), Load("v", 32768)), 65536, 3)
    items = (OneShotUse("q"), LoopPlan("kv", (("kv", "q"), ("kv",)), pipelined=True))
    proto = standard_protocol("attn", 3, True, (q, kv), items, early=("q",))
    tile = proto.consumer[0].body
    assert [type(st).__name__ for st in tile[-3:]] == ["MmaWait", "Release", "Advance"]
    assert "no violation" in check_protocol(proto).text()
    (if_trips,) = [st for st in tile if type(st).__name__ == "IfTrips"]
    loop = if_trips.body[0]
    inside = dataclasses.replace(if_trips, body=(dataclasses.replace(loop, body=(*loop.body, Release("q"))),
                                                 *if_trips.body[1:]))
    broken = dataclasses.replace(proto, consumer=(Tiles(tuple(inside if st is if_trips else st for st in tile
                                                              if st != Release("q"))),))
    assert _failing(broken)

    k = _general(128, pipeline=DEFAULT_PIPELINE.replace("mbarrier", "mbarrier{release=early}"))
    text = k.protocol
    assert text.index("release: arrive empty[q.s]") < text.index("epilogue of O")
    assert text.index("release: arrive empty[q.s]") > text.index("release: arrive empty[j_v.prev]")
    torch.manual_seed(1)
    b, h, n, d = 1, 2, 700, 128
    qq, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, 1, 1))
    args = [qq, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")),
            d ** -0.5]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    run_roles(k.ir, mine, seed=0, ctas=2)
    assert all(torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)) for i in (3, 4))


OTHERS = [("mlp", {}), ("attention_bwd_dkdv", {"D": 64, "BQ": 32, "BKV": 64}),
          ("attention_bwd_dq", {"D": 64, "CAUSAL": True, "BQ": 64, "BKV": 32}),
          ("attention_softcap", {"D": 64, "BQ": 64, "BKV": 64}), ("attention_alibi", {"D": 64, "BQ": 64, "BKV": 64})]


@pytest.mark.parametrize("name,constants", OTHERS, ids=[n for n, _ in OTHERS])
def test_other_kernels_with_one_shot_tiles_run_their_slots_as_the_interpreter(name, constants):
    """Under lowering='general' the fused MLP (X), the backward kernels (K and V, or Q and dO)
    and the softcap/ALiBi attention take two slots in a persistent loop (dq causal and ALiBi:
    the launch-time grid): each schedule, two CTAs, gives the plain interpreter's result."""
    import test_examples_interpreter as examples
    case = examples.CASES[name]
    k = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk", constants=constants,
                      lowering="general", cache=False)
    assert k.metadata["backend"] == "wgmma" and "2 slots" in k.protocol and "num_sms" in str(k.metadata["grid"])
    torch.manual_seed(0)
    args, outs, _ = case.make(case.shapes[0], constants)
    idx = [i for i, a in enumerate(args) if any(a is o for o in outs)]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    run_roles(k.ir, mine, seed=1, ctas=2)
    assert all(torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)) for i in idx)



def test_early_release_is_the_default_over_tiles_of_equal_work():
    """Under ``general`` the mbarrier pass releases a persistent tile's one-slot Q right after its
    last product where the tiles do equal work (D = 128: 0.94-1.02 -> 1.02-1.04 of the template);
    with the launch-time grid (causal, by_trips: one tile a CTA past 8 trips, where early measured
    slower) and under ``release=end`` it stays to the tile's end; ``release=early`` asks for it
    there too; two slots are released at the end as before; a tile something other than a
    product reads stays to the end of the tile."""
    k = _general(128)
    assert "ring q: released right after the last product reading it" in str(k.explain())
    assert k.protocol.index("release: arrive empty[q.s]") < k.protocol.index("epilogue of O")
    end = _general(128, pipeline=DEFAULT_PIPELINE.replace("mbarrier", "mbarrier{release=end}"))
    assert end.protocol.index("release: arrive empty[q.s]") > end.protocol.index("epilogue of O")
    causal = _general(128, causal=True)
    assert "ring q: released at the end of the tile\n      because the launch picks the grid (by_trips)" \
        in str(causal.explain())
    assert causal.protocol.index("release: arrive empty[q.s]") > causal.protocol.index("epilogue of O")
    early = _general(128, causal=True, pipeline=DEFAULT_PIPELINE.replace("mbarrier", "mbarrier{release=early}"))
    assert early.protocol.index("release: arrive empty[q.s]") < early.protocol.index("epilogue of O")
    assert "released right after" not in str(_general(64).explain())  # two slots
    from general_corpus import CASES
    case = next(c for c in CASES if c.name == "residual_shared")  # the residual is read by a copy
    one = tkjit.compile(case.source, constants=case.constants, lowering="general", cache=False,
                        pipeline=DEFAULT_PIPELINE.replace("pipeline,", "pipeline{slots=1},"))
    assert "ring rs: released at the end of the tile" in str(one.explain())


def test_stores_from_registers_instead_of_a_staging_that_costs_a_stage():
    """``pipeline{staging=drop}`` (off: measured slower on both D): causal D = 128 (128-key
    blocks) stores O from registers and the K/V ring takes the third stage the staging cost it
    beside Q in a persistent loop; by default O is staged and the ring keeps 2. The roles
    interpreter runs the unstaged schedule (two CTAs, persistent walk) bit for bit as the
    interpreter."""
    drop = DEFAULT_PIPELINE.replace("pipeline,", "pipeline{staging=drop},")
    k = _general(128, causal=True, pipeline=drop)
    log = str(k.explain())
    assert "from registers: no staging tile" in log and "3 stage(s) of 65,536 B" in log
    assert "stmatrix" not in k.asm["ptx"] and "epilogue of O" not in k.protocol
    keep = _general(128, causal=True)
    assert "2 stage(s) of 65,536 B" in str(keep.explain()) and "epilogue of O" in keep.protocol
    assert "epilogue of O" in _general(128, pipeline=drop).protocol  # 176-key blocks: no stage to gain
    torch.manual_seed(2)
    b, h, n, d = 1, 2, 700, 128
    qq, kk, v = (torch.randn(b, x, n, d).bfloat16() for x in (h, 1, 1))
    args = [qq, kk, v, torch.full((b, h, n, d), float("nan")).bfloat16(), torch.full((b, h, n), float("nan")),
            d ** -0.5]
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    run_roles(k.ir, mine, seed=0, ctas=2)
    assert all(torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)) for i in (3, 4))
