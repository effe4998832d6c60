"""A numpy interpreter of verified tile IR: runs a kernel on the CPU, in place on its arguments.

    tkjit.interpreter.run(kernel, [a, b, c], constants=None)

It executes every block of the block loop and every op (see ``handlers/`` for the table from
op class to handler), with the GPU's numerics and the language's padding rules:

Numerics
  - A tile holds float32 values exactly representable in its dtype. bf16/f16/fp8 values are
    rounded (RNE, ``numerics.py``) where the GPU rounds them: loads into tiles of that dtype,
    ``cvt``, copies into a narrower tile, stores into a global of that dtype, and after each
    elementwise op on a narrow tile (computed in float32, then rounded).
  - Math on f32 tiles and scalars is float32. Reductions sum in float64, rounded once.
  - mma: products and the inner-dimension sum in float64 plus the accumulator, rounded once
    per mma to the accumulator's dtype (f32; f16 accumulators via f32).

Padding (elements of a tile outside its tensor)
  - Every tile carries a row-valid and a column-valid vector; a vector carries one.
  - Loads: elements past the tensor's edge load as zero and are invalid.
  - Elementwise ops and broadcasts: valid where every tile/vector operand is (intersection);
    scalar operands, cvt, copy and causal_mask keep validity; zeros/fill are fully valid.
  - Reductions skip invalid elements (identity -inf for max, +inf for min, 0 for sum; a row with
    no valid element reduces to the identity); the result is valid where the rows (row_*) or
    columns (col_*) are.
  - mma: the inner dimension counts only where A's and B's inner indices are both valid (invalid
    operands act as exact zeros even when they hold NaN/inf); result rows from A, columns from
    B, intersected with the accumulator's.
  - Stores write only elements that are valid and inside the tensor.

Runtime errors (``InterpreterError``, reported at the op's source line): a tile coordinate whose
tile starts outside the tensor, an out-of-range leading index, integer division by zero, a
non-positive loop step. Bad arguments are a ``LaunchError`` naming the argument.
"""
from __future__ import annotations

from .engine import Environment, Interpreter, run

__all__ = ["Environment", "Interpreter", "run"]
