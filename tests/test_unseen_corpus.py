"""Kernels the project had not seen (tests/unseen_corpus.py) on the CPU: each one that multiplies
matrices takes the general sm_90a lowering (HGMMA/QGMMA and UTMALDG in the SASS, no spills, no
ptxas warnings) under require_hopper, and every one is right on the interpreter at a small ragged
shape; those with no product (NO_PRODUCT) take it with their consumers filling the row block.
Those the general lowering cannot take yet are named in REFUSED with the op require_hopper names
(docs/hopper-codegen.md, "Not yet")."""
from __future__ import annotations

import re

import pytest
import torch

import tkjit
from tkjit.errors import NotAvailableError

from unseen_corpus import BY_NAME, CASES

REFUSED: dict[str, str] = {}
"""Kernel -> the op require_hopper names, for kernels the general lowering cannot take yet
(docs/hopper-codegen.md, "Not yet"). Empty since session 18: ssd_copy's ring tile read into
registers (``kr = k``) takes it."""

NO_PRODUCT = {"layernorm_f32", "scaled_res_rmsnorm"}
"""Kernels with no matrix product that take the general lowering under auto: since session 16 the
f32-output LayerNorm's row block (2,048-byte rows) is filled by its consumers with cp.async."""

WGMMA = [c for c in CASES if c.name not in REFUSED and c.name not in NO_PRODUCT]


def _sass(k):
    try:
        return k.asm["sass"]
    except NotAvailableError as e:
        if any(t in str(e) for t in ("ptxas", "disassembler", "cuobjdump", "nvdisasm")):
            pytest.skip(str(e))
        raise


@pytest.mark.parametrize("case", WGMMA, ids=lambda c: c.name)
def test_unseen_kernel_takes_the_general_lowering(case):
    k = tkjit.compile(case.source, constants=case.constants or None, require_hopper=True, cache=False)
    sass = _sass(k)
    md = k.metadata
    assert md["backend"] == "wgmma" and md["lowering"] == "general"
    assert re.search(r"\b[HQ]GMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass), "spilled"
    assert not [m for m in md["ptxas"]["messages"] if m["level"] == "warning"], md["ptxas"]["log"]


@pytest.mark.parametrize("name", sorted(NO_PRODUCT))
def test_unseen_kernel_with_no_product_takes_the_general_lowering(name):
    k = tkjit.compile(BY_NAME[name].source, require_hopper=True, cache=False)
    sass = _sass(k)
    assert k.metadata["lowering"] == "general" and "LDGSTS" in sass and "UTMALDG" not in sass
    assert "filled by the consumers with cp.async" in str(k.explain())
    assert not re.search(r"\b(LDL|STL)\b", sass), "spilled"
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"], k.metadata["ptxas"]["log"]


@pytest.mark.parametrize("name,op", sorted(REFUSED.items()))
def test_unseen_kernel_the_general_lowering_cannot_take_is_refused_by_name(name, op):
    with pytest.raises(NotAvailableError) as info:
        tkjit.compile(BY_NAME[name].source, require_hopper=True, cache=False).asm["ptx"]
    assert f"cannot take '{op}' at" in str(info.value) and re.search(r":\d+:\d+", str(info.value))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_unseen_kernel_is_right_on_the_interpreter(case):
    torch.manual_seed(0)
    k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
    args = case.make(case.cpu_shape, "cpu")
    want = case.reference(args)
    k(*args)
    for i, ref in zip(case.outputs, want):
        got = args[i].float()
        assert not torch.isnan(got).any(), f"{case.name}: unwritten outputs"
        err = ((got - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"{case.name}: relative error {err}"


def test_four_block_counts_fold_the_leading_two_into_one_grid_axis():
    """blocks(B, H, M / BM, N / BN): one grid axis of B*H blocks, b and h taken by // and %."""
    k = tkjit.compile(BY_NAME["bmm4"].source, cache=False)
    text = k.asm["tkir"]
    blocks_line = next(line for line in text.splitlines() if line.strip().startswith("blocks "))
    assert blocks_line.count(",") == 2, blocks_line          # three grid axes
    assert "%h = mod %b_h, %H" in text and "%b = floordiv %b_h, %H" in text, text


def test_six_block_counts_are_refused():
    src = BY_NAME["bmm4"].source.replace("for (b, h, m, n) in blocks(B, H, M / BM, N / BN)",
                                         "for (b, h, x, y, m, n) in blocks(B, H, 1, 1, M / BM, N / BN)")
    with pytest.raises(Exception, match="1 to 5 block counts"):
        tkjit.compile(src, cache=False).asm["tkir"]


def test_a_key_padding_vector_meets_the_key_tiles_limit():
    """KM[b, j] (lead b) added to the scores of K[b, h, j] (leads b, h): the padding limit of the
    sum is the key tile's (both leads), so row_max masks it; before, the limits differed and the
    compile failed on both backends ('cannot tell where the padding ... starts')."""
    from tkjit.codegen.padding import Limit, _merge_axis, Axis, Pad
    from tkjit.ir.core import Block
    from tkjit.ir.types import I32, ScalarType
    blk = Block()
    b, h, j = (blk.add_arg(ScalarType(I32), n) for n in "bhj")
    key = Pad(cols=Axis(Limit("NK", j, 128, (("B", b), ("H", h))), True))
    vec = Pad(cols=Axis(Limit("NK", j, 128, (("B", b),)), True))
    merged = _merge_axis([key, vec], "cols", True)
    assert merged.limit == key.cols.limit and not merged.clean
    other = Pad(cols=Axis(Limit("NK", h, 128, (("B", b),)), True))   # another coordinate: unknown
    assert _merge_axis([key, other], "cols", True).limit == "unknown"


def test_the_deferred_store_counts_what_a_trip_holds():
    """A deferred store holds the previous tile (packed) through the next tile's first trip; with
    A fragments scaled in registers in every trip (160 live beside 64 packed > 200) it is not
    deferred, and nothing spills; a plain GEMM (128 + 64) still defers."""
    text = str(tkjit.compile(BY_NAME["gemm_scaled_a"].source, cache=False).explain())
    assert "what a trip of the loop holds (160)" in text
    assert "deferred to the next tile" not in text
    plain = str(tkjit.compile(BY_NAME["gemm_atbt"].source, cache=False).explain())
    assert "deferred to the next tile" in plain and "its accumulators (128 registers)" in plain


def test_when_neither_backend_takes_a_kernel_the_error_names_both_reasons():
    """ssd_copy with its key tile read into registers inside an 'if' of the loop: the
    register-tile backend cannot mask its copy, and the general lowering reads a ring tile into
    registers only in the loop's body itself (the read is a step of the trip); the error said
    only the first (nothing at a line of the kernel) and names the op and line that stopped the
    Hopper path too. (ssd_copy itself takes the general lowering since session 18.)"""
    import warnings
    src = BY_NAME["ssd_copy"].source.replace(
        "      kr: rt<f32>[C, D] = k\n",
        "      kr: rt<f32>[C, D] = zeros()\n      if c >= 0 {\n        kq: rt<f32>[C, D] = k\n        kr = kq\n"
        "      }\n")
    assert src != BY_NAME["ssd_copy"].source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotAvailableError) as info:
            tkjit.compile(src, cache=False).asm["ptx"]
    text = str(info.value)
    assert "register-tile backend cannot mask it" in text
    assert "the general lowering cannot take 'copy' at <string>:27:9" in text
    assert "in that loop's body itself" in text


@pytest.mark.parametrize("case", WGMMA, ids=lambda c: c.name)
def test_unseen_kernel_schedule_matches_the_interpreter(case):
    """The general lowering's roles and protocol run on the CPU (interpreter/roles.py), a seeded
    interleaving: bit for bit the plain interpreter's result."""
    from tkjit.interpreter.roles import run_roles
    k = tkjit.compile(case.source, constants=case.constants or None, cache=False)
    torch.manual_seed(0)
    args = case.make(case.cpu_shape, "cpu")
    ref = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    k(*ref)
    for seed in (1,):
        mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run_roles(k.ir, mine, seed=seed)
        for i in case.outputs:
            assert torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)), \
                f"{case.name}: schedule {seed} differs from the interpreter"
