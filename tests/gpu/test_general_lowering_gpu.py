"""On a Hopper GPU: the corpus of tests/general_corpus.py through the general sm_90a lowering,
at tile multiples and ragged shapes, against float32 torch and against the interpreter. Outputs
are poisoned (NaN) and sit at the start of a larger buffer whose tail must stay untouched."""
from __future__ import annotations

import pytest
import torch

import tkjit

from general_corpus import CASES

pytestmark = pytest.mark.gpu

SENTINEL = 12345.0


def _guarded(out: torch.Tensor, guard: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """``out``'s values in a buffer with ``guard`` sentinel elements after it."""
    buf = torch.full((out.numel() + guard,), SENTINEL, dtype=out.dtype, device=out.device)
    view = buf[:out.numel()].view(out.shape)
    view.copy_(out)
    return view, buf[out.numel():]


@pytest.mark.parametrize("case,shape", [(c, s) for c in CASES for s in c.shapes],
                         ids=lambda x: x.name if hasattr(x, "name") else "x".join(map(str, x.values())))
def test_general_lowering_matches_torch(case, shape):
    torch.manual_seed(1)
    k = tkjit.compile(case.source, constants=case.constants or None, lowering="general",
                      require_hopper=True)
    args = case.make(shape, "cuda")
    want = case.reference(args)
    guards = {}
    for i in case.outputs:
        args[i], guards[i] = _guarded(args[i])
    k(*args)
    torch.cuda.synchronize()
    assert k.metadata["lowering"] == "general"
    for i, ref in zip(case.outputs, want):
        got = args[i].float()
        assert not torch.isnan(got).any(), f"{case.name}: unwritten outputs"
        err = ((got - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"{case.name} {shape}: relative error {err}"
        assert bool((guards[i] == SENTINEL).all()), f"{case.name}: wrote past its output"


def _aligned(shape: dict) -> dict:
    """The shape with every size a multiple of 8 (rows of whole 16-byte units, which TMA needs)."""
    return {k: -(-v // 8) * 8 for k, v in shape.items()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_general_lowering_agrees_with_the_interpreter(case):
    torch.manual_seed(2)
    k = tkjit.compile(case.source, constants=case.constants or None, lowering="general",
                      require_hopper=True)
    gpu = case.make(_aligned(case.cpu_shape), "cuda")
    cpu = [a.cpu() if isinstance(a, torch.Tensor) else a for a in gpu]
    k(*gpu)
    k(*cpu)
    torch.cuda.synchronize()
    for i in case.outputs:
        a, b = gpu[i].cpu().float(), cpu[i].float()
        err = ((a - b).norm() / b.norm().clamp_min(1e-6)).item()
        assert err < 1e-2, f"{case.name}: GPU and interpreter differ by {err}"


def test_rows_tma_cannot_address_take_another_backend():
    """Rows that are not whole 16-byte units: the kernel recompiles for them at the launch (the
    general lowering's copying producer, lower_copy.py) and is still right."""
    from general_corpus import BY_NAME
    case = BY_NAME["gemm_bias_relu"]
    torch.manual_seed(3)
    k = tkjit.compile(case.source, lowering="general")
    args = case.make({"M": 300, "N": 260, "K": 100}, "cuda")   # K = 100: 200-byte rows of A
    want = case.reference(args)
    k(*args)
    torch.cuda.synchronize()
    err = ((args[3].float() - want[0]).norm() / want[0].norm()).item()
    assert err < 1e-2


# -- the copying producer (codegen/hopper/lower_copy.py): rows TMA cannot address ------------

@pytest.mark.parametrize("m, n, k", [(1000, 1500, 700), (129, 257, 65), (130, 258, 66), (300, 520, 100),
                                     (1000, 3000, 520)])
def test_the_copying_producer_matches_torch(m, n, k):
    """examples/gemm.tk with lowering='general' (require_hopper: no other backend may take it) at
    rows of A, B or C that are not whole 16-byte units (small shapes take @fill_sms's SPLIT = 2
    variant), then at aligned rows through the same kernel object (where the shape picks the same
    @fill_sms variant, through its copying variant's TMA path, C from registers)."""
    import warnings
    from pathlib import Path
    kernel = tkjit.load(Path(__file__).resolve().parents[2] / "examples" / "gemm.tk", lowering="general",
                        require_hopper=True)
    torch.manual_seed(4)
    for mm, nn, kk in ((m, n, k), (m, n + (-n) % 8, k + (-k) % 8)):
        a = torch.randn(mm, kk, device="cuda").bfloat16()
        b = torch.randn(kk, nn, device="cuda").bfloat16()
        c, guard = _guarded(torch.full((mm, nn), float("nan"), device="cuda").bfloat16())
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no fallback to the register-tile backend
            kernel(a, b, c)
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        assert not torch.isnan(c.float()).any()
        assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2, (mm, nn, kk)
        assert bool((guard == SENTINEL).all())


@pytest.mark.parametrize("name,shape", [("linear", {"M": 300, "N": 260, "K": 100}),
                                        ("gemm_bias_relu", {"M": 1000, "N": 1500, "K": 700}),
                                        ("gemm_atb", {"M": 264, "N": 300, "K": 130}),
                                        ("gemm_fp8_scaled", {"M": 264, "N": 300, "K": 200}),
                                        ("bmm", {"B": 3, "M": 300, "N": 260, "K": 100})])
def test_the_copying_producer_takes_other_kernels(name, shape):
    from general_corpus import BY_NAME
    case = BY_NAME[name]
    torch.manual_seed(5)
    k = tkjit.compile(case.source, constants=case.constants or None, lowering="general", require_hopper=True)
    args = case.make(shape, "cuda")
    want = case.reference(args)
    k(*args)
    k(*args)  # twice: the variant's launcher from then on
    torch.cuda.synchronize()
    for i, ref in zip(case.outputs, want):
        got = args[i].float()
        assert ((got - ref).norm() / ref.norm()).item() < 1e-2, name
