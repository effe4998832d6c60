"""``--plot``: PNG charts of the GEMM and attention ratios (reference time / tkjit time; above the
line at 1, tkjit is faster), next to the JSON. Needs matplotlib; without it, says so and skips."""
from __future__ import annotations

from pathlib import Path


def write_plots(rows: list[dict], json_path: Path) -> list[str]:
    """The paths written, or one line saying why none were."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # noqa: BLE001 - matplotlib missing or broken: no plots, no crash
        return [f"no plots: matplotlib is not usable here ({type(exc).__name__}: {exc})"]
    written = []
    for name, draw in (("gemm", _gemm), ("attention", _attention)):
        chosen = [row for row in rows if row["family"] == name and row.get("ratio")]
        if not chosen:
            continue
        fig = draw(plt, chosen)
        path = json_path.with_name(f"{json_path.stem}-{name}.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(str(path))
    return written or ["no plots: no GEMM or attention row has a ratio"]


def _gemm(plt, rows: list[dict]):
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows)), 4))
    colors = {"square": "tab:blue", "k-sweep": "tab:orange", "llm": "tab:green"}
    ax.bar(range(len(rows)), [row["ratio"] for row in rows],
           color=[colors.get(row["params"].get("group"), "tab:gray") for row in rows])
    ax.set_xticks(range(len(rows)), [row["shape"] for row in rows], rotation=60, ha="right", fontsize=7)
    _finish(ax, "bf16 GEMM: cuBLAS time / tkjit time")
    return fig


def _attention(plt, rows: list[dict]):
    fig, ax = plt.subplots(figsize=(7, 4))
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        p = row["params"]
        name = f"{row['ref_name']}, D={p['D']}{' causal' if p['causal'] else ''}"
        series.setdefault(name, []).append((p["N"], row["ratio"]))
    for name, points in sorted(series.items()):
        points.sort()
        ax.plot([n for n, _ in points], [r for _, r in points], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N (B·N = 16k tokens, H = 16)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _finish(ax, "attention forward: SDPA time / tkjit time")
    return fig


def _finish(ax, title: str) -> None:
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("ratio (> 1: tkjit faster)")
    ax.set_title(title)
