"""Products outside any loop through the general sm_90a lowering: a product of tiles the producer
loads once per tile (one-shot rings) is one wgmma group in the consumers' tile body, the
protocol's ``TileProduct`` (``Mma`` reading the one-shot stages, ``wait_group 0`` right after it,
the stages released at the end of the tile). The corpus kernels ``tile_product``,
``product_then_loop`` and ``tile_product_acc`` (tests/general_corpus.py) take it: the corpus tests
check their SASS (HGMMA, UTMALDG, no spills), the PTX lint and the interpreter, test_roles.py the
schedule against the interpreter, tests/gpu/test_general_lowering_gpu.py the GPU."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import tkjit
from tkjit.errors import NotAvailableError
from tkjit.interpreter.roles import ScheduleError, run_roles
from tkjit.passes import sync_protocol as sp
from tkjit.passes.mbarrier import schedule_of
from tkjit.passes.sync_check import check_protocol, default_cases

from general_corpus import BY_NAME


def _kernel(name: str):
    return tkjit.compile(BY_NAME[name].source, lowering="general", require_hopper=True, cache=False)


@pytest.mark.parametrize("name", ["tile_product", "product_then_loop", "tile_product_acc"])
def test_the_product_is_a_protocol_step_of_the_tile(name):
    proto = schedule_of(_kernel(name).ir).protocol
    tiles = next(st for st in proto.consumer if isinstance(st, sp.Tiles))
    at = next(i for i, st in enumerate(tiles.body) if isinstance(st, sp.Mma))
    first = tiles.body[at]
    assert all(proto.ring(r).one_shot for r in first.rings) and len(first.rings) == 2
    assert tiles.body[at + 1] == sp.MmaWait(0)   # drained at once: the tile's next ops read it
    check_protocol(proto, default_cases(proto))


def test_the_product_runs_right_after_its_tiles_land_and_before_its_readers():
    """In the PTX the wgmma group's wait comes before the epilogue reads the accumulator."""
    ptx = _kernel("tile_product").asm["ptx"]
    body = ptx[ptx.index("wgmma.mma_async"):]
    assert body.index("wgmma.wait_group.sync.aligned 0") < body.index("max.f32")  # relu after the wait


def test_the_schedule_matches_the_interpreter_at_a_ragged_shape():
    case = BY_NAME["product_then_loop"]
    k = _kernel("product_then_loop")
    torch.manual_seed(4)
    args = case.make({"M": 200, "N": 136, "K": 200}, "cpu")
    want = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*want)
    for seed in (0, 1, 2):
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_roles(k.ir, mine, seed=seed)
        assert torch.equal(mine[4].float().nan_to_num(7.0), want[4].float().nan_to_num(7.0)), seed


def test_reading_the_product_before_its_wait_is_caught(monkeypatch):
    """A protocol without the wait after the tile's product: the schedule reads a wgmma result
    still in flight."""
    import tkjit.passes.mbarrier as mb
    real = mb.schedule_of

    def unwaited(kernel):
        s = real(kernel)
        tiles = next(st for st in s.protocol.consumer if isinstance(st, sp.Tiles))
        body = list(tiles.body)
        at = next(i for i, st in enumerate(body) if isinstance(st, sp.Mma))
        del body[at + 1]
        consumer = tuple(dataclasses.replace(st, body=tuple(body)) if st is tiles else st
                         for st in s.protocol.consumer)
        s.protocol = dataclasses.replace(s.protocol, consumer=consumer)
        return s
    case = BY_NAME["tile_product"]
    k = _kernel("tile_product")
    args = case.make(case.cpu_shape, "cpu")
    monkeypatch.setattr(mb, "schedule_of", unwaited)
    with pytest.raises(ScheduleError):
        run_roles(k.ir, args, seed=0)


def test_a_product_inside_an_if_is_refused_at_its_op():
    source = BY_NAME["tile_product"].source.replace(
        "C.tile(m, n) = cvt<bf16>(relu(mma_AB(a, b)))",
        "if m > 0 {\n      C.tile(m, n) = cvt<bf16>(relu(mma_AB(a, b)))\n    }")
    with pytest.raises(NotAvailableError) as info:
        tkjit.compile(source, lowering="general", require_hopper=True, cache=False).asm["ptx"]
    assert "mma_AB" in str(info.value) and "protocol step" in str(info.value)
