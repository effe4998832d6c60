"""Where a GEMM row's general/template gap lives: device time, host time, or neither (GPU).

    python3 benchmarks/gemm_gap.py M,N,K [M,N,K ...] [--batches 41] [--json OUT]
    python3 benchmarks/gemm_gap.py --case linear M,N,K ...   # a tests/general_corpus.py case instead
    ncu --clock-control none -k regex:'^gemm$' --metrics gpu__time_duration.sum \\
        python3 benchmarks/gemm_gap.py M,N,K --ncu      # launches general, template, general, ...

Three same-run views of examples/gemm.tk (or, with ``--case``, a corpus kernel) through lowering="general" and lowering="template"
(and cuBLAS beside them), each the median of interleaved batches over inputs rotated past L2:

* ``events``: 20 launches per batch between CUDA events, as benchmarks/general_lowering.py times
  a row: what a caller sees, host launch cost included where it exceeds the kernel's time;
* ``graph``: the same 20 launches captured once in a CUDA graph and replayed: device time only
  (no host launch path between kernels);
* ``host_us``: the host's cost of one launch, enqueued behind a long GPU sleep (so the GPU never
  waits for the host and the host never waits for the GPU).

A gap in ``graph`` is the kernel's; a gap only in ``events`` is the launch path's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import general_lowering as gl  # noqa: E402


def kernels(case=None) -> dict:
    if case is not None:
        return {name: tkjit.compile(case.source, constants=case.constants or None, lowering=name)
                for name in ("general", "template")}
    source = (ROOT / "examples" / "gemm.tk").read_text()
    return {name: tkjit.compile(source, filename="gemm.tk", lowering=name) for name in ("general", "template")}


def make_sets(m: int, n: int, k: int, case=None) -> list:
    if case is not None:
        shape = {"M": m, "N": n, "K": k}
        args = case.make(shape, "cuda")
        nbytes = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        return gl.rotation(lambda: case.make(shape, "cuda"), nbytes)
    return gl.rotation(lambda: (torch.randn(m, k, device="cuda").bfloat16(),
                                torch.randn(k, n, device="cuda").bfloat16(),
                                torch.full((m, n), float("nan"), device="cuda").bfloat16()),
                       2 * (m * k + k * n + m * n))


def host_us(fn, sets, launches=200, rounds=5) -> float:
    """Median over rounds of the host time per launch, the GPU kept busy by a sleep kernel."""
    per = []
    for _ in range(rounds):
        torch.cuda._sleep(int(3e8))  # ~0.2 s of GPU time ahead of the launches
        t0 = time.perf_counter()
        for i in range(launches):
            fn(*sets[i % len(sets)])
        per.append((time.perf_counter() - t0) / launches * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def quartiles(num: list, den: list) -> list:
    ratios = sorted(a / b for a, b in zip(num, den))
    q = statistics.quantiles(ratios, n=4)
    return [round(q[0], 3), round(q[2], 3)]


def row(m: int, n: int, k: int, ks: dict, batches: int, case=None) -> dict:
    sets = make_sets(m, n, k, case)
    out_at = case.outputs[0] if case is not None else 2
    ref = case.reference(sets[0])[0] if case is not None else sets[0][0].float() @ sets[0][1].float()
    out = {"shape": f"{m}x{n}x{k}", "kernel": case.name if case is not None else "gemm", "backends": {}}
    for name, kern in ks.items():
        kern(*sets[0])
        torch.cuda.synchronize()
        out["backends"][name] = gl.backend(kern)  # after a launch: the metadata exists
        out[f"{name}_err"] = round(gl.rel_err(sets[0][out_at], ref), 5)
        sets[0][out_at].fill_(float("nan"))
    fns = dict(ks)
    if case is None:
        fns = {"cublas": lambda a, b, c: torch.matmul(a, b, out=c), **ks}
    raw: dict = {}
    ev = gl.timed_together(fns, sets, batches=batches, raw=raw)
    out["events_us"] = {k_: round(v, 2) for k_, v in ev.items()}
    out["events_general_vs_template"] = round(ev["template"] / ev["general"], 3)
    out["events_iqr"] = quartiles(raw["template"], raw["general"])
    graphs = {name: gl.graph_of(fn, sets) for name, fn in fns.items()}
    if all(g is not None for g in graphs.values()):
        gt = gl.graph_times(graphs, batches)
        med = {k_: statistics.median(v) for k_, v in gt.items()}
        out["graph_us"] = {k_: round(v, 2) for k_, v in med.items()}
        out["graph_general_vs_template"] = round(med["template"] / med["general"], 3)
        out["graph_iqr"] = quartiles(gt["template"], gt["general"])
    out["host_us"] = {name: round(host_us(fn, sets), 2) for name, fn in fns.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--batches", type=int, default=41)
    ap.add_argument("--ncu", action="store_true", help="only launch general, template alternately (3 each)")
    ap.add_argument("--case", help="a tests/general_corpus.py case over dims M, N, K instead of examples/gemm.tk")
    ap.add_argument("--json")
    opts = ap.parse_args()
    case = None
    if opts.case:
        sys.path.insert(0, str(ROOT / "tests"))
        from general_corpus import BY_NAME
        case = BY_NAME[opts.case]
    ks = kernels(case)
    shapes = [tuple(int(x) for x in s.split(",")) for s in opts.shapes]
    if opts.ncu:
        for m, n, k in shapes:
            sets = make_sets(m, n, k, case)[:2]
            for i in range(6):
                name = ("general", "template")[i % 2]
                print(f"launch {i}: {name} {m}x{n}x{k}", flush=True)
                ks[name](*sets[i % 2])
                torch.cuda.synchronize()
        return
    rows = []
    for m, n, k in shapes:
        r = row(m, n, k, ks, opts.batches, case)
        print(json.dumps(r), flush=True)
        rows.append(r)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"device": torch.cuda.get_device_name(), "batches": opts.batches,
                                               "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
