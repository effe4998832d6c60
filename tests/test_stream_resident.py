"""stream-cols{resident=k}: a streamed row-wise program runs its block loop persistently with k
CTAs per SM, so that a later pass's re-read of a chunk finds it in L2 (docs/codegen.md). The IR
the pass writes, the launch grid, the decision log, and the PTX on the simulator (CTAs that loop
over several row blocks, a ragged last block, poisoned outputs)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit
from simkit import simulate
from test_stream_cols import RMS_IR, check_lines, run_pass
from tkjit.errors import PassError, TkError
from tkjit.ir.parser import parse_kernel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_resident_makes_the_block_loop_persistent_and_says_why():
    out, log = run_pass(RMS_IR, "stream-cols{resident=2 cache=none}")
    check_lines(out, ['blocks {schedule = "persistent", resident = 2} %', "for {stages = 2} %", "row_sum",
                      "for {stages = 2} %", "store %Y,"])
    (d,) = [d for d in log if d.pass_name == "stream-cols" and d.decision.startswith("persistent")]
    assert d.decision == "persistent, 2 CTA(s) per SM"
    assert "2 x 131,072 B" in d.reason  # 16 rows x 4096 columns x 2 bytes of %X per row block


def test_without_the_option_the_grid_schedule_stays():
    out, _ = run_pass(RMS_IR, "stream-cols")
    assert "resident" not in out and "persistent" not in out


def test_a_program_that_is_not_streamed_keeps_its_schedule():
    small = RMS_IR.replace("4096", "256")
    out, _ = run_pass(small, "stream-cols{resident=2}")
    assert "resident" not in out


def test_resident_needs_a_persistent_loop():
    bad = RMS_IR.replace("blocks %0 {", 'blocks {resident = 2} %0 {')
    with pytest.raises(TkError, match="resident needs schedule"):
        parse_kernel(bad)
    with pytest.raises(PassError, match="at least 1"):
        run_pass(RMS_IR, "stream-cols{resident=-1}")


def test_the_launch_grid_is_bounded_by_k_per_sm():
    kernel = tkjit.load(EXAMPLES / "rmsnorm.tk", constants={"D": 4096},
                        pipeline="canonicalize,stream-cols{resident=3}")
    kernel.asm["ptx"]  # noqa: B018 - emitted now: the launch metadata is the backend's
    assert kernel.metadata["grid"] == [["min", ["cdiv", ["dim", "R"], 16], ["mul", ["num_sms"], 3]]]
    assert "3 CTA(s) per SM looping over blocks" in str(kernel.explain())


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm"])
def test_persistent_ctas_over_several_row_blocks_on_the_simulated_ptx(name):
    """4 simulated SMs x 2 CTAs = 8 CTAs over 10 row blocks of which the last is ragged: CTAs run a
    second row block after their chunk pipelines and staged stores of the first."""
    torch.manual_seed(3)
    r, d = 149, 1024
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", pipeline="canonicalize,stream-cols{force=true cols=256 resident=2}")
    x = (torch.randn(r, d) * 2 + 0.5).bfloat16()
    res, w, b = torch.randn(r, d).bfloat16(), torch.randn(d).bfloat16(), torch.randn(d).bfloat16()
    out = [torch.full((r, d), float("nan")).bfloat16() for _ in range(2)]
    if name == "rmsnorm":
        args, index = [x, w, out[0], 1e-6], [2]
        xd = x.double()
        refs = [xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()]
    else:
        args, index = [x, res, w, b, out[0], out[1], 1e-5], [4, 5]
        h = x.double() + res.double()
        refs = [h, torch.nn.functional.layer_norm(h, (d,), w.double(), b.double(), eps=1e-5)]
    got = simulate(kernel.ir, args, index, ptx_meta=(kernel.asm["ptx"], kernel.metadata), max_ctas=16)
    for g, ref in zip(got, refs):
        assert not torch.isnan(g).any(), "an output element was never written"
        err = ((g.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"relative error {err:.3g}"
