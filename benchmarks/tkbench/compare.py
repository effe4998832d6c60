"""The step every comparison shares: time tkjit and the reference over the same rotated inputs.
A failure in either is written into the row (tkjit's as the row's error, the reference's as
``ref_error``) and the other side is still timed."""
from __future__ import annotations

from typing import Callable

from .rows import ERROR, UNSUPPORTED, Row, first_line
from .timing import Rotation, measure, measure_pair


def time_pair(row: Row, ctx, rotation: Rotation, tkjit_call: Callable | None, ref_call: Callable | None) -> Row:
    """``tkjit_call(*inputs)`` and ``ref_call(*inputs)``, each timed on the rotation's input sets:
    in alternating rounds when both run (``measure_pair``), alone when only one does."""
    row.rotation_sets = len(rotation)
    sides = {}
    if tkjit_call is not None and row.status not in (ERROR, UNSUPPORTED):
        sides["tkjit"] = lambda: tkjit_call(*rotation.next())
    if ref_call is not None and row.ref_error is None:
        sides["ref"] = lambda: ref_call(*rotation.next())
    if len(sides) == 2:
        try:
            tkjit, ref = measure_pair(sides["tkjit"], sides["ref"], ctx)
        except Exception:  # noqa: BLE001 - time them apart, so that the row says which one failed
            pass
        else:
            row.tkjit_ms, row.tkjit_timing = tkjit.median_ms, tkjit.to_json()
            row.ref_ms, row.ref_timing = ref.median_ms, ref.to_json()
            return row.finish()
    if "tkjit" in sides:
        try:
            timing = measure(sides["tkjit"], ctx)
            row.tkjit_ms, row.tkjit_timing = timing.median_ms, timing.to_json()
        except Exception as exc:  # noqa: BLE001 - the row says what happened
            row.fail(exc)
    if "ref" in sides:
        try:
            timing = measure(sides["ref"], ctx)
            row.ref_ms, row.ref_timing = timing.median_ms, timing.to_json()
        except Exception as exc:  # noqa: BLE001
            row.ref_error = first_line(exc)
    return row.finish()


def run_reference(row: Row, call: Callable, exact) -> None:
    """Run the reference library once on the checked inputs and record its own error against the
    exact result (``ref_rel_err``), or its failure (``ref_error``)."""
    from .checks import rel_err
    try:
        row.ref_rel_err = rel_err(call(), exact)
    except Exception as exc:  # noqa: BLE001
        row.ref_error = first_line(exc)


def run_simple(row: Row, ctx, kernels, kernel_name: str, constants: dict | None, *, make_set: Callable,
               tkjit: Callable, reference: Callable, exact: Callable, set_bytes: int) -> Row:
    """The whole comparison for a kernel with one output:

    ``make_set()`` draws fresh random inputs and an output (last); ``tkjit(kernel, *set)`` runs
    the kernel; ``reference(*set)`` runs the library and returns its result (it may write the
    output it is given, or allocate); ``exact(*inputs)`` is the float64 result. The kernel's
    output is poisoned before the check; the timing rotates over fresh sets."""
    kernel = None
    try:
        kernel, row.compile_s = kernels.get(kernel_name, constants)
    except Exception as exc:  # noqa: BLE001
        row.fail(exc)
    _check_simple(row, ctx, kernel, make_set, tkjit, reference, exact)
    rotation = Rotation(make_set, set_bytes, ctx)

    def tkjit_call(*inputs_and_out):
        tkjit(kernel, *inputs_and_out)

    return time_pair(row, ctx, rotation, tkjit_call if kernel is not None else None, reference)


def _check_simple(row: Row, ctx, kernel, make_set: Callable, tkjit: Callable, reference: Callable,
                  exact: Callable) -> None:
    """One fresh input set: the kernel's poisoned output against the exact result, and the
    reference library's own error (its tensors are freed on return, before the timing's)."""
    from .checks import check_row, sync
    *inputs, out = make_set()
    truth = exact(*inputs)
    if kernel is not None:
        out.fill_(float("nan"))
        try:
            tkjit(kernel, *inputs, out)
            sync(ctx)
            check_row(row, [(out, truth)])
        except Exception as exc:  # noqa: BLE001
            row.fail(exc)

    def library():
        return reference(*inputs, out.clone().fill_(float("nan")))

    run_reference(row, library, truth)
