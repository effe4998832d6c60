"""The tile IR core: exact textual round trips, op verification messages, types."""
from __future__ import annotations

from pathlib import Path

import pytest

from tkjit.errors import DiagnosticError, TkError, VerifyError
from tkjit.ir import ops
from tkjit.ir.parser import parse_ir, parse_kernel
from tkjit.ir.printer import print_kernel
from tkjit.ir.types import BF16, F32, TileType, VectorType, register_tile_problem, type_problem
from tkjit.ir.verify import verify_kernel

HERE = Path(__file__).parent
ROUNDTRIP = sorted((HERE / "ir" / "roundtrip").glob("*.tkir"))


@pytest.mark.parametrize("path", ROUNDTRIP, ids=lambda p: p.name)
def test_print_parse_print_is_identical(path):
    text = path.read_text()
    k = parse_kernel(text, str(path))
    assert print_kernel(k) == text
    again = print_kernel(parse_kernel(print_kernel(k)))
    assert again == text


def test_every_op_is_registered_once_with_a_docstring():
    assert len(ops.OPS) == len(ops.ALL_OPS)
    for name, cls in ops.OPS.items():
        assert cls.NAME == name
        assert cls.__doc__, f"{name} has no docstring"


def _gemm(**edits):
    text = (HERE / "ir" / "roundtrip" / "gemm_pinned.tkir").read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("old,new,message", [
    ("mma_AB %a, %b, %acc.2", "mma_AB %b, %a, %acc.2", "inner dimensions (256 and 128) must agree"),
    ("yield %acc.3", "yield %nope", "use of undefined value %nope"),
    ("st<bf16>[64, 256]", "st<f32>[64, 256]", "a shared tile copies bytes"),
    ("st<bf16>[64, 256]", "st<bf16>[60, 256]", "tile rows must be a positive multiple of 16, got 60"),
    ("%b = load %B, %k, %n", "%b = load %B, %k", "takes 2 tile coordinates, got 1"),
    ("yield %acc.3", "yield %a", "yields (st<bf16, swizzle=128B>[128, 64])"),
    ("%acc = zeros : rt<f32>[128, 256]", "%acc = zeros : st<f32>[128, 256]", "creates register tiles"),
    ("cvt {dtype = \"bf16\"}", "cvt {dtype = \"int4\"}", "cannot convert to 'int4'"),
    ("kernel @gemm(", "kernel @gemm((", "IR syntax error: unexpected '('"),
    ("= mma_AB", "= mma_XY", "unknown op 'mma_XY'"),
    ("%M = dim {name = \"M\"} : i32", "%M = dim {name = \"M\"} : i32\n  %M = dim {name = \"N\"} : i32",
     "%M is defined twice"),
])
def test_malformed_ir_is_reported_where_it_is(old, new, message):
    with pytest.raises(DiagnosticError) as err:
        parse_ir(_gemm(**{old: new}))
    text = err.value.render()
    assert message in text, text
    assert text.startswith("<ir>:")  # file:line:col first


def test_value_used_outside_its_region_is_undefined():
    bad = _gemm(**{"store %C, %c, %m, %n": "store %C, %c, %m, %n\n    %x = cvt {dtype = \"bf16\"} %acc.3 : rt<bf16>[128, 256]"})
    with pytest.raises(DiagnosticError, match="undefined value %acc.3"):
        parse_ir(bad)


def test_verifier_marks_the_offending_op_in_printed_ir():
    k = parse_kernel(_gemm())
    mma = next(op for op in k.walk() if op.NAME == "mma_AB")
    mma.operands[0], mma.operands[1] = mma.operands[1], mma.operands[0]
    with pytest.raises(VerifyError) as err:
        verify_kernel(k, show_ir=True)
    rendered = err.value.render()
    assert "^^^ mma_AB: A is 64x256" in rendered


def test_types_print_themselves_and_reject_impossible_tiles():
    t = TileType("st", BF16, 128, 64, (("swizzle", "128B"),))
    assert str(t) == "st<bf16, swizzle=128B>[128, 64]"
    assert t.with_attrs(swizzle="64B").attr("swizzle") == "64B"
    assert type_problem(TileType("st", F32, 512, 512)) is not None  # 1 MB of shared memory
    # 256 KB of registers: not a type error (stream-cols may run it over column chunks), but too
    # large for the register file as one tile
    assert type_problem(TileType("rt", F32, 256, 256)) is None
    assert "needs 262144 bytes of registers" in register_tile_problem(TileType("rt", F32, 256, 256))
    assert register_tile_problem(TileType("rt", F32, 128, 256)) is None
    assert type_problem(VectorType("cv", F32, 24)) is not None
    assert type_problem(TileType("rt", F32, 128, 256)) is None
    assert hash(t) == hash(TileType("st", BF16, 128, 64, (("swizzle", "128B"),)))


def test_errors_are_tkerrors_never_tracebacks():
    for junk in ["", "kernel", "kernel @k(", "kernel @k() { %x = }", "kernel @k(%a: zz<f32>[1]) {}",
                 "kernel @k() { %x = const {value = 1} : f99 }"]:
        try:
            parse_ir(junk)
        except TkError:
            pass
