"""The measured autotuner on the CPU: its timer and device identity injected (on a GPU they are CUDA
events and the GPU's name and driver), candidates running on the interpreter. Pruning by the
compiler's own refusals, the fastest pick, outputs restored after timing, the choice kept per
shape bucket in the process and on disk (a second tuner, as in a new process, times nothing),
and the table in explain()."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.autotune import bucket_of
from tkjit.errors import TkError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class FakeTimer:
    """Runs each launch once (the interpreter: it must work) and returns the next made-up time."""

    def __init__(self, times):
        self.times, self.calls = list(times), 0

    def __call__(self, launch):
        launch()
        self.calls += 1
        return self.times.pop(0)


def no_timing(launch):
    raise AssertionError("a known bucket must not be timed again")


@pytest.fixture
def softmax():
    return tkjit.load(EXAMPLES / "softmax.tk", )


def tuner(kernel, times, **kw):
    return kernel.autotune({"BR": [16, 32, 40, 56]}, timer=times, device=lambda: "fake GPU / driver 1",
                           progress=False, **kw)


def test_the_fastest_survivor_wins_and_the_rest_are_explained(softmax):
    timer = FakeTimer([3.0, 1.0])
    tuned = tuner(softmax, timer)
    x = torch.randn(100, 1024, dtype=torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    tuned(x, y)
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-3)
    (tuning,) = tuned.tunings
    assert tuning.bucket == {"R": 128} and tuning.winner == {"BR": 32} and timer.calls == 2
    dropped = {t.constants["BR"]: t.dropped for t in tuning.trials if t.dropped}
    assert set(dropped) == {40, 56} and "must be a positive multiple of 16" in dropped[40]
    text = tuned.explain()
    assert "autotune [R=128]: BR=32, timed now" in text
    assert re.search(r"\* BR=32 +1\.0000 ms", text) and re.search(r"  BR=16 +3\.0000 ms", text)
    assert re.search(r"  BR=40 +dropped: ", text)
    tuned(x, y)  # the same bucket: no timing
    tuned(torch.randn(120, 1024, dtype=torch.bfloat16), torch.empty(120, 1024, dtype=torch.bfloat16))
    assert timer.calls == 2


def test_a_second_process_reads_the_choice_and_times_nothing(softmax):
    x = torch.randn(300, 1024, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    tuner(softmax, FakeTimer([2.0, 5.0]))(x, y)
    again = tuner(tkjit.load(EXAMPLES / "softmax.tk", ), no_timing)
    again(x, y)
    (tuning,) = again.tunings
    assert tuning.from_disk and tuning.winner == {"BR": 16}
    assert "read from the disk cache" in again.explain()
    other_gpu = softmax.autotune({"BR": [16, 32]}, timer=FakeTimer([1.0, 2.0]), device=lambda: "another GPU",
                                 progress=False)
    other_gpu(x, y)
    assert not other_gpu.tunings[0].from_disk  # the device is part of the key


def test_outputs_written_while_timing_are_restored(softmax):
    """The timing launches write y; the call's own launch is the winner's, on the saved values."""
    seen = []

    def timer(launch):
        launch()
        seen.append(1)
        return float(len(seen))
    kernel = tkjit.compile("""
kernel acc(X: gl<f32>[R, 16], Y: gl<f32>[R, 16]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 16] = X.tile(i, 0)
    y: rt<f32>[16, 16] = Y.tile(i, 0)
    Y.tile(i, 0) = x + y
  }
}""")
    with pytest.raises(TkError, match="autotune: BR is not a constant of kernel 'acc' \\(its constants: none\\)"):
        kernel.autotune({"BR": [16]})
    k2 = tkjit.compile("""
kernel acc<S = 1>(X: gl<f32>[R, 16], Y: gl<f32>[R, 16]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 16] = X.tile(i, 0)
    y: rt<f32>[16, 16] = Y.tile(i, 0)
    Y.tile(i, 0) = x * S + y
  }
}""")
    tuned = k2.autotune({"S": [1]}, timer=timer, device=lambda: "fake", progress=False, store=False)
    x, y = torch.ones(32, 16), torch.zeros(32, 16)
    tuned(x, y)
    assert torch.equal(y, torch.ones(32, 16))  # once, not once per timing launch too


def test_cpu_tensors_without_a_timer_run_the_defaults(softmax):
    tuned = softmax.autotune({"BR": [16, 32]})
    x = torch.randn(20, 1024, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    tuned(X=x, Y=y)
    assert tuned.tunings == []
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-3)


def test_buckets_round_up_to_powers_of_two():
    assert bucket_of({"M": 1000, "N": 3000, "K": 520, "B": 1}) == {"M": 1024, "N": 4096, "K": 1024, "B": 1}
    assert bucket_of({"M": 4096, "K": 64}) == {"M": 4096, "K": 64}


def test_a_space_that_is_not_a_dict_of_lists(softmax):
    with pytest.raises(TkError, match="give the space as a dict"):
        softmax.autotune([16, 32])
    with pytest.raises(TkError, match="BR: give a non-empty list"):
        softmax.autotune({"BR": []})


def test_a_shape_seen_before_goes_straight_to_its_variant(softmax, monkeypatch):
    """The launch path of a tuned kernel: shapes seen before skip the dims and the bucket (their
    Python cost made a 13 us GEMM 10% slower than the kernel the tuner picked); a new shape in the
    same bucket, and one in another bucket, still go through them."""
    tuned = tuner(softmax, FakeTimer([3.0, 1.0, 2.0, 1.0]))
    x = torch.randn(100, 1024, dtype=torch.bfloat16)
    tuned(x, torch.empty_like(x))
    looked_up = []
    dims = tuned._dims
    monkeypatch.setattr(tuned, "_dims", lambda args: looked_up.append(1) or dims(args))
    y = torch.full_like(x, float("nan"))
    tuned(x, y)   # the same shapes: no lookup
    assert looked_up == []
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-3)
    x2 = torch.randn(90, 1024, dtype=torch.bfloat16)   # same bucket (R=128), new shapes
    tuned(x2, torch.empty_like(x2))
    x3 = torch.randn(300, 1024, dtype=torch.bfloat16)  # another bucket: tuned again
    tuned(x3, torch.empty_like(x3))
    assert looked_up == [1, 1] and len(tuned.tunings) == 2
