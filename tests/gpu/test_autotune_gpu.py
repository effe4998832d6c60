"""On a GPU: kernel.autotune() on the GEMM example, timed with CUDA events. Correct results, a
winner no slower than any timed candidate nor (beyond noise) than @fill_sms's choice in the same
run, the tuning time in explain(), and a second process that reuses the choice without timing."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.autotune import cuda_event_timer

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
SPACE = {"BM": [64, 128], "BN": [128, 256], "SPLIT": [1, 2]}


@pytest.mark.parametrize("m, n, k", [(4096, 4096, 64), (1000, 3000, 520)])
def test_gemm_autotune(m, n, k):
    gemm = tkjit.load(REPO / "examples" / "gemm.tk")
    tuned = gemm.autotune(SPACE)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    tuned(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    (tuning,) = tuned.tunings
    timed = [t for t in tuning.trials if t.ms is not None]
    best = min(t.ms for t in timed)
    assert [t for t in timed if t.constants == tuning.winner][0].ms == best
    # the kernel the tuner picked against @fill_sms's choice, timed now in alternating rounds (a
    # ~13 us kernel read 3-5% apart when the tuning's figure was compared with one taken later).
    # Both are kernel objects launched directly: the tuned wrapper's own host cost is
    # tests/test_autotune.py's (at 13 us, back-to-back launches are bound by the host's launch path)
    (winner,) = {id(v): v for v in tuned._by_shapes.values()}.values()
    timer = cuda_event_timer(reps=20)
    winner_ms, fill_sms_ms = math.inf, math.inf
    for _ in range(5):
        winner_ms = min(winner_ms, timer(lambda: winner(a, b, c)))
        fill_sms_ms = min(fill_sms_ms, timer(lambda: gemm(a, b, c)))
    assert winner_ms <= fill_sms_ms * 1.03, (winner_ms, fill_sms_ms, tuned.explain())
    assert "tuning took" in tuned.explain()


def test_a_second_process_reuses_the_choice(tmp_path):
    script = (
        "import torch, tkjit\n"
        f"gemm = tkjit.load({str(REPO / 'examples' / 'gemm.tk')!r})\n"
        f"tuned = gemm.autotune({SPACE!r})\n"
        "a = torch.randn(1000, 520, dtype=torch.bfloat16, device='cuda')\n"
        "b = torch.randn(520, 3000, dtype=torch.bfloat16, device='cuda')\n"
        "c = torch.empty(1000, 3000, dtype=torch.bfloat16, device='cuda')\n"
        "tuned(a, b, c); torch.cuda.synchronize()\n"
        "print('FROM_DISK' if tuned.tunings[0].from_disk else 'TIMED')\n")
    env = {**os.environ, "TKJIT_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    first = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert first.returncode == 0 and "TIMED" in first.stdout and "tkjit autotune" in first.stderr, first.stderr
    second = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert second.returncode == 0 and "FROM_DISK" in second.stdout, second.stderr
    assert "tkjit autotune" not in second.stderr  # nothing timed, nothing printed
