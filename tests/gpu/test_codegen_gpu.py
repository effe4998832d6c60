"""On a Hopper GPU: every codegen test kernel and every example through the whole path — emit_ptx,
ptxas, Module.load, Launcher — against float64 torch references.

Inputs are fresh random tensors; every output sits inside a larger buffer filled with NaN, so a
missing write shows as NaN inside and a stray write as a non-NaN outside. Shapes include sizes
that are not multiples of the tiles (and last dimensions that are not multiples of 16 bytes).
Launches on two side streams and a CUDA-graph replay must give bit-identical results.
``test_timings`` prints a few speed ratios (run pytest with -s); it asserts nothing about speed.
"""
from __future__ import annotations

import functools
import time
import zlib

import pytest
import torch

from codegen_cases import ALL_CASES, BY_NAME
from tkjit.codegen import emit_ptx
from tkjit.runtime import driver, toolchain
from tkjit.runtime.launcher import Launcher

pytestmark = pytest.mark.gpu

PAD = 64


@functools.lru_cache(maxsize=None)
def compiled(name: str):
    ptx, meta = emit_ptx(BY_NAME[name].kernel())
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    module = driver.Module.load(cubin, ptx)
    fn = module.get_function(meta["entry"])
    driver.set_dynamic_smem(fn, meta["smem_bytes"], module.device)
    launcher = Launcher(fn, meta["params"], meta["grid"], meta["block"], meta["smem_bytes"],
                        name=meta["name"], device=module.device)
    return launcher, meta, report, module


def prepare(name: str, shape: dict, seed: int):
    """(arguments, {output: (buffer, view)}, inputs on the GPU) with poisoned outputs."""
    case = BY_NAME[name]
    inputs = case.make(shape, torch.Generator().manual_seed(seed))
    args, outs, on_gpu = [], {}, {}
    for pname in case.params:
        v = inputs[pname]
        if not isinstance(v, torch.Tensor):
            args.append(v)
            on_gpu[pname] = v
            continue
        if pname in case.outputs:
            buf = torch.full((v.numel() + 2 * PAD,), float("nan"), dtype=v.dtype, device="cuda")
            view = buf[PAD:PAD + v.numel()].view(v.shape)
            outs[pname] = (buf, view)
            args.append(view)
        else:
            args.append(v.cuda())
        on_gpu[pname] = args[-1]
    return args, outs, on_gpu


def check(name: str, outs: dict, on_gpu: dict) -> None:
    case = BY_NAME[name]
    ref = case.reference({k: v for k, v in on_gpu.items()})
    for out, (buf, view) in outs.items():
        outside = torch.cat([buf[:PAD], buf[PAD + view.numel():]])
        assert torch.isnan(outside.double()).all(), f"{name}: {out}: elements outside the output were written"
        assert not torch.isnan(view.double()).any(), f"{name}: {out}: elements were not written"
        expected = ref[out].to(view.device)   # references of scalar-only kernels are made on the CPU
        torch.testing.assert_close(view.double(), expected, rtol=case.rtol, atol=case.atol)


GPU_PARAMS = [(c.name, s) for c in ALL_CASES for s in c.shapes]


@pytest.mark.parametrize("name,shape", GPU_PARAMS,
                         ids=[f"{n}-{'x'.join(map(str, s.values()))}" for n, s in GPU_PARAMS])
def test_matches_torch(name, shape):
    launcher = compiled(name)[0]
    args, outs, on_gpu = prepare(name, shape, seed=zlib.crc32(f"{name}{shape}".encode()) % 1000)
    launcher(*args)
    torch.cuda.synchronize()
    check(name, outs, on_gpu)


@pytest.mark.parametrize("name", ["softmax", "ex_layernorm", "ex_gemm", "attention", "gemm_atb"])
def test_streams_and_graphs_are_identical(name):
    launcher = compiled(name)[0]
    shape = BY_NAME[name].shapes[-1]
    args, outs, on_gpu = prepare(name, shape, seed=7)
    launcher(*args)
    torch.cuda.synchronize()
    check(name, outs, on_gpu)
    eager = {k: view.clone() for k, (_, view) in outs.items()}
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    runs = []
    for s in streams:                      # the same inputs, fresh poisoned outputs per stream
        a2, o2, _ = prepare(name, shape, seed=7)
        with torch.cuda.stream(s):
            launcher(*a2)
        runs.append(o2)
    for s in streams:
        s.synchronize()
    a3, o3, _ = prepare(name, shape, seed=7)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launcher(*a3)
    for _, view in o3.values():
        view.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    runs.append(o3)
    for run in runs:
        for k, (_, view) in run.items():
            assert torch.equal(view.view(torch.uint8) if view.dtype.itemsize == 1 else view, eager[k]), \
                f"{name}: {k} differs between launches"


def test_registers_match_the_report():
    launcher, meta, report, module = compiled("gemm")
    fn = module.get_function(meta["entry"])
    assert driver.function_attribute(fn, "NUM_REGS") >= report[meta["name"]].registers


def _time(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def test_timings():
    """Speed of the register-tile backend against torch, printed (informational)."""
    lines = []
    launcher = compiled("ex_gemm")[0]
    n = 4096
    a, b = torch.randn(n, n, device="cuda").bfloat16(), torch.randn(n, n, device="cuda").bfloat16()
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    t_ours, t_ref = _time(lambda: launcher(a, b, c)), _time(lambda: a @ b)
    lines.append(f"gemm {n}^3: {2 * n ** 3 / t_ours / 1e12:.0f} TFLOP/s, torch {2 * n ** 3 / t_ref / 1e12:.0f}")
    launcher = compiled("ex_softmax")[0]
    x = torch.randn(16384, 1024, device="cuda").bfloat16()
    y = torch.empty_like(x)
    t_ours, t_ref = _time(lambda: launcher(x, y)), _time(lambda: torch.softmax(x, dim=-1))
    lines.append(f"softmax 16384x1024: {2 * x.numel() * 2 / t_ours / 1e9:.0f} GB/s, torch "
                 f"{2 * x.numel() * 2 / t_ref / 1e9:.0f}")
    launcher = compiled("ex_layernorm")[0]
    w, bias = torch.randn(1024, device="cuda").bfloat16(), torch.randn(1024, device="cuda").bfloat16()
    t_ours = _time(lambda: launcher(x, w, bias, y, 1e-5))
    t_ref = _time(lambda: torch.nn.functional.layer_norm(x, (1024,), w, bias, 1e-5))
    lines.append(f"layernorm 16384x1024: {2 * x.numel() * 2 / t_ours / 1e9:.0f} GB/s, torch "
                 f"{2 * x.numel() * 2 / t_ref / 1e9:.0f}")
    launcher = compiled("ex_attention")[0]
    q = torch.randn(4, 16, 2048, 128, device="cuda").bfloat16()
    k, v = torch.randn_like(q), torch.randn_like(q)
    o = torch.empty_like(q)
    lse = torch.empty(4, 16, 2048, device="cuda")
    flops = 4 * 4 * 16 * 2048 * 2048 * 128
    t_ours = _time(lambda: launcher(q, k, v, o, lse, 128 ** -0.5))
    t_ref = _time(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    lines.append(f"attention 4x16x2048x128: {flops / t_ours / 1e12:.0f} TFLOP/s, torch sdpa {flops / t_ref / 1e12:.0f}")
    print("\n" + "\n".join(lines))
