"""The native launch path (fastlaunch.c) on the CPU: a ctypes callback stands in for cuLaunchKernel.

Every case runs through both fast paths, the generated Python function and the C one, with the
same fake driver hooks: they must launch the same thing (grid, block, stream, the parameter
block's bytes) or refuse with the same LaunchError. Skipped where no C compiler or Python.h is
here (native.status() says why), as the launcher then takes the Python path itself.
"""
from __future__ import annotations

import ctypes
import threading
import time

import pytest
import torch

from support import fake_cuda_tensor_class
from test_tensormap import FakeEncode, entry
from tkjit.errors import LaunchError, NotAvailableError
from tkjit.runtime import native
from tkjit.runtime.launcher import Launcher

pytestmark = pytest.mark.skipif(native.module() is None, reason=native.status())


@pytest.fixture(autouse=True, params=["c", "torch"])
def variant(request, monkeypatch):
    """Every case runs through both native extensions: the C one (tensor metadata through Python
    attributes) and the torch one (through torch's C++ API; skipped where it cannot be built)."""
    module = native.c_module() if request.param == "c" else native.torch_module()
    if module is None:
        pytest.skip(native.status())
    monkeypatch.setattr(native, "_state", {**native._state, "module": module})
    return request.param

FakeCuda = fake_cuda_tensor_class()
FN = 0xF00D
STREAM = 1234
CU_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


def cuda(t: torch.Tensor, device: int = 0):
    out = t.as_subclass(FakeCuda)
    out.fake_device = device
    return out


def glb(name, dims, dtype="f32"):
    return {"kind": "global", "name": name, "dtype": dtype, "dims": dims}


class Recorder:
    """Records each launch, decoding ``slots`` 8-byte parameter slots (raw bytes, so that both
    paths' blocks compare exactly) and ``maps`` trailing pointers."""

    def __init__(self, slots: int, maps: int = 0, result: int = 0):
        self.slots, self.maps, self.result, self.calls = slots, maps, result, []
        self.native = CU_LAUNCH(self._native)

    def _record(self, fn, grid, block, smem, stream, pointers, extra):
        values = [ctypes.string_at(pointers[i], 8 if i < self.slots else 0) for i in range(self.slots)]
        maps = [pointers[self.slots + j] for j in range(self.maps)]
        self.calls.append(dict(fn=fn, grid=grid, block=block, smem=smem, stream=stream, values=values,
                               maps=maps, extra=extra))

    def _native(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self._record(fn, (gx, gy, gz), (bx, by, bz), smem, stream or 0, params, extra or 0)
        return self.result

    def bindings(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        self._record(fn, (gx, gy, gz), (bx, by, bz), smem, stream, pointers, extra)
        return (self.result,)


def pair(signature, grid, slots, block=128, smem=0, maps=0, **kw):
    """(python launcher, its recorder), (native launcher, its recorder), with the same hooks."""
    kw.setdefault("current_device", lambda: 0)
    kw.setdefault("current_stream", lambda dev: STREAM)
    out = []
    for api in ("bindings", "native"):
        rec = Recorder(slots, maps, kw.pop("result", 0) if api == "native" else kw.get("result", 0))
        launch = rec.bindings if api == "bindings" else rec.native
        extra = {k: v for k, v in kw.items() if k != "result"}
        launcher = Launcher(FN, signature, list(grid), block, smem, name="k", launch=launch, launch_api=api,
                            **extra)
        out.append((launcher, rec))
    return out


def outcome(launcher, rec, args, stream=None):
    """What one call did: the launch recorded, None (nothing launched) or the error's text."""
    before = len(rec.calls)
    try:
        launcher(*args, stream=stream)
    except LaunchError as e:
        return ("refused", str(e))
    return rec.calls[before] if len(rec.calls) > before else None


ADD = [glb("x", ["N"]), glb("y", ["N"]), glb("out", ["N"])]
MIXED = [glb("a", ["M", "K"], "bf16"), glb("b", ["K", 64], "bf16"), glb("c", ["M", 64]),
         {"kind": "scalar", "name": "alpha", "dtype": "f32"}, {"kind": "scalar", "name": "steps", "dtype": "i32"}]


def mixed_args(m=256, k=64, **over):
    make = dict(a=lambda: cuda(torch.zeros(m, k, dtype=torch.bfloat16)),
                b=lambda: cuda(torch.zeros(k, 64, dtype=torch.bfloat16)),
                c=lambda: cuda(torch.zeros(m, 64)), alpha=lambda: 0.5, steps=lambda: 3)
    return tuple(over[name] if name in over else fn() for name, fn in make.items())


def mixed_cases():
    big = cuda(torch.empty(2**31, 64, device="meta"))
    return {
        "good": mixed_args(),
        "other shapes": mixed_args(m=1000, k=128),
        "int for f32": mixed_args(alpha=2),
        "numpy-ish int for i32": mixed_args(steps=True),
        "f32 overflow": mixed_args(alpha=1e39),
        "f32 inf": mixed_args(alpha=float("inf")),
        "i32 overflow": mixed_args(steps=2**31),
        "i32 negative": mixed_args(steps=-2**31),
        "wrong dtype": mixed_args(c=cuda(torch.zeros(256, 64, dtype=torch.float16))),
        "cpu tensor": mixed_args(a=torch.zeros(256, 64, dtype=torch.bfloat16)),
        "other device": mixed_args(c=cuda(torch.zeros(256, 64), device=1)),
        "not a tensor": mixed_args(b=[1, 2, 3]),
        "wrong rank": mixed_args(c=cuda(torch.zeros(256 * 64))),
        "dim disagrees": mixed_args(c=cuda(torch.zeros(255, 64))),
        "constant disagrees": mixed_args(b=cuda(torch.zeros(64, 32, dtype=torch.bfloat16))),
        "not contiguous": mixed_args(c=cuda(torch.zeros(64, 256).t())),
        "misaligned": mixed_args(c=cuda(torch.zeros(256 * 64 + 1)[1:].view(256, 64))),
        "too large for s32": mixed_args(m=2**31, a=cuda(torch.empty(2**31, 64, dtype=torch.bfloat16, device="meta")),
                                        c=big),
        "too few": mixed_args()[:4],
        "too many": mixed_args() + (1,),
        "empty": mixed_args(m=0),
    }


@pytest.mark.parametrize("case", list(mixed_cases()))
def test_both_paths_launch_or_refuse_alike(case):
    args = mixed_cases()[case]
    (py, py_rec), (nat, nat_rec) = pair(MIXED, [["cdiv", ["dim", "M"], 128], ["cdiv", 64, 32]], slots=7,
                                        block=(256,), smem=70_000)
    assert nat.source is None and nat.launch_api == "native"
    expected, got = outcome(py, py_rec, args), outcome(nat, nat_rec, args)
    if isinstance(expected, dict):
        expected["fn"] = got["fn"] = None  # the Python path passes the object, the native one its int
    assert got == expected


@pytest.mark.parametrize("stream", [None, 5, 2**63 + 7, "default", -1, "object", "handle", "other device"])
def test_streams_alike(stream):
    class FakeStream:
        cuda_stream = 99
        device = torch.device("cuda", 0)

    class OtherDevice(FakeStream):
        device = torch.device("cuda", 1)

    class Handle:
        def __int__(self):
            return 77

    stream = {"object": FakeStream(), "handle": Handle(), "other device": OtherDevice()}.get(stream, stream)
    (py, py_rec), (nat, nat_rec) = pair(ADD, [["cdiv", ["dim", "N"], 128]], slots=4)
    args = [cuda(torch.zeros(300)) for _ in range(3)]
    expected, got = outcome(py, py_rec, args, stream), outcome(nat, nat_rec, args, stream)
    if isinstance(expected, dict):
        expected["fn"] = got["fn"] = None
    assert got == expected


@pytest.mark.parametrize("grid,n", [
    ([["min", ["cdiv", ["dim", "N"], 128], ["num_sms"]]], 100_000),
    ([["mul", ["mul", ["dim", "N"], ["dim", "N"]], ["dim", "N"]]], 2**22),  # 2^66: past int64
    ([["min", ["mul", ["mul", ["dim", "N"], ["dim", "N"]], ["dim", "N"]], 7]], 2**22),
    ([1, ["dim", "N"]], 70_000),
    ([["max", ["add", ["dim", "N"], 3], 5], 2, 3], 10),
    ([["min", 9, ["max", ["num_sms"], ["mul", 9, ["gt", ["dim", "N"], 8]]]]], 8),   # the causal attention grid
    ([["min", 9, ["max", ["num_sms"], ["mul", 9, ["gt", ["dim", "N"], 8]]]]], 9),
])
def test_grids_alike(grid, n):
    (py, py_rec), (nat, nat_rec) = pair(ADD, grid, slots=4, num_sms=4)
    args = [cuda(torch.empty(n, device="meta")) for _ in range(3)]
    expected, got = outcome(py, py_rec, args), outcome(nat, nat_rec, args)
    if isinstance(expected, dict):
        expected["fn"] = got["fn"] = None
    assert got == expected


def test_the_native_call_passes_the_function_handle_and_no_extra():
    (_, _), (nat, rec) = pair(ADD, [["cdiv", ["dim", "N"], 128]], slots=4)
    nat(*(cuda(torch.zeros(8)) for _ in range(3)))
    assert rec.calls[0]["fn"] == FN and rec.calls[0]["extra"] == 0 and rec.calls[0]["stream"] == STREAM


def test_refusals_go_to_on_refusal_with_the_arguments():
    seen = []
    (_, _), (nat, rec) = pair(ADD, [["cdiv", ["dim", "N"], 128]], slots=4,
                              on_refusal=lambda args, stream, checked: seen.append((args, stream, checked)) or "x")
    cpu = [torch.zeros(8) for _ in range(3)]
    assert nat(*cpu, stream=7) == "x" and seen == [(tuple(cpu), 7, False)] and rec.calls == []


def test_a_launch_failure_names_the_driver_error():
    from tkjit.runtime.driver import DriverError, cu
    code = int(cu().CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    rec = Recorder(4, result=code)
    nat = Launcher(FN, ADD, [["cdiv", ["dim", "N"], 128]], 128, 0, name="k", launch=rec.native, launch_api="native",
                   current_device=lambda: 0, current_stream=lambda dev: 0)
    with pytest.raises(DriverError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        nat(*(cuda(torch.zeros(4)) for _ in range(3)))


def test_nested_and_concurrent_launches_keep_their_own_parameters():
    rec = Recorder(4)
    holder = {}
    inner = [cuda(torch.zeros(300)) for _ in range(3)]

    def nested(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        if "launcher" in holder:
            holder.pop("launcher")(*inner)  # re-entered while the outer call's block is live
        return rec._native(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra)

    callback = CU_LAUNCH(nested)
    nat = Launcher(FN, ADD, [["cdiv", ["dim", "N"], 128]], 128, 0, name="k", launch=callback, launch_api="native",
                   current_device=lambda: 0, current_stream=lambda dev: 0)
    holder["launcher"] = nat
    outer = [cuda(torch.zeros(100)) for _ in range(3)]
    nat(*outer)
    ints = [int.from_bytes(v[:4], "little") for v in (rec.calls[0]["values"][3], rec.calls[1]["values"][3])]
    assert ints == [300, 100]

    per_thread = [[cuda(torch.zeros(16 * (t + 1))) for _ in range(3)] for t in range(4)]
    rec.calls.clear()

    def work(args):
        for _ in range(100):
            nat(*args)
    threads = [threading.Thread(target=work, args=(args,)) for args in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for call in rec.calls:
        n = int.from_bytes(call["values"][3][:4], "little")
        ptrs = [int.from_bytes(v, "little") for v in call["values"][:3]]
        assert ptrs == [a.data_ptr() for a in per_thread[n // 16 - 1]]
    assert len(rec.calls) == 400


def test_tensor_maps_follow_the_named_dims():
    signature = [glb("A", ["M", "K"], "bf16"), glb("C", ["M", 64], "bf16"), entry(param=0),
                 entry(param=1, box=(64, 64), fallback=True)]
    fake = FakeEncode()
    rec = Recorder(4, maps=2)
    nat = Launcher(FN, signature, [["dim", "M"]], 384, 0, name="k", launch=rec.native, launch_api="native",
                   current_device=lambda: 0, current_stream=lambda dev: 0, encode_map=fake)
    a = cuda(torch.zeros(256, 128, dtype=torch.bfloat16))
    c = cuda(torch.zeros(256, 64, dtype=torch.bfloat16))
    nat(a, c)
    nat(a, c)
    assert len(fake.calls) == 2 and rec.calls[0]["maps"] == rec.calls[1]["maps"]
    assert all(m % 64 == 0 for m in rec.calls[0]["maps"])
    assert fake.calls[0] == (a.data_ptr(), (128, 256), (256,))
    bad = cuda(torch.zeros(256, 100, dtype=torch.bfloat16))
    with pytest.raises(LaunchError, match="TMA needs rows of a multiple of 16"):
        nat(bad, c)
    refused = []  # A's K must be a multiple of 8: the C path refuses others, as the Python one does
    nat = Launcher(FN, signature, [["dim", "M"]], 384, 0, name="k", launch=rec.native, launch_api="native",
                   current_device=lambda: 0, current_stream=lambda dev: 0, encode_map=fake,
                   on_refusal=lambda args, stream, checked: refused.append(args))
    calls = len(rec.calls)
    nat(bad, c)
    assert len(refused) == 1 and len(rec.calls) == calls
    nat(a, c)
    assert len(refused) == 1 and len(rec.calls) == calls + 1


def test_a_tensor_resized_in_place_is_read_again():
    (_, _), (nat, rec) = pair(ADD, [["cdiv", ["dim", "N"], 128]], slots=4)
    x, y, out = (cuda(torch.zeros(100)) for _ in range(3))
    nat(x, y, out)
    for t in (x, y, out):
        t.resize_(1000)
    nat(x, y, out)
    assert [c["grid"][0] for c in rec.calls] == [1, 8]
    assert [int.from_bytes(v, "little") for v in rec.calls[1]["values"][:3]] == [x.data_ptr(), y.data_ptr(),
                                                                                  out.data_ptr()]
    out.as_strided_((100,), (2,))
    with pytest.raises(LaunchError, match="must be contiguous"):
        nat(x[:100], y[:100], out)


def test_exact_tensors_on_the_current_device_alike():
    """Plain torch.Tensor arguments (the torch variant's C++ reads; a fake subclass is read through
    its attributes): CPU tensors with the current device -1 stand in for CUDA ones."""
    (py, py_rec), (nat, nat_rec) = pair(ADD, [["cdiv", ["dim", "N"], 128]], slots=4, device=-1,
                                        current_device=lambda: -1)
    x, y, out = torch.zeros(1000), torch.zeros(1000), torch.zeros(1000)
    cases = [(x, y, out), (x, y, out[:999]), (x, y, torch.zeros(1000, dtype=torch.float16)),
             (x, y, torch.zeros(2000)[::2]), (x, y, torch.zeros(10, 100)), (x, y, torch.zeros(1001)[1:]),
             (x, y, torch.nn.Parameter(torch.zeros(1000))), (x, y, cuda(torch.zeros(1000))),
             (x, y, torch.empty(1000, device="meta"))]
    for args in cases:
        assert outcome(py, py_rec, args) == outcome(nat, nat_rec, args)
    assert [c["values"][0] for c in nat_rec.calls[:1]] == [x.data_ptr().to_bytes(8, "little")]
    out.resize_(500)  # metadata changed in place: read again
    assert outcome(py, py_rec, (x[:500], y[:500], out)) == outcome(nat, nat_rec, (x[:500], y[:500], out))
    assert nat_rec.calls[-1]["grid"] == (4, 1, 1)


def _fresh_lookup(monkeypatch, tmp_path, env: dict):
    """The next native.module() looks up again, with the configuration ``env`` and its own cache."""
    from tkjit import config
    monkeypatch.setattr(config, "_current", config.Config.from_env({**env, "TKJIT_CACHE_DIR": str(tmp_path)}))
    monkeypatch.setattr(native, "_state", {})


def test_the_modes_parse():
    from tkjit.config import Config
    assert Config.from_env({}).native_torch == "auto"
    assert Config.from_env({"TKJIT_NATIVE_LAUNCH": "torch"}).native_torch == "build"
    assert Config.from_env({"TKJIT_NATIVE_LAUNCH": "c"}).native_torch == "no"
    assert not Config.from_env({"TKJIT_NATIVE_LAUNCH": "0"}).native_launch


def test_by_default_the_torch_variant_is_taken_from_the_cache(monkeypatch, tmp_path):
    """Where the cache holds the torch variant, launchers take it; TKJIT_NATIVE_LAUNCH=c keeps to C."""
    if native.torch_module() is None:
        pytest.skip(native.status())
    built = open(native.torch_module().__file__, "rb").read()
    c_built = open(native.c_module().__file__, "rb").read()
    from tkjit.cache import DiskCache
    cache = DiskCache(tmp_path)
    cache.put(native._torch_key(torch)[0], {native.TORCH_FILE: built}, {"name": "test"})
    cache.put(native.build_key(native.SOURCE.read_bytes()), {native.FILE: c_built}, {"name": "test"})
    _fresh_lookup(monkeypatch, tmp_path, {})
    assert "torch's C++ tensor reads: " + str(tmp_path) in native.status()
    assert native.module() is not native.c_module() and "builder" not in native._state
    _fresh_lookup(monkeypatch, tmp_path, {"TKJIT_NATIVE_LAUNCH": "c"})
    assert native.module() is native.c_module() and "torch's C++" not in native.status()


def test_without_it_in_the_cache_it_is_built_in_the_background(monkeypatch, tmp_path):
    """Not cached: the C one launches now and a detached process builds the torch variant for the
    next process. Here that process finds no C++ compiler on its PATH: the failure is remembered,
    so the next process does not start it again, and TKJIT_NATIVE_LAUNCH=torch is named."""
    if native.c_module() is None:
        pytest.skip(native.status())
    c_built = open(native.c_module().__file__, "rb").read()
    from tkjit.cache import DiskCache
    DiskCache(tmp_path).put(native.build_key(native.SOURCE.read_bytes()), {native.FILE: c_built}, {"name": "test"})
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers-here"))
    monkeypatch.setattr(native, "_cxx_command", lambda: None)  # this process's view; the child has PATH
    _fresh_lookup(monkeypatch, tmp_path, {})
    assert native.module() is native.c_module()
    assert "being built in the background" in native.status()
    assert native._state["builder"]
    key = native._failure_key(native._torch_key(torch)[0])
    failed = tmp_path / key[:2] / key  # the DiskCache entry
    deadline = time.monotonic() + 120
    while not failed.exists() and time.monotonic() < deadline:  # the detached builder remembers why
        time.sleep(0.1)
    _fresh_lookup(monkeypatch, tmp_path, {})
    assert native.module() is native.c_module()
    assert "its build failed (no C and C++ compiler here to build it)" in native.status()
    assert "TKJIT_NATIVE_LAUNCH=torch tries again" in native.status() and "builder" not in native._state


def test_with_the_cache_off_nothing_is_built_in_the_background(monkeypatch, tmp_path):
    if native.c_module() is None:
        pytest.skip(native.status())
    _fresh_lookup(monkeypatch, tmp_path, {"TKJIT_NO_CACHE": "1"})
    assert native.module() is not None and "builder" not in native._state
    assert "not built (the disk cache is off" in native.status()


# ---------------------------------------------------------------- building and caching the extension

def test_the_extension_is_found_in_the_cache_by_its_key(tmp_path, monkeypatch):
    from tkjit.config import Config
    config = Config(cache_dir=tmp_path)
    built = []

    def build():
        built.append(1)
        return b"not really an extension"
    key = native.build_key(b"int x;")
    first = native._cached_binary(config, key, build)
    second = native._cached_binary(config, key, build)
    assert first == second and built == [1] and open(first, "rb").read() == b"not really an extension"
    assert native.build_key(b"int y;") != key and native.build_key(b"int x;", ("-O0",)) != key


def test_without_a_compiler_launchers_take_the_python_path(monkeypatch, tmp_path):
    from tkjit import config as config_module
    monkeypatch.setattr(config_module, "_current", config_module.Config(cache_dir=tmp_path))  # nothing cached
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setattr(native, "compiler_command", lambda: None)
    assert native.module() is None and native.status().startswith("Python launch path: no C compiler")
    with pytest.raises(NotAvailableError, match="no C compiler"):
        Launcher(FN, ADD, [1], 128, 0, launch=Recorder(4).native, launch_api="native",
                 current_device=lambda: 0, current_stream=lambda dev: 0)


def test_a_failing_build_is_a_status_line_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setattr(native, "SOURCE", tmp_path / "broken.c")
    (tmp_path / "broken.c").write_text("this is not C\n")
    from tkjit import config as config_module
    monkeypatch.setattr(config_module, "_current", config_module.Config(cache_dir=tmp_path / "cache"))
    assert native.module() is None
    assert native.status().startswith("Python launch path: building the native one failed")



def test_prepare_takes_the_variant_a_warm_installation_has(monkeypatch, tmp_path):
    """The benchmarks' launch figures are the default path's: prepare() builds the torch variant
    where the cache lacks it, and takes it; with TKJIT_NATIVE_LAUNCH=c it keeps to C."""
    variant = native.torch_module()
    if variant is None:
        pytest.skip(native.status())
    monkeypatch.setattr(native, "_find_torch_or_build_later", lambda c_status: (None, c_status + "; later"))
    monkeypatch.setattr(native, "torch_module", lambda: variant)
    _fresh_lookup(monkeypatch, tmp_path, {})
    assert native.module() is native.c_module()
    assert "torch's C++ tensor reads" in native.prepare() and native.module() is variant
    _fresh_lookup(monkeypatch, tmp_path, {"TKJIT_NATIVE_LAUNCH": "c"})
    assert "torch's C++" not in native.prepare() and native.module() is native.c_module()


# ------------------------------------------------------------------ strided views (runtime/strides.py)

VIEWS = [{**glb("A", ["M", "K"], "bf16"), "strides": "map"}, {**glb("B", ["K", "N"], "bf16"), "strides": "map"},
         {**glb("C", ["M", "N"], "bf16"), "strides": "map", "writes": True}, glb("bias", ["N"]),
         entry(param=0), entry(param=1, box=(64, 64)), entry(param=2, box=(64, 64))]
"""A GEMM-like signature whose TMA-only tensors take views (metadata "strides": "map") beside a
tensor read by pointer (bias: row-major only)."""


def view_pair(signature, exact: bool, **kw):
    """(launcher, recorder, encoder, refusals) for the Python path and the native one, each with
    its own recording map encoder; ``exact``: plain CPU tensors stand for CUDA ones (device -1)."""
    hooks = dict(device=-1, current_device=lambda: -1) if exact else dict(current_device=lambda: 0)
    out = []
    for api in ("bindings", "native"):
        rec, enc = Recorder(5, maps=3), FakeEncode()
        launcher = Launcher(FN, signature, [["dim", "M"]], 128, 0, name="k", launch=rec.bindings if api == "bindings"
                            else rec.native, launch_api=api, current_stream=lambda dev: STREAM, encode_map=enc,
                            **hooks, **kw)
        out.append((launcher, rec, enc))
    return out


def bf(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


def view_cases(wrap):
    m, n, k = 256, 128, 64
    a, b, c, bias = wrap(bf(m, k)), wrap(bf(k, n)), wrap(bf(m, n)), wrap(torch.zeros(n))
    big = bf(m, 2 * n)
    return {
        "contiguous": (a, b, c, bias),
        "column slice": (wrap(bf(m, k + 64)[:, 64:]), b, c, bias),
        "every other row": (a, wrap(bf(2 * k, n)[::2]), c, bias),
        "output window": (a, b, wrap(big[:, n:]), bias),
        "all three": (wrap(bf(m, k + 64)[:, 64:]), wrap(bf(2 * k, n)[::2]), wrap(big[:, :n]), bias),
        "one-row dim": (wrap(bf(1, 3 * k)[:, k:2 * k].expand(1, k)), wrap(bf(k, n)), wrap(bf(1, n)), bias),
        "rows off 16 bytes": (wrap(bf(m, k + 3)[:, :k]), b, c, bias),            # TMA cannot: copied
        "unaligned base": (wrap(bf(m, k + 8)[:, 1:k + 1]), b, c, bias),
        "last dim strided": (wrap(bf(k, m).t()), b, c, bias),
        "output overlaps itself": (a, b, wrap(bf(1, n).expand(m, n)), bias),
        "output overlaps an input": (wrap(big[:, :k]), b, wrap(big[:, n:]), bias) if k <= n else None,
        "output overlaps an input view": (wrap(big[:, 8:8 + k]), b, wrap(big[:, :n]), bias),
        "pointer tensor a view": (a, b, c, wrap(torch.zeros(2 * n)[::2])),        # row-major only: copied
        "wrong shape": (wrap(bf(m, k + 64)[:, 64:]), b, wrap(big[:8, :n]), bias),
    }


@pytest.mark.parametrize("exact", [False, True], ids=["attribute reads", "exact tensors"])
def test_views_whose_maps_take_their_strides_launch_alike_on_both_paths(exact):
    """The native path takes the views of "map" tensors itself; it launches what the Python path
    launches (its strided path), with maps encoded from the same strides, and refuses, to the same
    words, what that path refuses (the kernel object copies a StridedArgument)."""
    (py, py_rec, py_enc), (nat, nat_rec, nat_enc) = view_pair(VIEWS, exact)
    wrap = (lambda t: t) if exact else cuda
    for name, args in view_cases(wrap).items():
        expected, got = outcome(py, py_rec, args), outcome(nat, nat_rec, args)
        if isinstance(expected, dict):
            expected["fn"] = got["fn"] = expected["maps"] = got["maps"] = None
        assert got == expected, name
    # the same maps (the Python path's strided one keys contiguous tensors apart, so encodes some twice)
    assert set(nat_enc.calls) == set(py_enc.calls) and len(set(nat_enc.calls)) >= 8


def test_the_native_path_encodes_a_views_byte_strides_without_the_python_path():
    refused = []
    (_, _, _), (nat, rec, enc) = view_pair(VIEWS, True, on_refusal=lambda *a: refused.append(a))
    base = bf(256, 192)
    a, b = base[:, 64:128], bf(128, 128)[::2]
    c = bf(256, 256)[:, 128:]
    nat(a, b, c, torch.zeros(128))
    assert refused == [] and len(rec.calls) == 1
    assert enc.calls == [(a.data_ptr(), (64, 256), (384,)), (b.data_ptr(), (128, 64), (512,)),
                         (c.data_ptr(), (128, 256), (512,))]
    values = [int.from_bytes(v, "little") for v in rec.calls[0]["values"]]
    assert values[:3] == [a.data_ptr(), b.data_ptr(), c.data_ptr()] and values[4] & 0xFFFFFFFF == 256
    nat(a, b, c, torch.zeros(128))  # again: the maps from the encoder's cache
    assert len(enc.calls) == 3 and rec.calls[1]["maps"] == rec.calls[0]["maps"]
    for bad in (bf(256, 67)[:, :64], bf(64, 256).t()):  # rows TMA cannot take; a strided last dim
        nat(bad, b, c, torch.zeros(128))
    assert len(refused) == 2 and len(rec.calls) == 2
    nat(bf(256, 64), bf(64, 128), bf(256, 128), torch.zeros(128))  # contiguous: the row-major maps
    assert [call[2] for call in enc.calls[3:]] == [(128,), (256,), (256,)] and len(refused) == 2


def test_a_kernel_whose_tensor_is_copied_by_pointer_takes_no_view_as_it_is():
    """A fallback map's tensor with rows TMA cannot address is copied row-major by the kernel:
    then no view goes as it is (the Python path's rule), on either path."""
    signature = [{**glb("A", ["M", "K"], "bf16"), "strides": "map"}, glb("C", ["M", "N"], "bf16"),
                 entry(param=0), entry(param=1, box=(64, 64), fallback=True)]
    refused = []
    (_, _, _), (nat, rec, _) = view_pair(signature, True, on_refusal=lambda *a: refused.append(a))
    view = bf(256, 128)[:, 64:]
    nat(view, bf(256, 64))
    assert refused == [] and len(rec.calls) == 1
    nat(view, bf(256, 60))  # C's rows are 120 bytes: copied by pointer, so A's view is refused
    nat(bf(256, 64), bf(256, 60))  # a contiguous A still goes
    assert len(refused) == 1 and len(rec.calls) == 2


def test_the_gemm_examples_views_take_the_native_path():
    """The GEMM example's own metadata (A, B, C "strides": "map"): the benchmark's views of
    benchmarks/strided.py launch from C, their maps encoded with the views' byte strides."""
    import pathlib

    import tkjit
    kernel = tkjit.load(pathlib.Path(__file__).resolve().parents[1] / "examples" / "gemm.tk", cache=False)
    kernel.asm["ptx"]  # noqa: B018 - the metadata
    meta = kernel.metadata
    refused, enc, rec = [], FakeEncode(), Recorder(6, maps=3)
    nat = Launcher(FN, meta["params"], meta["grid"], meta["block"], 0, name="gemm", launch=rec.native,
                   launch_api="native", device=-1, current_device=lambda: -1, current_stream=lambda dev: 0,
                   encode_map=enc, num_sms=132, on_refusal=lambda *a: refused.append(a))
    m, n, k = 256, 512, 128
    a, b, c = bf(m, k + 64)[:, 64:], bf(2 * k, n)[::2], bf(m, n + 64)[:, :n]
    nat(a, b, c)
    assert refused == [] and len(rec.calls) == 1
    # (the order of the maps is the backend's: the general lowering lists C's store map first)
    assert sorted(enc.calls) == sorted([(a.data_ptr(), (k, m), ((k + 64) * 2,)), (b.data_ptr(), (n, k), (2 * n * 2,)),
                                        (c.data_ptr(), (n, m), ((n + 64) * 2,))])
