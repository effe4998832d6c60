"""The PTX backend on the CPU: every test kernel and every example is emitted, assembled by ptxas
for sm_90a and checked in its SASS (tensor-core HMMA in products, 128-bit global accesses, no
local memory, no spills); the PTX is run on the PTX simulator (tests/ptxsim.py) at small
shapes that do not divide the tiles, against float64 torch, with poisoned outputs and a check
that nothing outside them is written; and the metadata, the emitter table's errors, the
padding analysis and the shared-memory plan are tested on their own.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch

from codegen_cases import ALL_CASES, BY_NAME, dims_of
from ptxsim import Memory, RaceError, launch
from tkjit.codegen import EmitterTable, emit_ptx
from tkjit.codegen.padding import UNKNOWN, analyze_padding
from tkjit.errors import NotAvailableError
from tkjit.ir.core import Op
from tkjit.ir.parser import parse_kernel
from tkjit.ir.types import F32_T
from support import needs_cuda_tools

toolchain = pytest.importorskip("tkjit.runtime.toolchain")


needs_ptxas = needs_cuda_tools


@functools.lru_cache(maxsize=None)
def emitted(name: str):
    return emit_ptx(BY_NAME[name].kernel())


@functools.lru_cache(maxsize=None)
def assembled(name: str):
    ptx, meta = emitted(name)
    cubin, report = toolchain.assemble(ptx, name=meta["name"])
    return cubin, report, toolchain.sass(cubin)


def _opcodes(sass: str) -> set[str]:
    ops = set()
    for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass):
        ops.add(m.group(1))
    return ops


# ------------------------------------------------------------------ ptxas and SASS

@needs_ptxas
@pytest.mark.parametrize("name", [c.name for c in ALL_CASES])
def test_assembles_without_spills(name):
    _, report, sass = assembled(name)
    fn = report[emitted(name)[1]["name"]]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0, report.log
    assert fn.stack_frame_bytes == 0, report.log
    assert 0 < fn.registers <= 255
    ops = _opcodes(sass)
    assert not {o for o in ops if o.startswith(("LDL", "STL"))}, "local-memory traffic"
    for want in BY_NAME[name].sass:
        assert any(o.startswith(want) for o in ops), f"{want} not in the SASS of {name}"


@needs_ptxas
def test_no_tensor_cores_without_products():
    assert not any(o.startswith("HMMA") for o in _opcodes(assembled("layernorm")[2]))


# ------------------------------------------------------------------ running on the simulator

def _raw(t: torch.Tensor) -> np.ndarray:
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _from_raw(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    if like.dtype in (torch.bfloat16, torch.float16):
        return torch.from_numpy(a.view(np.int16).copy()).view(like.dtype)
    return torch.from_numpy(a.copy())


PAD = 64  # poisoned elements on each side of an output


def run_on_simulator(name: str, shape: dict, seed: int = 0, options: dict | None = None):
    """(outputs, untouched-outside flags, reference) of one simulated launch."""
    case = BY_NAME[name]
    ptx, meta = emitted(name) if options is None else emit_ptx(case.kernel(), options)
    inputs = case.make(shape, torch.Generator().manual_seed(seed))
    mem = Memory(1 << 26)
    args, outs = [], {}
    for pname in case.params:
        v = inputs[pname]
        if not isinstance(v, torch.Tensor):
            args.append(v)
        elif pname in case.outputs:
            poison = torch.full((v.numel() + 2 * PAD,), float("nan"), dtype=v.dtype)
            addr = mem.alloc(_raw(poison))
            args.append(addr + PAD * v.element_size())
            outs[pname] = (addr, poison, v)
        else:
            args.append(mem.alloc(_raw(v)))
    launch(ptx, meta, args, dims_of(shape), mem=mem, max_ctas=512)
    got, outside = {}, {}
    for pname, (addr, poison, like) in outs.items():
        buf = _from_raw(mem.read_back(addr, _raw(poison)), like)
        got[pname] = buf[PAD:PAD + like.numel()].reshape(like.shape)
        outside[pname] = bool(torch.isnan(torch.cat([buf[:PAD], buf[PAD + like.numel():]]).double()).all())
    return got, outside, case.reference(inputs)


SIM_PARAMS = [(c.name, s) for c in ALL_CASES for s in c.sim_shapes]


@pytest.mark.parametrize("name,shape", SIM_PARAMS, ids=[f"{n}-{'x'.join(map(str, s.values()))}"
                                                        for n, s in SIM_PARAMS])
def test_simulated_results_match_torch(name, shape):
    case = BY_NAME[name]
    got, outside, ref = run_on_simulator(name, shape)
    for out in case.outputs:
        assert outside[out], f"{out}: elements outside the output were written"
        assert not torch.isnan(got[out].double()).any(), f"{out}: some elements were not written"
        torch.testing.assert_close(got[out].double(), ref[out], rtol=case.rtol, atol=case.atol)


PINNED_GRIDS = [
    ("attention_causal", {"num_warps": 8, "warp_rows": 2}),   # P split over 4 warp columns: via shared
    ("layernorm", {"num_warps": 8, "warp_rows": 8}),          # 16-row tiles replicated over 8 warp rows
    ("gemm_atb", {"num_warps": 8, "warp_rows": 2}),           # 64x32 accumulator, chunks split 4 ways
    ("maps", {"num_warps": 2, "warp_rows": 2}),               # column sums across warp rows
    ("softmax", {"num_warps": 1}),
]


@pytest.mark.parametrize("name,options", PINNED_GRIDS, ids=[f"{n}-{o}" for n, o in PINNED_GRIDS])
def test_every_warp_grid_computes_the_same(name, options):
    """Layouts with replicas and split columns (cross-warp reductions, staged mma operands)."""
    case = BY_NAME[name]
    got, outside, ref = run_on_simulator(name, case.sim_shapes[0], options=options)
    for out in case.outputs:
        assert outside[out] and not torch.isnan(got[out].double()).any()
        torch.testing.assert_close(got[out].double(), ref[out], rtol=case.rtol, atol=case.atol)


def test_simulator_catches_a_missing_barrier(monkeypatch):
    """The race checker is what makes the simulated runs evidence for the barrier placement."""
    from tkjit.codegen import context
    monkeypatch.setattr(context.SharedSync, "_barrier_if", lambda self, needed: [])
    emitted.cache_clear()
    try:
        with pytest.raises(RaceError):
            run_on_simulator("softmax_f32", {"N": 17, "D": 256})
    finally:
        emitted.cache_clear()


# ------------------------------------------------------------------ metadata and the ABI

def test_metadata_describes_the_launch():
    ptx, meta = emitted("attention")
    assert [p["name"] for p in meta["params"]] == ["Q", "K", "V", "O", "scale"]
    assert meta["params"][0] == {"kind": "global", "name": "Q", "dtype": "bf16", "dims": ["B", "H", "N", 64]}
    assert meta["params"][4] == {"kind": "scalar", "name": "scale", "dtype": "f32"}
    assert meta["dims"] == ["B", "H", "N"]
    assert meta["grid"] == [["mul", ["mul", ["dim", "B"], ["dim", "H"]], ["cdiv", ["dim", "N"], 64]]]
    assert meta["block"] == [32 * meta["num_warps"], 1, 1]
    entry = re.search(r"\.entry attention\((.*?)\)", ptx, re.S).group(1)
    assert re.findall(r"\.param (\.\w+)", entry) == [".u64"] * 4 + [".f32"] + [".s32"] * 3
    assert f".reqntid {meta['block'][0]}, 1, 1" in ptx
    assert ptx.startswith("// tkjit") and ".version 8.0" in ptx and ".target sm_90a" in ptx
    assert {d["decision"] for d in meta["decisions"]} >= {"warps", "warp_grid", "schedule", "shared_memory"}


def test_emission_is_deterministic_and_pure():
    kernel = BY_NAME["attention_causal"].kernel()
    from tkjit.ir.printer import print_kernel
    before = print_kernel(kernel)
    first, second = emit_ptx(kernel), emit_ptx(kernel)
    assert first == second and print_kernel(kernel) == before


def test_persistent_grid_is_bounded_by_the_sms():
    _, meta = emitted("gemm")
    total = ["mul", ["cdiv", ["dim", "M"], 128], ["cdiv", ["dim", "N"], 256]]
    assert meta["grid"] == [["min", total, ["num_sms"]]]
    assert meta["warp_grid"] == [2, 4] and meta["num_warps"] == 8


def test_floor_division_block_counts_are_exact():
    text = BY_NAME["softmax_f32"].ir_path.read_text().replace("cdiv %N, %c16", "floordiv %N, %c16")
    _, meta = emit_ptx(parse_kernel(text))
    from tkjit.runtime.launcher import compile_grid
    grid = compile_grid(meta["grid"], tuple(meta["dims"]), 4)
    assert [grid(N=n, D=8)[0] for n in (0, 15, 16, 17, 33)] == [0, 0, 1, 1, 2]


# ------------------------------------------------------------------ the emitter table

class Mystery(Op):
    NAME = "mystery"
    OPERANDS = ("x",)

    def infer(self):
        return [self.operands[0].type]


def test_an_op_without_an_emitter_is_named():
    k = BY_NAME["softmax_f32"].kernel()
    blocks = k.body.ops[-1]
    body = blocks.regions[0]
    load = body.ops[1]
    extra = Mystery([load.result])
    body.ops.insert(2, extra)
    extra.parent = body
    with pytest.raises(NotAvailableError) as info:
        emit_ptx(k)
    assert "no emitter for 'mystery'" in info.value.message
    assert "on an f32 register tile 16x256" in info.value.message


def test_a_table_without_maps_refuses_them():
    from tkjit.codegen.kernel import emit_kernel
    from tkjit.ir.ops import Exp
    table = EmitterTable({k: v for k, v in EmitterTable().entries.items() if k[0] is not Exp})
    with pytest.raises(NotAvailableError, match="no emitter for 'exp' on an f32 register tile 16x256"):
        emit_kernel(BY_NAME["softmax_f32"].kernel(), {}, table)


def test_fp8_products_are_refused_clearly():
    text = BY_NAME["gemm_abt"].ir_path.read_text().replace("f16", "e4m3")
    with pytest.raises(NotAvailableError, match="e4m3"):
        emit_ptx(parse_kernel(text))


# ------------------------------------------------------------------ padding analysis

def _value(kernel, hint):
    for op in kernel.walk():
        for v in op.results:
            if v.hint == hint:
                return v
    raise KeyError(hint)


def test_padding_of_attention_scores_and_probabilities():
    k = BY_NAME["attention"].kernel()
    info = analyze_padding(k)
    s, p = info[_value(k, "s")], info[_value(k, "p")]
    assert s.cols is not None and s.cols.clean          # K rows past N load as zero: S is clean
    assert p.cols is not None and not p.cols.clean      # exp2 of them is not: P gets masked
    assert s.cols.limit == p.cols.limit and s.cols.limit != UNKNOWN
    q = info[_value(k, "q")]
    assert q.cols is None                               # head dim 64 of a [.., 64] tensor: in range


def test_static_edges_need_no_masks():
    k = BY_NAME["ex_layernorm"].kernel()               # D is the constant 1024: no column padding
    info = analyze_padding(k)
    x = info[_value(k, "x")]
    assert x.cols is None and x.rows is not None


def test_masks_appear_only_where_padding_can_reach():
    ptx_ln, _ = emitted("ex_layernorm")
    ptx_attn, _ = emitted("attention")
    assert "selp.f32" not in ptx_ln.split("row_sum", 1)[1].split("// ", 1)[0]
    assert "and.b32" in ptx_attn.split("mma_AB at", 1)[1].split("mma.sync", 1)[0]


# ------------------------------------------------------------------ shared memory

def test_epilogue_staging_reuses_the_operand_stages():
    from tkjit.codegen.kernel import _plan
    from tkjit.codegen.layout import choose_warp_grid
    from tkjit.codegen.table import DEFAULT_TABLE
    kernel = BY_NAME["gemm"].kernel()
    grid, _ = choose_warp_grid(kernel, {})
    pipelines, plan = _plan(kernel, DEFAULT_TABLE, grid)
    (pipe,) = pipelines.values()
    assert pipe.stages == 4 and [load.result.hint for load in pipe.loads] == ["a", "b"]
    # four stages of A 128x64 and B 64x256 bf16 (48 KB each); the 64 KB epilogue staging of C
    # lives after the loop, inside the space of the dead stage buffers
    assert plan.total == 4 * (128 * 64 + 64 * 256) * 2
    (staging,) = [reg for what, reg, _ in plan.items if what == "scratch of store"]
    assert staging.offset + staging.size <= plan.total


def test_pipelined_loop_waits_and_prefetches_once_per_trip():
    ptx, meta = emitted("gemm")
    loop = re.search(r"^\$L_for_\d+:$(.*)^\$L_for_end_\d+:$", ptx, re.S | re.M).group(1)
    assert loop.count("bar.sync") == 1 and loop.count("cp.async.wait_group 2;") == 1
    assert loop.count("cp.async.commit_group") == 1
    assert {"decision": "stages", "value": 4} == {k: v for k, v in _decision(meta, "stages").items()
                                                  if k != "why"}


def test_stages_are_lowered_to_fit_shared_memory():
    text = BY_NAME["gemm"].ir_path.read_text().replace("{stages = 4}", "{stages = 8}")
    _, meta = emit_ptx(parse_kernel(text))
    assert _decision(meta, "stages")["value"] == 4        # 8 x 48 KB does not fit in 227 KB
    assert "lowered" in _decision(meta, "stages")["why"]


def _decision(meta, name):
    (entry,) = [d for d in meta["decisions"] if d["decision"] == name]
    return entry


def test_scalar_kernel_params_and_dims_come_in_abi_order():
    ptx, meta = emitted("maps")
    entry = re.search(r"\.entry maps\((.*?)\)", ptx, re.S).group(1)
    assert re.findall(r"\.param (\.\w+)", entry) == [".u64", ".u64", ".u64", ".s32", ".s32", ".s32"]
    assert meta["dims"] == ["N", "R"]
    assert F32_T is not None
