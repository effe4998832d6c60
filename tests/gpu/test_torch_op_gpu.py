"""On a GPU: kernel.torch_op() ops on CUDA tensors: eager, torch.compile(fullgraph=True) with
inductor, CUDA graphs (mode="reduce-overhead"), torch's current stream, and a transformer block.
(The CPU side of the same ops is tests/test_torch_op.py.)"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tkjit

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_names = itertools.count()


def opname(stem: str) -> str:
    return f"tkjit_gpu_test::{stem}_{next(_names)}"


@pytest.fixture(scope="module")
def gemm_op():
    return tkjit.load(EXAMPLES / "gemm.tk").torch_op(opname("gemm"), outputs=["C"])


def close(c, a, b):
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)


def test_gemm_op_eager_and_compiled(gemm_op):
    a = torch.randn(256, 128, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(128, 512, dtype=torch.bfloat16, device="cuda")
    close(gemm_op(a, b), a, b)
    f = torch.compile(lambda a, b: gemm_op(a, b) * 2, fullgraph=True)
    close(f(a, b) / 2, a, b)
    torch._dynamo.reset()
    assert torch._dynamo.explain(lambda a, b: gemm_op(a, b) * 2)(a, b).graph_break_count == 0


def test_gemm_op_runs_on_the_current_stream(gemm_op):
    a = torch.randn(512, 256, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(256, 512, dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c = gemm_op(a, b)
        d = c.float().sum()  # queued behind the kernel on the side stream
    side.synchronize()
    close(c, a, b)
    assert torch.isfinite(d)


def test_gemm_op_under_cuda_graphs(gemm_op):
    f = torch.compile(lambda a, b: gemm_op(a, b) + 1, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # warm-up runs, then the replay of the recorded graph
        a = torch.randn(256, 128, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(128, 256, dtype=torch.bfloat16, device="cuda")
        c = f(a, b).clone()
        close(c - 1, a, b)


def test_a_transformer_block_on_the_gpu():
    d_model, heads, n, d = 512, 4, 1024, 128
    ln = tkjit.load(EXAMPLES / "layernorm.tk", constants={"D": d_model}).torch_op(opname("ln"), outputs=["Y"])
    mm = tkjit.load(EXAMPLES / "gemm.tk").torch_op(opname("mm"), outputs=["C"])
    attn = tkjit.load(EXAMPLES / "attention.tk", constants={"D": d}).torch_op(opname("attn"), outputs=["O", "L"])

    def param(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)
    w, b = param(d_model), param(d_model)
    w_qkv, w_out = param(d_model, 3 * heads * d, scale=d_model ** -0.5), param(heads * d, d_model, scale=0.05)

    def block(x, ops):
        h = ln(x, w, b, 1e-5) if ops else F.layer_norm(x, (d_model,), w, b, 1e-5)
        qkv = mm(h, w_qkv) if ops else h @ w_qkv
        q, k, v = qkv.view(1, n, 3, heads, d).permute(2, 0, 3, 1, 4)
        o = attn(q, k, v, d ** -0.5)[0] if ops else F.scaled_dot_product_attention(q, k, v)
        o = o.transpose(1, 2).reshape(n, heads * d)
        return x + (mm(o, w_out) if ops else o @ w_out)

    x = param(n, d_model)
    expected = block(x.float().to(torch.bfloat16), ops=False)
    got = torch.compile(lambda x: block(x, True), fullgraph=True)(x)
    torch.testing.assert_close(got.float(), expected.float(), rtol=5e-2, atol=5e-2)
