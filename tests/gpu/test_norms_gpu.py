"""On a GPU: the row-wise examples (RMSNorm, residual + LayerNorm, LayerNorm, softmax) as written,
at D = 1024 (register tiles in the contiguous column order) and D = 4096 / 8192 (run by
stream-cols over column chunks), each stream-cols load form too, at row counts that are and are
not multiples of BR, outputs poisoned with NaN and surrounded by poison (nothing written outside
them), against float64 torch and against the interpreter."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PORTABLE = "canonicalize,stream-cols"


def _rows(r, d, **kw):
    return torch.randn(r, d, **kw)


def _poisoned(r, d):
    """An output view with a NaN row of poison above and below it."""
    full = torch.full((r + 2, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    return full, full[1:-1]


def _run(name, d, r, pipeline=None):
    kernel = tkjit.load(EXAMPLES / f"{name}.tk", constants={"C" if name == "softmax" else "D": d},
                        pipeline=pipeline)
    g = torch.Generator(device="cuda").manual_seed(r + d)
    x = (torch.randn(r, d, device="cuda", generator=g) * 2 + 0.5).bfloat16()
    w = torch.randn(d, device="cuda", generator=g).bfloat16()
    b = torch.randn(d, device="cuda", generator=g).bfloat16()
    res = torch.randn(r, d, device="cuda", generator=g).bfloat16()
    outs = [_poisoned(r, d) for _ in range(2)]
    if name == "rmsnorm":
        args = [x, w, outs[0][1], 1e-6]
        xd = x.double()
        truth = [xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()]
    elif name == "layernorm":
        args = [x, w, b, outs[0][1], 1e-5]
        truth = [torch.nn.functional.layer_norm(x.double(), (d,), w.double(), b.double(), eps=1e-5)]
    elif name == "softmax":
        args = [x, outs[0][1]]
        truth = [torch.softmax(x.double(), -1)]
    else:
        args = [x, res, w, b, outs[0][1], outs[1][1], 1e-5]
        h = x.double() + res.double()
        truth = [h, torch.nn.functional.layer_norm(h, (d,), w.double(), b.double(), eps=1e-5)]
    kernel(*args)
    torch.cuda.synchronize()
    for (full, view), t in zip(outs, truth):
        assert torch.isnan(full[0]).all() and torch.isnan(full[-1]).all(), "written outside the output"
        assert not torch.isnan(view).any(), "an output element was not written"
        err = ((view.double() - t).norm() / t.norm()).item()
        assert err < 1e-2, f"{name} D={d} R={r}: relative error {err:.3g}"
    if r <= 40 and d == 4096:  # the interpreter runs the same IR (after stream-cols) on the CPU
        cpu = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
        cpu_outs = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.data_ptr() in
                    (outs[0][1].data_ptr(), outs[1][1].data_ptr())]
        for i in cpu_outs:
            cpu[i] = torch.full_like(cpu[i], float("nan"))
        kernel(*cpu)
        for i in cpu_outs:
            torch.testing.assert_close(args[i].cpu().float(), cpu[i].float(), rtol=2e-2, atol=2e-2)
    return kernel


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm", "softmax"])
@pytest.mark.parametrize("d", [1024, 4096, 8192])
@pytest.mark.parametrize("r", [1000, 33])
@pytest.mark.parametrize("direct", [False, True])
def test_row_wise_example_on_the_gpu(name, d, r, direct):
    kernel = _run(name, d, r, f"{PORTABLE}{{direct=true}}" if direct else None)
    text = str(kernel.explain())
    if d > 1024:
        assert "streamed over" in text


@pytest.mark.parametrize("options", ["loads=shared stages=4", "loads=registers", "loads=registers cols=256",
                                     "loads=registers prefetch=false", "order=forward", "direct=true"])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm"])
def test_every_stream_form_on_the_gpu(name, options):
    for d, r in ((1024, 1000), (4096, 1000), (8192, 33)):
        _run(name, d, r, f"{PORTABLE}{{{options}}}")


@pytest.mark.parametrize("options", ["cache=none", "cache=none direct=true", "force=true cache=shared cols=256",
                                     "force=true cache=shared cols=128 direct=true", "cache_bytes=163840",
                                     "cache_bytes=32768 stages=4", "resident=2 stages=4",
                                     "cache=none loads=registers resident=2", "cache=none direct=true cols=256 stages=4"])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm"])
def test_cached_and_resident_stream_forms_on_the_gpu(name, options):
    """stream-cols{cache=...} (row blocks kept whole or in part in shared memory, copy_cols in
    both column orders; cache=none: the forms before it) and {resident=k} (a persistent grid),
    each at D = 1024, 4096 and 8192: ragged row counts, poisoned
    outputs with poison around them, float64 torch and (R <= 40, D = 4096) the interpreter."""
    for d, r in ((1024, 1000), (4096, 33), (8192, 1000)):
        _run(name, d, r, f"{PORTABLE}{{{options}}}")
