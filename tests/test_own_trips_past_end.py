"""Consumers whose rows all lie past the tensor's end compute nothing (own-trips{past_end},
passes/past_end.py), on the CPU: what the pass decides for the attention examples and why, the
scheduled program on the roles interpreter against the plain interpreter (bit for bit on the rows
that are stored, no NaN leaking into them from an idle consumer's 0/0), a broken rule that idles a
consumer with a valid row caught, the sync checker's case with every consumer but the first idle,
and the own count's PTX on the simulator. The IR in/out tests are tests/ir/own-trips/past-end-*.tkir
and masked.tkir; the GPU test is tests/gpu/test_general_attention_past_end_gpu.py."""
from __future__ import annotations

import pytest
import torch

import tkjit
from tkjit.errors import PassError
from tkjit.passes import DEFAULT_PIPELINE
from tkjit.passes.mbarrier import protocol_of
from tkjit.passes.own_trips import own_loops
from tkjit.passes.past_end import PastEnd
from tkjit.passes.sync_check import check_protocol
from tkjit.passes.sync_report import default_cases

from test_own_trips import _inputs, _own_counts_on_the_simulator, _roles_equal, _want_own, general

OFF = DEFAULT_PIPELINE.replace("own-trips,", "own-trips{past_end=off},")
ON = DEFAULT_PIPELINE.replace("own-trips,", "own-trips{past_end=on},")
assert OFF != DEFAULT_PIPELINE and ON != DEFAULT_PIPELINE


def test_d64_causal_idles_consumers_past_the_end():
    k = general()
    text = k.explain()
    assert "for at attention.tk:33:5: a consumer whose rows all lie past the end idles every trip" in text
    assert "every store (store at attention.tk:49:5, store at attention.tk:50:5) writes rows 192·%i" in text
    assert "consumer 1: 192·%i + 64 >= N; consumer 2: 192·%i + 128 >= N, else its mask's count (past_end=auto)" in text
    (loop,) = own_loops(k.ir)
    assert loop.attrs["past_end"] is True and loop.attrs["own_trips"] == (64, 128)
    ptx = k.asm["ptx"]
    assert ptx.count("// past the end: none of this consumer's rows is stored") == 1
    off = general(pipeline=OFF)
    assert "rows past the end computed" in off.explain() and "pinned off" in off.explain()
    (loop,) = own_loops(off.ir)
    assert "past_end" not in loop.attrs and "// past the end" not in off.asm["ptx"]


@pytest.mark.parametrize("name", ["attention", "attention_nol"])
def test_auto_leaves_loops_without_own_trips_alone(name):
    """Non-causal (no mask) and D = 128 causal (every consumer reaches the last key block): the
    loop takes no own trips, so auto does not split it for rows past the end (the template's idle
    copy measured slower on non-causal kernels); the PTX has no own count."""
    for d, causal in ((64, False), (128, True)):
        k = general(name, d, causal)
        assert not protocol_of(k.ir).own_trips and "past the end" not in k.asm["ptx"]
        assert "idles every trip" not in k.explain()
        assert "rows past the end computed" in k.explain() and "past_end=on} asks for it" in k.explain()


def test_on_splits_a_loop_without_a_mask():
    k = general(causal=False, pipeline=ON)
    text = k.explain()
    assert "a consumer whose rows all lie past the end idles every trip" in text
    assert "else the tile's trips (past_end=on)" in text
    (loop,) = own_loops(k.ir)
    assert loop.attrs["own_trips"] == (64, 0) and loop.attrs["past_end"] is True
    assert protocol_of(k.ir).own_trips
    assert "// own trips: the tile's, none past the end" in k.asm["ptx"]


def test_a_bad_option_is_refused():
    with pytest.raises(PassError, match="past_end must be auto, on, off"):
        general(pipeline=DEFAULT_PIPELINE.replace("own-trips,", "own-trips{past_end=maybe},"))


# -- the scheduled program against the interpreter --------------------------------------------
def _idled(monkeypatch) -> list:
    """Records every (consumer, first row, extent) the rule idles in the roles interpreter."""
    seen = []
    idle = PastEnd.idle

    def spy(self, consumer, rows, row0, extents):
        out = idle(self, consumer, rows, row0, extents)
        if out:
            seen.append((consumer, row0 * self.tile_rows + rows * consumer, max(extents)))
        return out
    monkeypatch.setattr(PastEnd, "idle", spy)
    return seen


def _roles_match_without_nan(kernel, args) -> bool:
    mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    from tkjit.interpreter.roles import run_roles
    run_roles(kernel.ir, mine, seed=0)
    outs = [mine[i] for i in range(3, len(args) - 1)]
    return not any(o.float().isnan().any() for o in outs) and _roles_equal(kernel, args, seeds=(1,))


@pytest.mark.parametrize("name,h,hkv,n", [("attention", 1, 1, 1000), ("attention", 2, 1, 1024),
                                          ("attention", 1, 1, 50), ("attention", 1, 1, 192),
                                          ("attention", 1, 1, 700), ("attention_nol", 2, 1, 1000),
                                          ("attention_nol", 1, 1, 1024), ("attention_nol", 1, 1, 50),
                                          ("attention_nol", 1, 1, 192), ("attention_nol", 1, 1, 700)])
def test_idle_consumers_past_the_end_match_the_interpreter_bit_for_bit(monkeypatch, name, h, hkv, n):
    """Each consumer stores only its own rows (roles.own_rows), the outputs NaN-poisoned: the rows
    below N are the plain interpreter's bit for bit and none is NaN, though an idle consumer's
    epilogue divides 0 by 0 (its rows are clipped at N). The rule fires where a consumer's first
    row is at or past N (not at N = 192: every row is valid)."""
    seen = _idled(monkeypatch)
    kernel = general(name)
    assert _roles_match_without_nan(kernel, _inputs(name, 1, h, hkv, n, 64, 64 ** -0.5))
    want = {(c, 192 * i + 64 * c, n) for i in range(-(-n // 192)) for c in range(3) if 192 * i + 64 * c >= n}
    assert set(seen) == want and (n == 192) == (not want)


def test_d96_causal_matches_the_interpreter(monkeypatch):
    """D = 96 keeps 192-row blocks over three consumers (its PTX takes the rule too)."""
    seen = _idled(monkeypatch)
    kernel = general(d=96)
    assert kernel.ir.attrs["consumers"] == 3
    assert _roles_match_without_nan(kernel, _inputs("attention", 1, 1, 1, 700, 96, 96 ** -0.5))
    assert set(seen) == {(2, 704, 700)}


@pytest.mark.parametrize("n", [1000, 50])
def test_on_without_a_mask_matches_the_interpreter(monkeypatch, n):
    seen = _idled(monkeypatch)
    kernel = general(causal=False, pipeline=ON)
    assert _roles_match_without_nan(kernel, _inputs("attention", 1, 2, 1, n, 64, 64 ** -0.5))
    assert seen


def test_the_check_fails_when_a_consumer_with_a_valid_row_is_idled(monkeypatch):
    """The checks above can fail: a rule one row too eager (first row + 1 >= N) idles consumer 0
    of the last block at N = 961, whose row 960 is stored."""
    monkeypatch.setattr(PastEnd, "idle", lambda self, c, rows, row0, ext: row0 * self.tile_rows + rows * c + 1 >= max(ext))
    args = _inputs("attention", 1, 1, 1, 961, 64, 64 ** -0.5)
    assert not _roles_equal(general(), args, seeds=(0,))


# -- the protocol -------------------------------------------------------------------------------
def test_the_checker_runs_every_consumer_but_the_first_idle():
    proto = protocol_of(general().ir)
    cases = default_cases(proto)
    idle = [e for case in cases for e in case if not isinstance(e, int) and e[1] == e[0] > 0 and e[2:] == (0, 0)]
    assert idle
    report = check_protocol(proto, cases)
    assert "no violation" in report.text()


# -- the own count's PTX on the simulator ---------------------------------------------------------
@pytest.mark.parametrize("n,i", [(1024, 5), (1000, 5), (961, 5), (960, 5), (50, 0), (192, 0), (700, 3), (8155, 42)])
def test_the_own_count_ptx_past_the_end(n, i):
    """Consumer c of block row i has no own trips when 192·i + 64c >= N, else the mask's count;
    with past_end=off the mask's count only."""
    assert _own_counts_on_the_simulator(general(), n, i) == _want_own(n, i)
    assert _own_counts_on_the_simulator(general(pipeline=OFF), n, i) == _want_own(n, i, past_end=False)


@pytest.mark.parametrize("n,i", [(1000, 5), (50, 0), (4096, 21), (4096, 3)])
def test_the_own_count_ptx_without_a_mask(n, i):
    """past_end=on on the non-causal kernel: the tile's trips (all key blocks) unless the
    consumer's first row is at or past N."""
    got = _own_counts_on_the_simulator(general(causal=False, pipeline=ON), n, i)
    trips = -(-n // 128)
    assert got == [0 if 192 * i + 64 * c >= n else trips for c in range(3)]


def test_past_the_end_comes_after_the_run_time_conditions():
    """The mask applied left of the diagonal (test_own_trips.WRONG_SIDE): its condition fails on the
    later trips, which makes every trip each consumer's own, but consumers 1 and 2 of block row 21
    at N = 4096 (rows 4096 ..) still get none."""
    from test_own_trips import WRONG_SIDE
    k = tkjit.compile(WRONG_SIDE, filename="attention.tk", constants={"D": 64, "CAUSAL": True},
                      lowering="general", cache=False)
    assert _own_counts_on_the_simulator(k, 4096, 21) == [32, 0, 0]
    assert _own_counts_on_the_simulator(k, 4096, 3) == [min(32, -(-192 * 4 // 128))] * 3


def test_on_a_gemm_whose_last_row_block_is_partly_past_m(monkeypatch):
    """Not attention-specific: examples/gemm.tk (128x256 tiles over two consumers) under
    past_end=on at M = 150: block row 1's consumer 1 (rows 192 ..) idles every trip of the K loop,
    and C matches the plain interpreter bit for bit, no NaN left in it."""
    from pathlib import Path

    from tkjit.interpreter.roles import run_roles
    seen = _idled(monkeypatch)
    src = (Path(__file__).resolve().parents[1] / "examples" / "gemm.tk").read_text()
    k = tkjit.compile(src, filename="gemm.tk", cache=False, pipeline=ON)
    assert "consumer 1: 128·%m + 64 >= M, else the tile's trips (past_end=on)" in k.explain()
    torch.manual_seed(0)
    a, b = torch.randn(150, 128).bfloat16(), torch.randn(128, 300).bfloat16()
    want, got = (torch.full((150, 300), float("nan")).bfloat16() for _ in range(2))
    k(a, b, want)
    run_roles(k.ir, [a, b, got], seed=0)
    assert not got.float().isnan().any() and torch.equal(got, want)
    assert set(seen) == {(1, 192, 150)}
