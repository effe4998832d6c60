"""kernel.torch_op(): a kernel as a torch.library custom op, on CPU tensors (the interpreter).

torch.compile here uses the "aot_eager" backend: it traces with fake tensors through the op's fake
implementation exactly as inductor does, without inductor's C++ compile (about 20 s on the CI CPU).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tkjit  # noqa: E402
from tkjit.errors import LaunchError, TkError  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
_names = itertools.count()


def opname(stem: str) -> str:
    """A fresh op name: an op registers once per process."""
    return f"tkjit_test::{stem}_{next(_names)}"


def compiled(fn):
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


def breaks(fn, *args) -> int:
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args).graph_break_count


@pytest.fixture(scope="module")
def softmax_op():
    return tkjit.load(EXAMPLES / "softmax.tk", constants={"C": 64}).torch_op(opname("softmax"), outputs=["Y"])


@pytest.fixture(scope="module")
def gemm_op():
    return tkjit.load(EXAMPLES / "gemm.tk").torch_op(opname("gemm"), outputs=["C"])


def test_the_schema_comes_from_the_signature(softmax_op, gemm_op):
    assert softmax_op.tkjit_signature.schema() == "(Tensor X) -> Tensor Y"
    assert gemm_op.tkjit_signature.schema() == "(Tensor A, Tensor B) -> Tensor C"


def test_softmax_under_torch_compile_fullgraph_matches_eager(softmax_op):
    def f(x):
        return softmax_op(x * 2.0) + 1.0

    x = torch.randn(40, 64, dtype=torch.bfloat16)
    expected = torch.softmax((x * 2.0).float(), -1).to(torch.bfloat16) + 1.0
    torch.testing.assert_close(f(x), expected, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(compiled(f)(x), expected, rtol=1e-2, atol=1e-2)
    assert breaks(f, x) == 0


def test_gemm_under_torch_compile_with_dynamic_shapes(gemm_op):
    f = torch.compile(lambda a, b: gemm_op(a, b), fullgraph=True, dynamic=True, backend="aot_eager")
    for m, n, k in [(100, 90, 70), (33, 17, 40)]:
        a = torch.randn(m, k, dtype=torch.bfloat16)
        b = torch.randn(k, n, dtype=torch.bfloat16)
        c = f(a, b)
        assert c.shape == (m, n) and c.dtype == torch.bfloat16
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


def test_torch_export_records_the_op(gemm_op):
    class Project(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(32, 48, dtype=torch.bfloat16), requires_grad=False)

        def forward(self, x):
            return gemm_op(x, self.w)

    x = torch.randn(20, 32, dtype=torch.bfloat16)
    ep = torch.export.export(Project(), (x,))
    ns, name = gemm_op._qualname.split("::")
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert getattr(getattr(torch.ops, ns), name).default in targets
    torch.testing.assert_close(ep.module()(x).float(), x.float() @ ep.module().w.float(), rtol=2e-2, atol=2e-2)


def test_scalar_arguments_f32_and_i32():
    k = tkjit.compile("""
kernel axpb(X: gl<f32>[R, 16], Y: gl<f32>[R, 16], a: f32, b: i32) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 16] = X.tile(i, 0)
    Y.tile(i, 0) = x * a + cvt<f32>(b)
  }
}""")
    op = k.torch_op(opname("axpb"), outputs=["Y"])
    assert op.tkjit_signature.schema() == "(Tensor X, float a, int b) -> Tensor Y"
    x = torch.randn(20, 16)
    f = compiled(lambda x, a, b: op(x, a, b))
    torch.testing.assert_close(f(x, 0.5, 3), x * 0.5 + 3)
    assert breaks(lambda x: op(x, 0.5, 3), x) == 0


def test_layernorm_op_with_its_eps():
    op = tkjit.load(EXAMPLES / "layernorm.tk", constants={"D": 64}).torch_op(opname("ln"), outputs="Y")
    x, w, b = (torch.randn(*s, dtype=torch.bfloat16) for s in [(24, 64), (64,), (64,)])
    expected = F.layer_norm(x.float(), (64,), w.float(), b.float(), 1e-5)
    torch.testing.assert_close(compiled(lambda x: op(x, w, b, 1e-5))(x).float(), expected, rtol=2e-2, atol=2e-2)


def test_a_strided_input_is_copied_not_misread(gemm_op):
    a = torch.randn(64, 40, dtype=torch.bfloat16).t()  # 40x64, column-major
    b = torch.randn(64, 24, dtype=torch.bfloat16)
    torch.testing.assert_close(gemm_op(a, b).float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


ATTENTION_D = 64


def test_a_transformer_block_under_torch_compile_fullgraph():
    """layernorm -> fused QKV GEMM -> attention on views of the QKV output -> output GEMM, each a
    tkjit op, against the same block in eager torch."""
    d_model, heads, n = 128, 2, 40
    d = ATTENTION_D
    ln = tkjit.load(EXAMPLES / "layernorm.tk", constants={"D": d_model}).torch_op(opname("blk_ln"), outputs=["Y"])
    mm = tkjit.load(EXAMPLES / "gemm.tk").torch_op(opname("blk_mm"), outputs=["C"])
    attn = tkjit.load(EXAMPLES / "attention.tk", constants={"D": d}).torch_op(opname("blk_attn"),
                                                                                outputs=["O", "L"])
    g = torch.Generator().manual_seed(0)

    def param(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)
    w, b = param(d_model), param(d_model)
    w_qkv, w_out = param(d_model, 3 * heads * d, scale=d_model ** -0.5), param(heads * d, d_model, scale=0.1)

    def block(x, ops: bool):
        if ops:
            h = ln(x, w, b, 1e-5)
        else:
            h = F.layer_norm(x.float(), (d_model,), w.float(), b.float(), 1e-5).to(torch.bfloat16)
        qkv = mm(h, w_qkv) if ops else (h.float() @ w_qkv.float()).to(torch.bfloat16)
        q, k, v = qkv.view(1, n, 3, heads, d).permute(2, 0, 3, 1, 4)  # 3 x (B, H, N, D) strided views
        if ops:
            o, _ = attn(q, k, v, d ** -0.5)
        else:
            o = F.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(torch.bfloat16)
        o = o.transpose(1, 2).reshape(n, heads * d)
        return x + (mm(o, w_out) if ops else (o.float() @ w_out.float()).to(torch.bfloat16))

    x = param(n, d_model)
    expected = block(x, ops=False)
    torch.testing.assert_close(compiled(lambda x: block(x, True))(x), expected, rtol=3e-2, atol=3e-2)
    assert breaks(lambda x: block(x, True), x) == 0


# -- what is refused, and how ------------------------------------------------------------

def test_an_output_dim_no_input_binds_must_be_given():
    k = tkjit.compile("""
kernel fill(X: gl<f32>[R, 16], Y: gl<f32>[S, 16]) {
  for i in blocks(R / 16) {
    x: rt<f32>[16, 16] = X.tile(i, 0)
    Y.tile(i, 0) = x
  }
}""")
    with pytest.raises(TkError, match=r"output Y's dimension S is not bound by any input \(X\); give it"):
        k.torch_op(opname("fill"), outputs=["Y"])
    fixed = k.torch_op(opname("fill"), outputs=["Y"], dims={"S": 32})
    assert fixed.tkjit_signature.schema() == "(Tensor X) -> Tensor Y"
    x = torch.randn(32, 16)
    torch.testing.assert_close(compiled(lambda x: fixed(x))(x), x)
    as_arg = k.torch_op(opname("fill"), outputs=["Y"], dim_args=["S"])
    assert as_arg.tkjit_signature.schema() == "(Tensor X, int S) -> Tensor Y"
    torch.testing.assert_close(compiled(lambda x: as_arg(x, 32))(x), x)
    with pytest.raises(TkError, match="dimension R is bound by argument X"):
        k.torch_op(opname("fill"), outputs=["Y"], dims={"R": 3, "S": 1})


@pytest.mark.parametrize("outputs, message", [
    (["Q"], "no parameter named 'Q' \\(parameters: A, B, C\\)"),
    (["A"], "never stores into 'A'"),
    ([], "name at least one output"),
])
def test_bad_outputs_are_refused(outputs, message):
    gemm = tkjit.load(EXAMPLES / "gemm.tk")
    with pytest.raises(TkError, match=message):
        gemm.torch_op(opname("bad"), outputs=outputs)


def test_an_input_the_kernel_writes_is_refused():
    attention = tkjit.load(EXAMPLES / "attention.tk", constants={"D": 64})
    with pytest.raises(TkError, match="stores into 'L'; name it in outputs="):
        attention.torch_op(opname("attn"), outputs=["O"])


def test_names_and_reregistration():
    softmax = tkjit.load(EXAMPLES / "softmax.tk", constants={"C": 64})
    with pytest.raises(TkError, match="'namespace::name'"):
        softmax.torch_op("softmax", outputs=["Y"])
    name = opname("twice")
    softmax.torch_op(name, outputs=["Y"])
    with pytest.raises(TkError, match="already registered"):
        softmax.torch_op(name, outputs=["Y"])


def test_a_wrong_dtype_is_a_tkjit_error_while_tracing(softmax_op):
    with pytest.raises(LaunchError, match=r"argument X: expected torch.bfloat16 \(gl<bf16>\), got torch.float32"):
        softmax_op(torch.randn(16, 64))
    with pytest.raises(Exception, match="expected torch.bfloat16"):
        compiled(lambda x: softmax_op(x))(torch.randn(16, 64))
