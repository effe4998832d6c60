"""Ordering the launches of a kernel whose metadata says ``serial_launches`` (the stream-K GEMM: its
workspace and flags are the loaded module's), on the CPU: a fake of cuda-python's driver bindings
records the capture queries, event records and stream waits beside the fake launch, so the
launcher's decisions can be read off the log. Kernels without the flag keep their fast path as
it was, with no event call. On a GPU: tests/gpu/test_streamk_streams_gpu.py."""
from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

import pytest
import torch

import tkjit
from support import fake_cuda_tensor_class
from test_tensormap import FakeEncode
from tkjit.errors import LaunchError
from tkjit.kernel import CompiledKernel
from tkjit.passes import default_pipeline
from tkjit.runtime import driver, native
from tkjit.runtime import launcher as launcher_module
from tkjit.runtime.launcher import MAX_CAPTURES, Launcher

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GEMM = (EXAMPLES / "gemm.tk").read_text()
STREAM_K = default_pipeline("sm_90a").replace("grid", "grid{stream_k=1}")
FakeCuda = fake_cuda_tensor_class()
ADD = [{"kind": "global", "name": n, "dtype": "f32", "dims": ["N"]} for n in ("x", "y", "out")]
GRID = [["cdiv", ["dim", "N"], 128]]
NONE, ACTIVE, INVALIDATED = 0, 1, 2
INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT
INVALID_HANDLE = 400   # CUDA_ERROR_INVALID_HANDLE


def cuda(t: torch.Tensor) -> FakeCuda:
    return t.as_subclass(FakeCuda)


def add_args(n=1000):
    return tuple(cuda(torch.zeros(n)) for _ in range(3))


class Event:
    """A fake CUevent: which launches it covers is the log position of its last record."""

    def __init__(self, number: int):
        self.number, self.recorded = number, None

    def __repr__(self):
        return f"e{self.number}"


class FakeCu:
    """The five driver calls the ordering makes, in the bindings' convention ((CUresult, values...)),
    appended to ``log`` (shared with the fake launch): ``("wait", stream, event, covers)`` where
    ``covers`` is the log index the event's last record followed, ``("record", event, stream)``."""

    def __init__(self, log: list):
        self.log, self.capturing, self.events, self.fail = log, {}, [], {}
        """``capturing``: stream -> (status, capture id); ``fail``: call name -> CUresult to return."""

    def _failed(self, name):
        return self.fail.pop(name, 0)

    def cuStreamIsCapturing(self, stream):
        self.log.append(("is_capturing", stream))
        return (self._failed("cuStreamIsCapturing"), self.capturing.get(stream, (NONE, 0))[0])

    def cuStreamGetCaptureInfo(self, stream):
        status, capture = self.capturing.get(stream, (NONE, 0))
        return (self._failed("cuStreamGetCaptureInfo"), status, capture, None, [], [], 0)

    def cuEventCreate(self, flags):
        assert flags == 2  # CU_EVENT_DISABLE_TIMING
        self.events.append(Event(len(self.events) + 1))
        return (self._failed("cuEventCreate"), self.events[-1])

    def cuEventRecord(self, event, stream):
        self.log.append(("record", event, stream))
        event.recorded = len(self.log) - 1
        return (self._failed("cuEventRecord"),)

    def cuStreamWaitEvent(self, stream, event, flags):
        assert flags == 0
        err = self._failed("cuStreamWaitEvent")
        if not err:
            self.log.append(("wait", stream, event, event.recorded))
        return (err,)


def serial_launcher(signature=ADD, grid=GRID, result=0, **kw):
    """A launcher of an ordered kernel whose launches append ("launch", stream) to the log."""
    log: list = []
    cu = FakeCu(log)

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        log.append(("launch", stream))
        return (result,)
    kw.setdefault("current_device", lambda: 0)
    kw.setdefault("current_stream", lambda dev: 7)
    launcher = Launcher(object(), signature, grid, 128, 0, name="gemm", launch=launch, serial_launches=True,
                        cu=cu, **kw)
    return launcher, log, cu


def launches(log) -> list:
    return [e for e in log if e[0] != "is_capturing"]


# ---------------------------------------------------------------- the metadata flag

def compiled(pipeline: str, **constants):
    kernel = tkjit.compile(GEMM, filename="gemm.tk", pipeline=pipeline, cache=False,
                           constants=constants or {"BM": 128, "BN": 256})
    kernel.asm["ptx"]  # noqa: B018 - the metadata comes with the PTX
    return kernel


def test_a_stream_k_gemm_says_its_launches_share_module_state():
    kernel = compiled(STREAM_K)
    assert kernel.metadata["gemm"]["stream_k"] is True
    assert kernel.metadata["serial_launches"] is True


@pytest.mark.parametrize("pipeline, constants", [
    (default_pipeline("sm_90a"), {}),            # stream-K not asked for
    (STREAM_K, {"BM": 128, "BN": 128}),          # asked for, not taken (ping-pong consumers)
    (STREAM_K, {"BM": 128, "BN": 256, "SPLIT": 2}),  # asked for, not taken (split-K)
])
def test_other_gemms_do_not(pipeline, constants):
    kernel = compiled(pipeline, **constants)
    assert not kernel.metadata["gemm"].get("stream_k") and "serial_launches" not in kernel.metadata


def test_the_kernel_object_passes_the_flag_to_its_launcher(monkeypatch):
    """kernel.py builds the launcher from the metadata: serial_launches for the stream-K kernel only."""
    made = []

    class Module:
        device = 0

        @staticmethod
        def load(binary, ptx):
            return Module

        @staticmethod
        def get_function(name):
            return 0xF00D

    class FakeDriver:
        pass
    FakeDriver.Module = Module
    FakeDriver.set_dynamic_smem = staticmethod(lambda fn, smem, device: None)
    monkeypatch.setattr(launcher_module, "Launcher", lambda *args, **kw: made.append(kw))
    monkeypatch.setattr(CompiledKernel, "binary", property(lambda self: b"cubin"))
    for pipeline, serial in ((STREAM_K, True), (default_pipeline("sm_90a"), False)):
        compiled(pipeline)._make_launcher(FakeDriver)
        assert made[-1].get("serial_launches", False) is serial


# ---------------------------------------------------------------- without the flag: as before

def test_without_the_flag_the_fast_path_is_unchanged():
    plain = Launcher(object(), ADD, GRID, 128, launch=lambda *a: (0,), current_device=lambda: 0,
                     current_stream=lambda dev: 7)
    unflagged = Launcher(object(), ADD, GRID, 128, launch=lambda *a: (0,), current_device=lambda: 0,
                         current_stream=lambda dev: 7, serial_launches=False, cu=object())
    assert plain.order is None and unflagged.order is None
    assert plain.source == unflagged.source and "order" not in plain.source
    flagged, _, _ = serial_launcher()
    body = flagged.source.split("    try:\n        with order.lock:\n")
    assert len(body) == 2 and body[0] == plain.source.split("    try:\n        err = launch")[0]


@pytest.mark.skipif(native.module() is None, reason=native.status())
def test_without_the_flag_the_native_path_is_kept():
    fast = Launcher(0xF00D, ADD, GRID, 128, launch=native.module().noop_launch_address(), launch_api="native",
                    current_device=lambda: 0, current_stream=lambda dev: 7)
    assert fast.source is None and type(fast.fast).__name__ == "Launch"


# ---------------------------------------------------------------- outside captures

def test_launches_on_one_stream_record_and_never_wait():
    launcher, log, cu = serial_launcher()
    for _ in range(3):
        launcher(*add_args())
    assert launches(log) == [("launch", 7), ("record", cu.events[0], 7)] * 3
    assert len(cu.events) == 1  # one event, recorded again after every launch


def test_a_launch_on_another_stream_waits_for_the_previous_launch_first():
    launcher, log, cu = serial_launcher()
    for stream in (7, 7, 9, 9, 7, 11):
        launcher(*add_args(), stream=stream)
    (e,) = cu.events
    assert [x[:2] if x[0] != "record" else x for x in launches(log)] == [
        ("launch", 7), ("record", e, 7), ("launch", 7), ("record", e, 7),
        ("wait", 9), ("launch", 9), ("record", e, 9), ("launch", 9), ("record", e, 9),
        ("wait", 7), ("launch", 7), ("record", e, 7), ("wait", 11), ("launch", 11), ("record", e, 11)]
    assert_serial(log)  # and each wait is for the record right after the previous launch


def assert_serial(log) -> None:
    """Every launch on a stream other than the previous launch's waited, after that launch, for the
    event recorded right after it; between one launch and the next nothing else was launched."""
    last = None  # (stream, log index of the record after the previous launch)
    for i, e in enumerate(log):
        if e[0] != "launch":
            continue
        if last is not None and e[1] != last[0]:
            waits = [w for w in log[last[1] + 1:i] if w[0] == "wait"]
            assert waits and waits[-1][1] == e[1] and waits[-1][3] == last[1], (i, log[max(0, i - 6):i + 1])
        record = log[i + 1]
        assert record[0] == "record" and record[2] == e[1], (i, record)
        last = (e[1], i + 1)


def test_the_stream_keyword_and_the_current_stream_are_the_stream_ordered():
    stream = type("S", (), {"cuda_stream": 9, "device": torch.device("cuda", 0)})()
    launcher, log, cu = serial_launcher()
    launcher(*add_args())             # torch's current stream: 7
    launcher(*add_args(), stream=stream)
    assert [e[:2] for e in launches(log)] == [("launch", 7), ("record", cu.events[0]), ("wait", 9),
                                             ("launch", 9), ("record", cu.events[0])]


def test_refused_and_empty_launches_touch_no_event():
    launcher, log, _ = serial_launcher()
    with pytest.raises(LaunchError, match="argument 0"):
        launcher(torch.zeros(3), *add_args()[1:])
    launcher(*add_args(0))            # an empty grid launches nothing
    assert log == []


def test_a_failed_launch_records_nothing_and_the_order_stays():
    launcher, log, _ = serial_launcher(result=INVALID_HANDLE)
    pool = len(launcher._pool)
    with pytest.raises(driver.DriverError, match="cuLaunchKernel of 'gemm'"):
        launcher(*add_args(), stream=5)
    assert launcher.order.stream is None and [e[0] for e in log] == ["is_capturing", "launch"]
    assert len(launcher._pool) == pool  # the parameter block went back


def test_a_failed_driver_call_names_the_kernel_and_the_streams():
    launcher, log, cu = serial_launcher()
    launcher(*add_args(), stream=5)
    cu.fail["cuStreamWaitEvent"] = INVALID_HANDLE
    pool = len(launcher._pool)
    expected = (r"cuStreamWaitEvent of 'gemm' \(ordering its launch on stream 6 after the previous one on stream 5: "
                r"the launches share the module's state, serial_launches\) failed: CUDA_ERROR_INVALID_HANDLE")
    with pytest.raises(driver.DriverError, match=expected):
        launcher(*add_args(), stream=6)
    assert len(launcher._pool) == pool and ("launch", 6) not in log  # nothing launched unordered


def test_a_thread_without_a_context_gets_one_and_the_call_is_made_again(monkeypatch):
    made = []
    monkeypatch.setattr(driver, "ensure_context", lambda: made.append(1) or 0)
    launcher, log, cu = serial_launcher()
    cu.fail["cuStreamIsCapturing"] = INVALID_CONTEXT
    launcher(*add_args())
    assert made == [1] and [e[0] for e in log] == ["is_capturing", "is_capturing", "launch", "record"]


def test_threads_launching_at_once_are_ordered_one_launch_after_another():
    """Four threads on four streams: the launch (slow, and the GIL released) never overlaps
    another, and every change of stream waits for the event recorded after the previous launch."""
    log: list = []
    cu = FakeCu(log)
    busy = threading.Lock()

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        assert busy.acquire(blocking=False), "two launches at once"
        log.append(("launch", stream))
        time.sleep(0.0005)
        busy.release()
        return (0,)
    launcher = Launcher(object(), ADD, GRID, 128, name="gemm", launch=launch, serial_launches=True, cu=cu,
                        current_device=lambda: 0, current_stream=lambda dev: 7)
    errors = []

    def run(stream):
        try:
            for _ in range(40):
                launcher(*add_args(), stream=stream)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(s,)) for s in (3, 4, 5, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(e[0] == "launch" for e in log) == 160
    assert_serial(log)


# ---------------------------------------------------------------- under stream capture

def test_a_captured_launch_never_waits_for_an_event_recorded_outside_the_capture():
    """CUDA refuses that wait (capture isolation): a capture's first launch starts its own order."""
    launcher, log, cu = serial_launcher()
    launcher(*add_args(), stream=5)
    cu.capturing[8] = (ACTIVE, 42)
    launcher(*add_args(), stream=8)
    eager, captured = cu.events
    assert launches(log) == [("launch", 5), ("record", eager, 5), ("launch", 8), ("record", captured, 8)]


def test_launches_of_one_capture_on_two_streams_are_ordered_within_it():
    """A fork of the capture onto another stream waits for the capture's previous launch: the graph
    gets the edge, so its replays run the two kernels one after the other."""
    launcher, log, cu = serial_launcher()
    cu.capturing.update({8: (ACTIVE, 42), 9: (ACTIVE, 42)})
    for stream in (8, 9, 9, 8):
        launcher(*add_args(), stream=stream)
    assert len(cu.events) == 1  # the capture's own event
    assert_serial(log)
    assert [e[0] for e in launches(log)].count("wait") == 2


def test_launches_outside_a_capture_are_ordered_against_each_other_only():
    """An eager launch neither waits for a captured one (an event recorded in a capture cannot be
    waited for outside it) nor loses its order with the eager launches before it."""
    launcher, log, cu = serial_launcher()
    launcher(*add_args(), stream=5)
    cu.capturing[8] = (ACTIVE, 42)
    launcher(*add_args(), stream=8)
    launcher(*add_args(), stream=6)  # eager again: waits for the eager launch on 5, not for the capture's
    eager, captured = cu.events
    got = launches(log)
    assert got[4:] == [("wait", 6, eager, log.index(("record", eager, 5))), ("launch", 6), ("record", eager, 6)]
    assert all(e[2] is not captured for e in got if e[0] == "wait")


def test_two_captures_are_not_ordered_against_each_other():
    launcher, log, cu = serial_launcher()
    cu.capturing.update({8: (ACTIVE, 42), 9: (ACTIVE, 43)})
    launcher(*add_args(), stream=8)
    launcher(*add_args(), stream=9)
    assert [e[0] for e in launches(log)] == ["launch", "record"] * 2
    assert len(cu.events) == 2 and launcher.order.captures == {42: (8, cu.events[0]), 43: (9, cu.events[1])}


def test_an_invalidated_capture_is_left_to_fail_the_launch():
    launcher, log, cu = serial_launcher()
    launcher(*add_args(), stream=5)
    cu.capturing[8] = (INVALIDATED, 0)
    launcher(*add_args(), stream=8)
    assert launches(log)[2:] == [("launch", 8)] and launcher.order.stream == 5


def test_captures_are_remembered_up_to_a_bound_and_their_events_reused():
    launcher, _, cu = serial_launcher()
    for capture in range(1, MAX_CAPTURES + 4):
        cu.capturing[100 + capture] = (ACTIVE, capture)
        launcher(*add_args(), stream=100 + capture)
    assert len(cu.events) == MAX_CAPTURES and len(launcher.order.captures) == MAX_CAPTURES
    assert list(launcher.order.captures) == list(range(4, MAX_CAPTURES + 4))


# ---------------------------------------------------------------- other launch APIs

def test_the_ctypes_launch_api_is_ordered_too():
    log: list = []
    cu = FakeCu(log)

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        log.append(("launch", stream.value if stream is not None else 0))
        return 0
    launcher = Launcher(0xF00D, ADD, GRID, 128, name="gemm", launch=launch, launch_api="ctypes",
                        serial_launches=True, cu=cu, current_device=lambda: 0, current_stream=lambda dev: 7)
    for stream in (5, 6):
        launcher(*add_args(), stream=stream)
    assert_serial(log)


CU_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


@pytest.mark.skipif(native.module() is None, reason=native.status())
def test_with_the_native_api_the_generated_function_orders_and_calls_it_from_c():
    """An ordered kernel takes the generated Python function (the C Launch object makes its launch
    with no hook around it), which calls the native API's cuLaunchKernel through native.launch."""
    log: list = []
    cu = FakeCu(log)
    values = []

    def record(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        log.append(("launch", stream or 0))
        values.append((fn, gx, ctypes.c_int32.from_address(params[3]).value))
        return 0
    callback = CU_LAUNCH(record)
    launcher = Launcher(0xF00D, ADD, GRID, 128, name="gemm", launch=callback, launch_api="native",
                        serial_launches=True, cu=cu, current_device=lambda: 0, current_stream=lambda dev: 7)
    assert launcher.source is not None and "launch(address, fn" in launcher.source
    for stream in (5, 5, 6):
        launcher(*add_args(1000), stream=stream)
    assert values == [(0xF00D, 8, 1000)] * 3
    assert_serial(log)


def test_tensor_maps_and_the_order_together():
    """A stream-K GEMM's own metadata (three tensors and their maps) through an ordered launcher."""
    kernel = compiled(STREAM_K)
    meta = kernel.metadata
    launcher, log, _ = serial_launcher(meta["params"], meta["grid"], num_sms=132, encode_map=FakeEncode())
    a = cuda(torch.zeros(256, 128, dtype=torch.bfloat16))
    b = cuda(torch.zeros(128, 512, dtype=torch.bfloat16))
    c = cuda(torch.zeros(256, 512, dtype=torch.bfloat16))
    launcher(a, b, c, stream=5)
    launcher(a, b, c, stream=6)
    assert_serial(log)
