"""The general sm_90a lowering against torch, same run (GPU).

    python3 benchmarks/general_lowering.py [--quick] [--all-gemm] [--graph] [--json OUT.json]

Rows:
* the plain GEMM (examples/gemm.tk) through the general lowering against cuBLAS (torch.matmul) in
  the same interleaved batches (until 2026-11-27 also through the GEMM template, which was deleted
  that day: the A/B rows are benchmarks/results/2026-11-27-nvidia-h200-s11-gemm-*.json);
* the corpus kernels users write (tests/general_corpus.py) against the torch call that computes
  the same thing: GEMM + bias + relu against ``torch.compile`` of the expression and against
  cuBLAS's plain matmul (the epilogue should be free), batched GEMM against torch.bmm, alpha/beta
  GEMM against torch.addmm, Aᵀ·B against torch.matmul on the transposed view, X·Wᵀ against
  torch.matmul.

Each figure is the median of 15 batches of 20 launches (CUDA events), the batches of all sides
interleaved so clock and power drift fall on each alike; inputs rotate over enough sets to
exceed the 60 MB L2. Outputs are checked against float32 torch before timing. Each row also
names the backend the kernel took.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from general_corpus import BY_NAME  # noqa: E402

L2_BYTES = 60 << 20


def batch_us(fn, sets, per_batch=20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(per_batch):
        fn(*sets[i % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / per_batch * 1e3


def timed_together(fns: dict, sets, batches=15, raw: dict | None = None) -> dict[str, float]:
    """Median batch time of each fn, the batches interleaved; ``raw`` (a dict) receives every
    batch's time per fn, in batch order (batch b of each fn ran next to the others' batch b)."""
    for fn in fns.values():
        batch_us(fn, sets, 3)
    times = {name: [] for name in fns}
    for b in range(batches):
        order = list(fns.items()) if b % 2 == 0 else list(reversed(fns.items()))
        for name, fn in order:
            times[name].append(batch_us(fn, sets))
    if raw is not None:
        raw.update(times)
    return {name: statistics.median(t) for name, t in times.items()}


def paired_spread(raw: dict, num: str, den: str) -> list[float]:
    """Quartiles (25%, 75%) of the per-batch ratios raw[num][b] / raw[den][b]: how far one run's
    ratio can be trusted (a row 0.98 with quartiles 0.97-0.99 is not a row at 1.0)."""
    ratios = sorted(n / d for n, d in zip(raw[num], raw[den]))
    q = statistics.quantiles(ratios, n=4)
    return [round(q[0], 3), round(q[2], 3)]


def graph_of(fn, sets, per_batch=20):
    """A CUDA graph of ``per_batch`` launches of fn over the rotated sets (None if capture fails):
    replayed, it times the kernels alone, no host launch path between them."""
    fn(*sets[0])  # the launcher and its maps exist before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            for i in range(per_batch):
                fn(*sets[i % len(sets)])
    except Exception as e:  # noqa: BLE001 - reported; the events view still stands
        print(json.dumps({"graph_capture_failed": repr(e)[:300]}), flush=True)
        return None
    return g


def graph_times(graphs: dict, batches: int, per_batch=20) -> dict:
    """Each graph's replays, interleaved as timed_together's batches: us per launch, per batch."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {name: [] for name in graphs}
    for g in graphs.values():
        g.replay()
    for b in range(batches):
        order = list(graphs.items()) if b % 2 == 0 else list(reversed(graphs.items()))
        for name, g in order:
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / per_batch * 1e3)
    return times


def rotation(make, nbytes: int) -> list:
    return [make() for _ in range(max(2, -(-2 * L2_BYTES // max(nbytes, 1))))]


def rel_err(got, ref) -> float:
    return ((got.float() - ref).norm() / ref.norm()).item()


def backend(kernel) -> str:
    md = kernel.metadata
    return f"{md.get('backend')}/{md.get('lowering', '-')}"


def gemm_rows(shapes, out: list, graph: bool = False) -> None:
    """``graph``: each row also timed by CUDA-graph replay (device time only; for rows of a few
    microseconds, where the events' batches spread by several percent), and the verdict uses it."""
    source = (ROOT / "examples" / "gemm.tk").read_text()
    general = tkjit.compile(source, filename="gemm.tk", lowering="general")
    for m, n, k in shapes:
        sets = rotation(lambda: (torch.randn(m, k, device="cuda").bfloat16(),
                                 torch.randn(k, n, device="cuda").bfloat16(),
                                 torch.full((m, n), float("nan"), device="cuda").bfloat16()),
                        2 * (m * k + k * n + m * n))
        ref = sets[0][0].float() @ sets[0][1].float()
        row = {"row": "gemm", "shape": f"{m}x{n}x{k}"}
        general(*sets[0])
        torch.cuda.synchronize()
        row["general_err"] = round(rel_err(sets[0][2], ref), 5)
        sets[0][2].fill_(float("nan"))
        raw: dict = {}
        times = timed_together({"cublas": lambda a, b, c: torch.matmul(a, b, out=c),
                                "general": general}, sets, raw=raw)
        row.update({f"{k_}_us": round(v, 2) for k_, v in times.items()})
        row["general_vs_cublas"] = round(times["cublas"] / times["general"], 3)
        row["general_vs_cublas_iqr"] = paired_spread(raw, "cublas", "general")
        row["tflops_general"] = round(2 * m * n * k / times["general"] / 1e6, 1)
        row["backend_general"] = backend(general)
        if graph:
            fns = {"cublas": lambda a, b, c: torch.matmul(a, b, out=c), "general": general}
            graphs = {name: graph_of(fn, sets) for name, fn in fns.items()}
            if all(g is not None for g in graphs.values()):
                gt = graph_times(graphs, 15)
                med = {k_: statistics.median(v) for k_, v in gt.items()}
                row.update({f"graph_{k_}_us": round(v, 2) for k_, v in med.items()})
                row["graph_general_vs_cublas"] = round(med["cublas"] / med["general"], 3)
                row["graph_general_vs_cublas_iqr"] = paired_spread(gt, "cublas", "general")
            del graphs
        print(json.dumps(row), flush=True)
        out.append(row)


def case_row(name: str, shape: dict, refs: dict, out: list) -> None:
    case = BY_NAME[name]
    kern = tkjit.compile(case.source, constants=case.constants or None, lowering="auto")
    args = case.make(shape, "cuda")
    want = case.reference(args)
    kern(*args)
    torch.cuda.synchronize()
    row = {"row": name, "shape": "x".join(f"{k}{v}" for k, v in shape.items()), "backend": backend(kern)}
    row["err"] = round(max(rel_err(args[i], w) for i, w in zip(case.outputs, want)), 5)
    nbytes = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
    sets = rotation(lambda: case.make(shape, "cuda"), nbytes)
    if name == "gemm_alpha_beta":  # C is read and written: keep it bounded over many launches
        sets = [s[:3] + [1.0, 0.5] for s in sets]
    fns = {"tkjit": kern, **refs}
    times = timed_together(fns, sets)
    row.update({f"{k_}_us": round(v, 2) for k_, v in times.items()})
    for ref_name in refs:
        row[f"vs_{ref_name}"] = round(times[ref_name] / times["tkjit"], 3)
    print(json.dumps(row), flush=True)
    out.append(row)


def corpus_rows(quick: bool, out: list) -> None:
    compiled = torch.compile(lambda a, b, bias, c: c.copy_(torch.relu(a @ b + bias)))
    for size in ((4096,) if quick else (4096, 8192)):
        case_row("gemm_bias_relu", {"M": size, "N": size, "K": size},
                 {"torch_compile": compiled,
                  "cublas_plain": lambda a, b, bias, c: torch.matmul(a, b, out=c)}, out)
    case_row("bmm", {"B": 8, "M": 2048, "N": 2048, "K": 2048},
             {"torch_bmm": lambda a, b, c: torch.bmm(a, b, out=c)}, out)
    case_row("gemm_alpha_beta", {"M": 4096, "N": 4096, "K": 4096},
             {"torch_addmm": lambda a, b, c, alpha, beta: torch.addmm(c, a, b, beta=beta, alpha=alpha, out=c)},
             out)
    case_row("gemm_atb", {"M": 4096, "N": 4096, "K": 4096},
             {"torch_matmul": lambda a, b, c: torch.matmul(a.t(), b, out=c)}, out)
    case_row("linear", {"M": 4096, "N": 4096, "K": 4096},
             {"torch_matmul_bf16": lambda x, w, y: torch.matmul(x, w.t())}, out)


def attention_rows(out: list) -> None:
    """examples/attention.tk (the general lowering; the attention template it was held to was
    deleted on 2026-11-27) against SDPA cuDNN."""
    source = (ROOT / "examples" / "attention.tk").read_text()
    b, h, n = 4, 16, 4096
    for d in (128, 64):
        for causal in (False, True):
            consts = {"D": d, "CAUSAL": causal}
            general = tkjit.compile(source, filename="attention.tk", constants=consts, lowering="general")

            def make():
                q, k, v = (torch.randn(b, h, n, d, device="cuda").bfloat16() for _ in range(3))
                return (q, k, v, torch.full_like(q, float("nan")),
                        torch.full((b, h, n), float("nan"), device="cuda"), d ** -0.5)
            sets = rotation(make, 4 * b * h * n * d * 2)
            q, k, v, o, lse, scale = sets[0]
            ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                   is_causal=causal)
            row = {"row": "attention", "shape": f"{b}x{h}x{n}x{d}{' causal' if causal else ''}",
                   "backend_general": backend(general)}
            for name, kern in (("general", general),):
                o.fill_(float("nan"))
                kern(*sets[0])
                torch.cuda.synchronize()
                row[f"{name}_err"] = round(rel_err(o, ref), 5)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def cudnn(q, k, v, o, lse, scale):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            times = timed_together({"cudnn": cudnn, "general": general}, sets)
            row.update({f"{k_}_us": round(v_, 2) for k_, v_ in times.items()})
            row["general_vs_cudnn"] = round(times["cudnn"] / times["general"], 3)
            print(json.dumps(row), flush=True)
            out.append(row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--only", default="gemm,corpus,attention", help="comma-separated: gemm, corpus, attention")
    ap.add_argument("--graph", action="store_true",
                    help="GEMM rows also timed by CUDA-graph replay (device time); the verdict uses it")
    ap.add_argument("--all-gemm", action="store_true",
                    help="the GEMM rows at benchmarks/run.py's shapes too (square, K sweep, LLM projections)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    torch.zeros(1, device="cuda")
    rows: list = []
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024), (8192, 8192, 1024),
              (4096, 4096, 256), (1000, 3000, 520), (8192, 14336, 4096)]
    if args.all_gemm:  # every GEMM row of benchmarks/run.py as well, once each
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from tkbench.gemm import K_SWEEP, LLM_M, LLM_NK, SQUARE
        more = [(n, n, n) for n in SQUARE] + [(4096, 4096, k) for k in K_SWEEP]
        more += [(m, n, k) for m in LLM_M for n, k in LLM_NK]
        shapes += [s for s in more if s not in shapes]
    if "gemm" in only:
        gemm_rows(shapes[:2] + shapes[5:6] if args.quick else shapes, rows, graph=args.graph)
    if "corpus" in only:
        corpus_rows(args.quick, rows)
    if "attention" in only:
        attention_rows(rows)
    print("row".ljust(18) + "shape".ljust(22) + "ratios")
    for r in rows:
        ratios = {k: v for k, v in r.items() if k.startswith("vs_") or k.endswith("_vs_cublas")
                  or k == "general_vs_cudnn"}
        print(r["row"].ljust(18) + r["shape"].ljust(22) + "  ".join(f"{k}={v}" for k, v in ratios.items()))
    gemm = [r for r in rows if r["row"] == "gemm"]
    if gemm:  # the worst GEMM row against cuBLAS (the template it was held to is gone)
        view = "graph_general_vs_cublas" if all("graph_general_vs_cublas" in r for r in gemm) \
            else "general_vs_cublas"
        worst = min(gemm, key=lambda r: r[view])
        print(f"worst GEMM row against cuBLAS ({'device time, CUDA graphs' if view != 'general_vs_cublas' else 'events'}): "
              f"{worst['shape']} {worst[view]} (quartiles {worst[view + '_iqr']})")
    if args.json:
        info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
