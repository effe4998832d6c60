"""Strided views on the GPU paths, checked on the CPU: the register-tile backend's variant with
stride parameters (option ``strided``) runs on views in the PTX simulator against the
interpreter, with everything around each output left as it was; contiguous kernels keep their
PTX (no stride parameters); TMA maps of views are encoded with the views' own strides (a fake
driver records them); the launcher packs the stride parameters, and refuses, naming the argument
and the stride, what no kernel can take."""
from __future__ import annotations

import ctypes

import pytest
import torch

import tkjit
from simkit import lower, simulate_views
from support import fake_cuda_tensor_class
from test_tensormap import FakeEncode, entry
from tkjit.codegen import emit_ptx
from tkjit.errors import LaunchError, StridedArgument
from tkjit.runtime.launcher import Launcher

FakeCuda = fake_cuda_tensor_class()

GEMM = """
kernel gemm(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N]) {
  for (m, n) in blocks(M / 32, N / 32) {
    acc: rt<f32>[32, 32] = zeros()
    for k in 0 .. K / 32 {
      a: st<bf16>[32, 32] = A.tile(m, k)
      b: st<bf16>[32, 32] = B.tile(k, n)
      acc = mma_AB(a, b, acc)
    }
    C.tile(m, n) = cvt<bf16>(acc)
  }
}
"""

SCALE4 = """
kernel scale4(X: gl<bf16>[B, H, N, 32], Y: gl<bf16>[B, H, N, 32], bias: gl<f32>[32]) {
  for (b, h, i) in blocks(B, H, N / 16) {
    x: rt<f32>[16, 32] = X.tile(b, h, i, 0)
    v: rv<f32>[32] = bias.tile(0)
    Y.tile(b, h, i, 0) = cvt<bf16>(add_col(x * 2.0, v))
  }
}
"""


def nan(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype)


def strided_ptx(src: str, constants=None):
    return emit_ptx(lower(src, constants), {"strided": True})


def test_a_contiguous_compile_has_no_stride_parameters_and_the_variant_has_them():
    plain, meta = emit_ptx(lower(GEMM))
    ptx, smeta = strided_ptx(GEMM)
    assert "_stride_" not in plain and all("strides" not in p for p in meta["params"])
    assert ptx.count(".param .s64 gemm_stride_") == 3  # one per tensor: rank 2, dim 0's stride
    assert [p["strides"] for p in smeta["params"]] == ["param"] * 3 and meta["strided_variant"]


@pytest.mark.parametrize("row_a", [64, 70])  # 70 bf16 = 140 bytes: rows off 16 bytes, the per-element path
def test_gemm_on_views_in_the_simulator(row_a):
    torch.manual_seed(0)
    m, n, k = 40, 48, 64
    a_base = torch.randn(m, row_a + 8, dtype=torch.bfloat16)
    a = a_base[:, 8:8 + k]                                  # an offset of 16 bytes, row stride row_a + 8
    b_base = torch.randn(2 * k, n, dtype=torch.bfloat16)
    b = b_base[::2]                                         # every other row
    c_base = nan(m, n + 24)
    c = c_base[:, 8:8 + n]                                  # a column slice of a wider output
    expected = a.float() @ b.float()
    a_before, b_before = a_base.clone(), b_base.clone()
    simulate_views([a, b, c], strided_ptx(GEMM), {"M": m, "K": k, "N": n})
    torch.testing.assert_close(c.float(), expected, rtol=2e-2, atol=1e-1)
    assert c_base[:, :8].isnan().all() and c_base[:, 8 + n:].isnan().all()  # nothing written outside C
    assert torch.equal(a_base, a_before) and torch.equal(b_base, b_before)


def test_rank4_views_of_a_fused_qkv_projection_in_the_simulator():
    """q of qkv.view(B, N, 3, H, D) permuted to (B, H, N, D); the output written through a
    transpose of a (B, N, H, D) buffer; a vector parameter beside them."""
    torch.manual_seed(1)
    bsz, n, h, d = 2, 32, 3, 32
    qkv = torch.randn(bsz, n, 3 * h * d, dtype=torch.bfloat16)
    q = qkv.view(bsz, n, 3, h, d)[:, :, 0].transpose(1, 2)
    out_base = nan(bsz, n, h, d)
    out = out_base.transpose(1, 2)
    bias = torch.randn(d)
    interp = nan(bsz, h, n, d)
    tkjit.compile(SCALE4)(q, interp, bias)  # the interpreter, on the same view
    simulate_views([q, out, bias], strided_ptx(SCALE4), {"B": bsz, "H": h, "N": n})
    assert not out_base.isnan().any()
    torch.testing.assert_close(out.float(), interp.float(), rtol=0, atol=0)
    torch.testing.assert_close(out.float(), (q.float() * 2 + bias).bfloat16().float(), rtol=0, atol=0)


# ------------------------------------------------------------------ the launcher, fake driver

def fake(t: torch.Tensor) -> torch.Tensor:
    out = t.as_subclass(FakeCuda)
    out.fake_device = 0
    return out


def recording_launcher(signature, slots: int, **kw):
    calls = []

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_void_p * slots).from_address(params)
        calls.append([pointers[i] for i in range(slots)])
        return (0,)
    return Launcher(object(), signature, [["dim", "M"]], 128, 0, name="k", launch=launch,
                    current_device=lambda: 0, current_stream=lambda dev: 0, **kw), calls


def test_stride_parameters_are_packed_after_the_named_dims():
    sig = [{"kind": "global", "name": "X", "dtype": "bf16", "dims": ["M", "K"], "strides": "param"},
           {"kind": "global", "name": "Y", "dtype": "bf16", "dims": ["B", "M", "K"], "strides": "param",
            "writes": True}]
    launcher, calls = recording_launcher(sig, 8)  # X, Y, M, K, B, X's stride, Y's two strides
    assert launcher.stride_slots == [(0, 0), (1, 0), (1, 1)] and launcher.source is not None
    x = fake(torch.zeros(32, 200, dtype=torch.bfloat16)[:, 16:80])
    y = fake(torch.zeros(32, 3, 64, dtype=torch.bfloat16).transpose(0, 1))
    launcher(x, y)
    assert ctypes.c_uint64.from_address(calls[0][0]).value == x.data_ptr()
    assert [ctypes.c_int32.from_address(calls[0][i]).value for i in (2, 3, 4)] == [32, 64, 3]
    assert [ctypes.c_int64.from_address(calls[0][i]).value for i in (5, 6, 7)] == [200, 64, 192]
    launcher(fake(torch.zeros(32, 64, dtype=torch.bfloat16)), fake(torch.zeros(3, 32, 64, dtype=torch.bfloat16)))
    assert [ctypes.c_int64.from_address(calls[1][i]).value for i in (5, 6, 7)] == [64, 2048, 64]


def test_a_view_only_tma_reads_gets_its_strides_in_the_map():
    enc = FakeEncode()
    sig = [{"kind": "global", "name": "A", "dtype": "bf16", "dims": ["M", "K"], "strides": "map"},
           {"kind": "global", "name": "C", "dtype": "bf16", "dims": ["M", "K"], "writes": True},
           entry(param=0)]
    launcher, calls = recording_launcher(sig, 5, encode_map=enc)
    base = torch.zeros(256, 192, dtype=torch.bfloat16)
    a = fake(base[:, 64:128])
    launcher(a, fake(torch.zeros(256, 64, dtype=torch.bfloat16)))
    assert enc.calls[-1] == (a.data_ptr(), (64, 256), (384,))  # 192 elements x 2 bytes per row
    assert len(calls) == 1
    launcher(fake(torch.zeros(256, 64, dtype=torch.bfloat16)), fake(torch.zeros(256, 64, dtype=torch.bfloat16)))
    assert enc.calls[-1][2] == (128,) and len(calls) == 2  # a contiguous one: the row-major strides


def test_views_tma_cannot_take_are_strided_arguments_naming_the_stride():
    sig = [{"kind": "global", "name": "A", "dtype": "bf16", "dims": ["M", "K"], "strides": "map"},
           {"kind": "global", "name": "C", "dtype": "bf16", "dims": ["M", "K"], "writes": True},
           entry(param=0)]
    launcher, calls = recording_launcher(sig, 5, encode_map=FakeEncode())
    c = fake(torch.zeros(256, 64, dtype=torch.bfloat16))
    with pytest.raises(StridedArgument, match=r"k: argument 0 \('A'\): TMA needs every stride but the last to be "
                                              r"a multiple of 16 bytes, but dim 0 has stride 100 \(200 bytes") as e:
        launcher(fake(torch.zeros(256, 100, dtype=torch.bfloat16)[:, :64]), c)
    assert e.value.copy_only  # no variant takes it: the kernel object copies
    with pytest.raises(StridedArgument, match=r"argument 1 \('C'\): this kernel addresses the tensor row-major") as e:
        launcher(fake(torch.zeros(256, 64, dtype=torch.bfloat16)), fake(torch.zeros(256, 128, dtype=torch.bfloat16)[:, :64]))
    assert not e.value.copy_only  # a variant with stride parameters would take it
    with pytest.raises(LaunchError, match=r"argument 0 \('A'\): the tensor's last dimension must be contiguous"):
        launcher(fake(torch.zeros(64, 256, dtype=torch.bfloat16).t()), c)
    assert calls == []


def test_an_output_view_that_overlaps_itself_or_another_argument_is_refused():
    sig = [{"kind": "global", "name": "X", "dtype": "f32", "dims": ["M", "K"], "strides": "param"},
           {"kind": "global", "name": "Y", "dtype": "f32", "dims": ["M", "K"], "strides": "param", "writes": True}]
    launcher, calls = recording_launcher(sig, 5)
    x = fake(torch.zeros(64, 64))
    with pytest.raises(LaunchError, match=r"argument 1 \('Y'\): the kernel stores into it, but its elements overlap"):
        launcher(x, fake(torch.zeros(1, 64).expand(64, 64)))
    buf = torch.zeros(64, 128)
    with pytest.raises(LaunchError, match=r"argument 1 \('Y'\) is written by the kernel and overlaps argument 0"):
        launcher(fake(buf[:, :64]), fake(buf[:, 32:96]))
    assert calls == []


# ------------------------------------------------------------------ which tensors take views as they are

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def strides_of(kernel) -> dict:
    kernel.asm["ptx"]  # noqa: B018 - the metadata
    return {p["name"]: p.get("strides") for p in kernel.metadata["params"] if p["kind"] == "global"}


def test_tensors_only_tma_addresses_take_views_through_their_maps():
    """The general lowering marks what no emitted code addresses by pointer (the GEMM's copying
    producer and register epilogue run only for rows TMA cannot address, where the launcher copies
    views instead); attention stores O through its staging and a TMA map, L (a vector) by pointer
    (the attention template, deleted 2026-11-27, stored O by pointer too)."""
    assert strides_of(tkjit.load(EXAMPLES / "gemm.tk", cache=False)) == {"A": "map", "B": "map", "C": "map"}
    assert strides_of(tkjit.load(EXAMPLES / "attention.tk", cache=False)) == \
        {"Q": "map", "K": "map", "V": "map", "O": "map", "L": None}
    assert strides_of(tkjit.load(EXAMPLES / "gemm_bias_gelu.tk", cache=False)) == \
        {"A": "map", "B": "map", "Bias": None, "C": "map"}
    split = tkjit.load(EXAMPLES / "gemm.tk", cache=False, constants={"SPLIT": 2})
    assert strides_of(split)["C"] is None  # split-K stores its parts from registers, by pointer


@pytest.mark.parametrize("example", ["softmax.tk", "layernorm.tk", "gemm_bias_gelu.tk"])
def test_strided_variants_assemble_without_spills(example):
    from tkjit.runtime import toolchain
    variant = tkjit.load(EXAMPLES / example, cache=False)._recompiled(strided=True)
    ptx, meta = variant.asm["ptx"], variant.metadata
    assert ".param .s64" in ptx and all(p["strides"] == "param" for p in meta["params"] if p["kind"] == "global")
    _, report = toolchain.assemble(ptx, name=meta["name"])
    fn = report[meta["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0


def test_the_strides_a_kernel_is_given_and_a_views_span():
    from tkjit.runtime.strides import effective, overlaps_itself, span_bytes, tma_refusal
    assert effective((4, 1, 8), (999, 5, 1)) == (999, 8, 1)      # a dim of one element: row-major
    assert effective((3, 0, 2), (7, 7, 1)) == (7, 2, 1)
    x = torch.zeros(6, 10)[1:5, 2:9]
    assert span_bytes(tuple(x.shape), x.stride(), 4) == (3 * 10 + 6 + 1) * 4
    assert overlaps_itself((4, 8), (0, 1)) and not overlaps_itself((4, 8), (8, 1))
    assert overlaps_itself((4, 8), (4, 1)) and not overlaps_itself((2, 4, 8), (8, 16, 1))
    assert tma_refusal("w", (4, 8), (16, 1), 2) is None
    assert "dim 0 has stride 13 (26 bytes" in tma_refusal("w", (4, 8), (13, 1), 2)


# ------------------------------------------------------------------ the kernel object's routing, fake GPU

class FakeGpu:
    """Stands in for the GPU under CompiledKernel: each kernel object's launcher is made from its
    own metadata with a recording launch (the parameter block's slots read back) and a recording
    tensor-map encoder."""

    def __init__(self):
        self.launches, self.maps = [], FakeEncode()

    def launcher(self, kernel):
        kernel.asm["ptx"]  # noqa: B018 - the metadata
        meta = kernel.metadata
        gpu = self

        def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            slots = kernel._launchers[0]._n_slots
            pointers = (ctypes.c_void_p * slots).from_address(params)
            gpu.launches.append((kernel.options.strided, [ctypes.c_int64.from_address(pointers[i]).value
                                                         for i in range(slots)]))
            return (0,)
        return Launcher(object(), meta["params"], meta["grid"], meta["block"], 0, name=kernel.name, launch=launch,
                        current_device=lambda: 0, current_stream=lambda dev: 0, on_refusal=kernel._refused,
                        encode_map=self.maps, num_sms=132)


@pytest.fixture
def fake_gpu(monkeypatch):
    from tkjit.kernel import CompiledKernel
    gpu = FakeGpu()

    def device_launcher(self):
        if 0 not in self._launchers:
            self._launchers[0] = gpu.launcher(self)
        return self._launchers[0]
    monkeypatch.setattr(CompiledKernel, "_device_launcher", device_launcher)
    from tkjit.runtime import driver  # a @fill_sms kernel asks the driver for the SM count first
    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    monkeypatch.setattr(driver, "num_sms", lambda device=None: 132)
    return gpu


def test_a_register_tile_kernel_launches_views_through_its_strided_variant(fake_gpu, recwarn):
    softmax = tkjit.load(EXAMPLES / "softmax.tk", constants={"C": 64}, cache=False)
    x = fake(torch.randn(40, 192, dtype=torch.bfloat16)[:, 64:128])
    y_base = torch.zeros(80, 64, dtype=torch.bfloat16)
    y = fake(y_base[::2])
    softmax(x, y)
    softmax(x, y)  # again: straight to the variant
    assert [strided for strided, _ in fake_gpu.launches] == [True, True]
    slots = fake_gpu.launches[0][1]
    assert slots[0] == x.data_ptr() and slots[1] == y.data_ptr() and slots[2:] == [40, 192, 128]  # R, strides
    softmax(fake(torch.zeros(40, 64, dtype=torch.bfloat16)), fake(torch.zeros(40, 64, dtype=torch.bfloat16)))
    assert fake_gpu.launches[-1][0] is False  # contiguous: the default kernel
    assert not [w for w in recwarn if "copied" in str(w.message)]


def test_a_view_tma_cannot_take_is_copied_and_written_back(fake_gpu):
    kernel = tkjit.load(EXAMPLES / "gemm_bias_gelu.tk", cache=False)
    a = fake(torch.randn(128, 67, dtype=torch.bfloat16)[:, :64])     # rows of 134 bytes: TMA cannot
    b = fake(torch.randn(64, 256, dtype=torch.bfloat16))
    bias = fake(torch.randn(256, dtype=torch.bfloat16))
    c_base = torch.full((128, 512), 7.0, dtype=torch.bfloat16)
    c = fake(c_base[:, 256:])                                          # TMA takes this one as it is
    with pytest.warns(UserWarning, match=r"argument 0 \('A'\): TMA needs every stride but the last.*dim 0 has "
                                         r"stride 67.*copied to a contiguous tensor"):
        kernel(a, b, bias, c)
    (strided, slots), = fake_gpu.launches
    assert strided is False and kernel._strided is None              # copy_only: no variant compiled
    assert slots[0] != a.data_ptr() and slots[3] == c.data_ptr()     # A copied, C launched in place
    assert [call for call in fake_gpu.maps.calls if call[0] == c.data_ptr()] == \
        [(c.data_ptr(), (256, 128), (1024,))]                          # C's store map: its own row stride
    assert [call for call in fake_gpu.maps.calls if call[0] == slots[0]] == [(slots[0], (64, 128), (128,))]


def test_only_the_views_a_kernel_cannot_take_are_copied(fake_gpu):
    """Attention (the general lowering) reads Q, K, V and stores O through TMA maps: a (B, N, H, D)
    buffer's transposed views all go as they are, nothing is copied and nothing warns (the
    template it replaced stored O by pointer, so an O view was copied); L, stored by pointer, must
    be row-major."""
    import warnings
    attention = tkjit.load(EXAMPLES / "attention.tk", constants={"D": 64}, cache=False)
    bsz, n, h, d = 1, 128, 2, 64
    qkv = torch.randn(bsz, n, 3 * h * d, dtype=torch.bfloat16)
    q, k, v = (fake(t) for t in qkv.view(bsz, n, 3, h, d).permute(2, 0, 3, 1, 4))
    o_base = torch.full((bsz, n, h, d), 3.0, dtype=torch.bfloat16)
    o = fake(o_base.transpose(1, 2))
    lse = fake(torch.zeros(bsz, h, n))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attention(q, k, v, o, lse, 0.125)
    (_, slots), = fake_gpu.launches
    assert slots[:4] == [q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()]
    # byte strides of N, H, B (B has one element: its row-major stride, strides.effective)
    assert sorted(call[2] for call in fake_gpu.maps.calls) == sorted(
        [(3 * h * d * 2, d * 2, h * n * d * 2)] * 3 + [(h * d * 2, d * 2, h * n * d * 2)])
