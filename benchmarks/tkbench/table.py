"""The short table printed at the end of a run (and the one-line progress of each row): what,
shape, tkjit time, reference time, ratio (reference / tkjit: above 1, tkjit is faster), the rate
(TFLOPS, or GB/s with the share of the copy bandwidth), the relative error, and the status. A
row's errors follow it on their own indented lines."""
from __future__ import annotations

from .rows import MEASURED, OK

COLUMNS = (("what", 28, "<"), ("shape", 29, "<"), ("tkjit", 9, ">"), ("ref", 9, ">"), ("ratio", 7, ">"),
           ("rate", 16, ">"), ("rel err", 8, ">"), ("ok", 7, "<"))
ERROR_WIDTH = 118


def fmt_time(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 0.1:
        return f"{ms * 1000:.1f}us"
    if ms < 1000:
        return f"{ms:.3f}ms" if ms < 10 else f"{ms:.1f}ms"
    return f"{ms / 1000:.2f}s"


def fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def fmt_rate(row: dict) -> str:
    tflops = row.get("tkjit_tflops") or (row.get("ref_tflops") if not row.get("tkjit_ms") else None)
    if tflops:
        return f"{tflops:.1f} TFLOPS" if tflops < 10 else f"{tflops:.0f} TFLOPS"
    gbps = row.get("tkjit_gbps") or (row.get("ref_gbps") if not row.get("tkjit_ms") else None)
    if gbps:
        share = row.get("frac_of_copy") if row.get("tkjit_gbps") else row.get("ref_frac_of_copy")
        return f"{gbps:.0f} GB/s" + (f" {share:.0%}" if share else "")
    return "-"


def fmt_err(err: float | None) -> str:
    if err is None:
        return "-"
    return "nan" if err != err else f"{err:.1e}"


def fmt_status(row: dict) -> str:
    status = row["status"]
    if status == MEASURED:
        return "-"
    return status if status in (OK, "WRONG") else status.upper()


def cells(row: dict) -> list[str]:
    return [row["what"], row["shape"], fmt_time(row.get("tkjit_ms")), fmt_time(row.get("ref_ms")),
            fmt_ratio(row.get("ratio")), fmt_rate(row), fmt_err(row.get("rel_err")), fmt_status(row)]


def _line(values: list[str]) -> str:
    parts = []
    for value, (_, width, align) in zip(values, COLUMNS):
        text = value if len(value) <= width else value[: width - 1] + "~"
        parts.append(f"{text:{align}{width}}")
    return " ".join(parts).rstrip()


def notes(row: dict) -> list[str]:
    """The row's error lines (tkjit's, then the reference's)."""
    out = []
    if row.get("error"):
        out.append(f"    tkjit: {row['error']}")
    if row.get("ref_error"):
        out.append(f"    ref:   {row['ref_error']}")
    return [line if len(line) <= ERROR_WIDTH else line[: ERROR_WIDTH - 1] + "~" for line in out]


def render(rows: list[dict]) -> str:
    lines = [_line([name for name, _, _ in COLUMNS]), _line(["-" * width for _, width, _ in COLUMNS])]
    for row in rows:
        lines.append(_line(cells(row)))
        lines.extend(notes(row))
    return "\n".join(lines)


def progress_line(row) -> str:
    """One row on one line, as the worker finishes it (takes a Row or its JSON)."""
    data = row if isinstance(row, dict) else row.to_json()
    what, shape, tkjit, ref, ratio, rate, err, status = cells(data)
    text = f"{what} {shape}: tkjit {tkjit}, ref {ref}, {ratio}, {rate}, err {err}, {status}"
    for note in notes(data):
        text += f" | {note.strip()}"
    return text


def counts(rows: list[dict]) -> str:
    tally: dict[str, int] = {}
    for row in rows:
        tally[row["status"]] = tally.get(row["status"], 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(tally.items(), key=lambda item: -item[1]))
