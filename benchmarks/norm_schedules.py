"""Row-wise kernels (RMSNorm, residual + LayerNorm, LayerNorm) against the copy bandwidth, one
schedule variant per row: the examples as written and candidate schedules, for issue 17.

    python3 benchmarks/norm_schedules.py [--out results.json] [--rows examples,variants,candidates,s11c,...]
                                         [--only SUBSTRING,...] [--profile "LABEL D=N"]

Rows: the examples as written at D = 1024, 4096 and 8192 (``examples``), the softmax and rotary
examples (``others``: their code changes with the register-tile backend's column order), stream-cols options
applied to them through the pipeline string (``variants``), the hand-written schedules of
``norm_candidates/`` (``candidates``), session 11's sweeps (``s11``, ``s11b``; ``s11c``: the row block
split over a cluster, stream-cols{cluster=k}; ``s12``: session 12's push exchange against the barrier
exchange and the forms around it; ``s12b``: the committed default against session 11's form), torch.compile (``torch``; ``torch-wide``: D = 4096, 8192). Each row: compile, check against float64 torch on fresh random inputs with the outputs poisoned
(NaN) first, then time with CUDA events (warm-up, median of many calls) alternating with a
device-to-device copy of the same number of bytes (read + written) in the same run; the row's
figure is the copy's time over the kernel's (share of the measured copy bandwidth).
``--profile NAME`` runs the named row a few times only (for ncu).
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
EXAMPLES = ROOT / "examples"
CANDIDATES = Path(__file__).resolve().parent / "norm_candidates"
ROWS_OF_D = {1024: 65536, 4096: 16384, 8192: 8192}


def _rms_args(r, d):
    x = (torch.randn(r, d, device="cuda") * 2 + 0.5).bfloat16()
    w = torch.randn(d, dtype=torch.bfloat16, device="cuda")
    y = torch.full((r, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    return [x, w, y, 1e-6], (2,)


def _rms_truth(args):
    x, w, _, eps = args
    xd = x.double()
    return [xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()]


def _resln_args(r, d):
    bf = dict(dtype=torch.bfloat16, device="cuda")
    nan = dict(fill_value=float("nan"), **bf)
    return [(torch.randn(r, d, device="cuda") * 2 + 0.5).bfloat16(), torch.randn(r, d, **bf),
            torch.randn(d, **bf), torch.randn(d, **bf), torch.full((r, d), **nan),
            torch.full((r, d), **nan), 1e-5], (4, 5)


def _resln_truth(args):
    x, res, w, b = args[:4]
    h = x.double() + res.double()
    return [h, torch.nn.functional.layer_norm(h, (h.shape[-1],), w.double(), b.double(), eps=args[6])]


def _ln_args(r, d):
    bf = dict(dtype=torch.bfloat16, device="cuda")
    return [(torch.randn(r, d, device="cuda") * 2 + 0.5).bfloat16(), torch.randn(d, **bf), torch.randn(d, **bf),
            torch.full((r, d), float("nan"), **bf), 1e-5], (3,)


def _ln_truth(args):
    x, w, b = args[:3]
    return [torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(), eps=args[4])]


def _softmax_args(r, d):
    return [(torch.randn(r, d, device="cuda") * 2).bfloat16(),
            torch.full((r, d), float("nan"), dtype=torch.bfloat16, device="cuda")], (1,)


def _softmax_truth(args):
    return [torch.softmax(args[0].double(), -1)]


def _rotary_args(r, d):  # r rows of D = 128 features: B=1, H=r//4096, N=4096
    n, h = 4096, max(1, r // 4096)
    bf = dict(dtype=torch.bfloat16, device="cuda")
    return [torch.randn(1, h, n, d, **bf), torch.randn(n, d // 2, **bf), torch.randn(n, d // 2, **bf),
            torch.full((1, h, n, d), float("nan"), **bf)], (3,)


def _rotary_truth(args):
    x, cos, sin = (a.double() for a in args[:3])
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return [torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)]


def _torch_fn(family: str):
    """The family's expression in torch (f32 math, bf16 outputs), for torch.compile."""
    import torch.nn.functional as F

    if family == "rmsnorm":
        def fn(x, w, y, eps):
            xf = x.float()
            y.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).bfloat16())
    elif family == "layernorm":
        def fn(x, w, b, y, eps):
            y.copy_(F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), eps=eps).bfloat16())
    elif family == "residual_layernorm":
        def fn(x, res, w, b, h, y, eps):
            hf = x.float() + res.float()
            h.copy_(hf.bfloat16())
            y.copy_(F.layer_norm(hf, (hf.shape[-1],), w.float(), b.float(), eps=eps).bfloat16())
    elif family == "softmax":
        def fn(x, y):
            y.copy_(torch.softmax(x.float(), -1).bfloat16())
    else:
        raise ValueError(family)
    return fn


FAMILIES = {  # name -> (make args, truth, tensors of R x D bytes moved)
    "softmax": (_softmax_args, _softmax_truth, 2),
    "rotary": (_rotary_args, _rotary_truth, 2),
    "rmsnorm": (_rms_args, _rms_truth, 2),
    "residual_layernorm": (_resln_args, _resln_truth, 4),
    "layernorm": (_ln_args, _ln_truth, 2),
}


PORTABLE = "canonicalize,stream-cols"
VARIANTS = {  # label -> stream-cols options (the register-tile backend takes the IR after them)
    "default": "",
    "shared S=4": "loads=shared stages=4",
    "shared DC=1024 S=4": "loads=shared cols=1024 stages=4",
    "registers": "loads=registers",
    "registers DC=256": "loads=registers cols=256",
    "registers DC=1024": "loads=registers cols=1024",
    "registers no prefetch": "loads=registers prefetch=false",
}


ALL3 = ("rmsnorm", "layernorm", "residual_layernorm")
S11 = {  # label -> (stream-cols options, D values, families): session 11's first sweep (GPU call 1)
    "cache DC=256": ("force=true cache=shared cols=256", (1024,), ALL3 + ("softmax",)),
    "cache DC=128": ("force=true cache=shared cols=128", (1024,), ALL3),
    "direct": ("direct=true", (1024,), ALL3),
    "cache DC=256 ": ("cache=shared cols=256", (4096, 8192), ALL3),
    "cache 64K DC=256": ("cache=shared cache_bytes=65536 cols=256", (4096, 8192), ALL3),
    "resident=1 S=4": ("resident=1 stages=4", (4096, 8192), ALL3),
    "resident=2 S=4": ("resident=2 stages=4", (4096, 8192), ALL3),
    "resident=2 S=2": ("resident=2", (4096, 8192), ALL3),
}
S11B = {  # session 11's second sweep (GPU call 2): cache=auto (the default) against the forms around it
    "old default": ("cache=none", (1024, 4096, 8192), ALL3),
    "direct": ("cache=none direct=true", (1024,), ALL3 + ("softmax",)),
    "cache direct DC=128": ("force=true cache=shared cols=128 direct=true", (1024,), ALL3 + ("softmax",)),
    "auto S=4": ("stages=4", (4096, 8192), ALL3),
    "auto 32K": ("cache_bytes=32768", (4096, 8192), ALL3),
    "auto 96K": ("cache_bytes=98304", (4096, 8192), ALL3),
    "auto 160K": ("cache_bytes=163840", (4096, 8192), ALL3),
    "auto resident=2": ("resident=2", (4096, 8192), ALL3),
    "auto resident=2 S=4": ("resident=2 stages=4", (4096, 8192), ALL3),
    "auto tile": ("reduce=tile", (1024, 4096, 8192), ALL3),
    "auto warps=8": ("warps=8", (1024, 4096, 8192), ALL3),
    "auto tile warps=8": ("reduce=tile warps=8", (1024, 4096, 8192), ALL3),
    "auto tile warps=8 32K": ("reduce=tile warps=8 cache_bytes=32768", (4096, 8192), ALL3),
    "auto tile warps=8 S=4": ("reduce=tile warps=8 stages=4", (4096, 8192), ALL3),
    "auto tile warps=8 resident=2": ("reduce=tile warps=8 resident=2", (4096, 8192), ALL3),
    "auto tile warps=16 DC=512": ("reduce=tile warps=16 cols=512", (1024, 4096, 8192), ALL3),
    "no cache direct DC=256 S=4": ("cache=none direct=true cols=256 stages=4", (4096, 8192), ALL3),
}

S11C = {  # session 11's cluster sweep (helper norms2): the row block split over a cluster of k CTAs
    "cluster=2": ("cluster=2", (4096, 8192), ALL3),
    "cluster=4": ("cluster=4", (4096, 8192), ALL3),
    "cluster=8": ("cluster=8", (4096, 8192), ALL3),
    "cluster=2 128K": ("cluster=2 cache_bytes=131072", (4096,), ALL3),
    "cluster=4 128K": ("cluster=4 cache_bytes=131072", (8192,), ALL3),
    "cluster=4 tile warps=8": ("cluster=4 reduce=tile warps=8", (8192,), ALL3),
}

S12 = {  # session 12 (helper norms): the push exchange (the default) against the forms around it
    "exchange=barrier": ("exchange=barrier", (4096, 8192), ALL3),
    "warps=8": ("warps=8", (4096, 8192), ALL3),
    "cols=512": ("cols=512", (4096, 8192), ALL3),
    "tile warps=8": ("reduce=tile warps=8", (4096, 8192), ALL3),
    "cluster=8": ("cluster=8", (4096,), ALL3),
    "cluster=4": ("cluster=4", (8192,), ALL3),
}
S12B = {  # session 12's second call: the committed default (push, reduce=tile, 8 warps) against session
    # 11's form (exact PTX: barrier exchange, per-chunk reductions, 4 warps) and the push exchange alone
    "s11 form (barrier chunk 4 warps)": ("exchange=barrier reduce=chunk warps=4", (4096, 8192), ALL3),
    "push chunk 4 warps": ("reduce=chunk warps=4", (4096, 8192), ALL3),
    "cluster=8": ("cluster=8", (4096,), ALL3),
}


S13 = {  # session 13 (helper resln), call 1: what bounds residual + LayerNorm at D = 4096 / 8192
    # label -> (source: an example family or a norm_candidates/ file, stream-cols options or None, D values)
    "resln tile warps=8 (the split slice's form, no cluster)": ("residual_layernorm", "reduce=tile warps=8", (1024,)),
    "resln cluster=8 chunk 4 warps": ("residual_layernorm", "cluster=8 reduce=chunk warps=4", (4096,)),
    "resln onepass (E[h^2]-mean^2: 2 passes, 1 exchange round)": ("resln_onepass", None, (1024, 4096, 8192)),
    "resln xonly (timing proxy: later passes re-read x alone)": ("resln_xonly", None, (4096, 8192)),
    "layernorm tile warps=8 (no cluster)": ("layernorm", "reduce=tile warps=8", (1024,)),
}


S13B = {  # session 13 (helper resln), call 2: the deferred row block loads alone (moments=false: two
    # cluster_sum exchanges, as before) against the default (one cluster_moments exchange)
    "moments=false (deferred loads only)": (None, "moments=false", (4096, 8192)),
}


S13C = {  # session 13 (helper resln), for the lead's next GPU call: onepass (the slice's mean and
    # variance from one pass about a shift, one exchange) against the default, with the moments form
    "moments onepass": "moments=true onepass=true",
    "moments (Chan, three passes)": "moments=true",
}


def rows(which: str = "examples,variants") -> list[dict]:
    """(label, family, source file, constants, pipeline) of every variant measured."""
    out = []
    if "s13c" in which.split(","):
        for label, opts in S13C.items():
            for fam in ("residual_layernorm", "layernorm"):
                for d in (4096, 8192):
                    out.append(dict(label=f"{fam} {label}", family=fam, D=d, path=EXAMPLES / f"{fam}.tk",
                                    constants={"D": d}, pipeline=f"{PORTABLE}{{{opts}}}"))
    if "s13b" in which.split(","):
        for label, (_, opts, ds) in S13B.items():
            for fam in ("residual_layernorm", "layernorm"):
                for d in ds:
                    out.append(dict(label=f"{fam} {label}", family=fam, D=d, path=EXAMPLES / f"{fam}.tk",
                                    constants={"D": d}, pipeline=f"{PORTABLE}{{{opts}}}"))
    if "s13" in which.split(","):
        for label, (src, opts, ds) in S13.items():
            fam = src if src in FAMILIES else "residual_layernorm"
            path = EXAMPLES / f"{src}.tk" if src in FAMILIES else CANDIDATES / f"{src}.tk"
            for d in ds:
                out.append(dict(label=label, family=fam, D=d, path=path,
                                constants={} if d == 1024 and src in FAMILIES else {"D": d},
                                **({"pipeline": f"{PORTABLE}{{{opts}}}"} if opts else {})))
    for key, table in (("s12", S12), ("s12b", S12B), ("s11c", S11C), ("s11b", S11B), ("s11", S11)):
        if key not in which.split(","):
            continue
        for label, (opts, ds, fams) in table.items():
            for fam in fams:
                for d in ds:
                    dim = "C" if fam == "softmax" else "D"
                    out.append(dict(label=f"{fam} {label.strip()}", family=fam, D=d,
                                    path=EXAMPLES / f"{fam}.tk", constants={} if d == 1024 else {dim: d},
                                    pipeline=f"{PORTABLE}{{{opts}}}"))
    if "others" in which:  # row-wise examples whose code the contiguous column order changes
        out.append(dict(label="softmax example", family="softmax", path=EXAMPLES / "softmax.tk", D=1024,
                        R=65536, constants={}))
        out.append(dict(label="softmax cache=none", family="softmax", path=EXAMPLES / "softmax.tk", D=1024,
                        R=65536, constants={}, pipeline=f"{PORTABLE}{{cache=none}}"))
        out.append(dict(label="rotary example", family="rotary", path=EXAMPLES / "rotary.tk", D=128,
                        R=4096 * 128, constants={}))
    if "softmax-wide" in which.split(","):  # the softmax example at C = 4096 / 8192: the default and one CTA
        for d in (4096, 8192):
            for label, pipe in (("softmax example", None), ("softmax cluster=none", f"{PORTABLE}{{cluster=none}}")):
                out.append(dict(label=label, family="softmax", path=EXAMPLES / "softmax.tk", D=d,
                                constants={"C": d}, **({"pipeline": pipe} if pipe else {})))
    if "examples" in which.split(","):
        for fam in ("rmsnorm", "residual_layernorm", "layernorm"):
            for d in (1024, 4096, 8192):
                out.append(dict(label=f"{fam} example", family=fam, path=EXAMPLES / f"{fam}.tk", D=d,
                                constants={} if d == 1024 else {"D": d}))
    if "variants" in which:
        for fam in ("rmsnorm", "residual_layernorm"):
            for d in (4096, 8192):
                for label, opts in VARIANTS.items():
                    if label == "default":
                        continue
                    out.append(dict(label=f"{fam} {label}", family=fam, path=EXAMPLES / f"{fam}.tk", D=d,
                                    constants={"D": d}, pipeline=f"{PORTABLE}{{{opts}}}"))
        for fam in ("rmsnorm", "residual_layernorm"):  # streaming rows that fit, for comparison
            for label, opts in (("direct", "direct=true"), ("forced registers", "force=true loads=registers"),
                                ("forced registers DC=256", "force=true loads=registers cols=256")):
                out.append(dict(label=f"{fam} {label}", family=fam, path=EXAMPLES / f"{fam}.tk", D=1024,
                                constants={}, pipeline=f"{PORTABLE}{{{opts}}}"))
    if "candidates" in which:  # the hand-written schedules measured before stream-cols existed
        for d, dcs in ((1024, (256, 512)), (4096, (512, 1024)), (8192, (512, 1024))):
            for dc in dcs:
                out.append(dict(label=f"rms stream reg DC={dc}", family="rmsnorm", D=d,
                                path=CANDIDATES / "rms_stream_reg.tk", constants={"D": d, "DC": dc}))
        for d, dc, st in ((1024, 256, 3), (4096, 512, 2), (4096, 512, 4), (8192, 1024, 2), (8192, 512, 4)):
            out.append(dict(label=f"rms stream st DC={dc} S={st}", family="rmsnorm", D=d,
                            path=CANDIDATES / "rms_stream_st.tk", constants={"D": d, "DC": dc, "S": st}))
        for d, dcs in ((1024, (512,)), (4096, (512, 1024)), (8192, (512, 1024))):
            for dc in dcs:
                out.append(dict(label=f"resln stream reg DC={dc}", family="residual_layernorm", D=d,
                                path=CANDIDATES / "resln_stream_reg.tk", constants={"D": d, "DC": dc}))
    if "torch" in which.split(",") or "torch-wide" in which.split(","):  # torch.compile of each example's expression
        for fam in ("rmsnorm", "residual_layernorm", "layernorm"):
            for d in (1024, 4096, 8192) if "torch" in which.split(",") else (4096, 8192):
                out.append(dict(label=f"{fam} torch.compile", family=fam, D=d, torch=True, path="", constants={}))
    return out


def _events(fn, n: int) -> list[float]:
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def measure(row: dict, rounds: int = 6, per_round: int = 15) -> dict:
    make, truth, tensors = FAMILIES[row["family"]]
    d = row["D"]
    r = row["R"] if "R" in row else ROWS_OF_D[d]
    out = {k: (str(v) if isinstance(v, Path) else v) for k, v in row.items()}
    out["R"] = r
    try:
        if row.get("torch"):
            kernel = torch.compile(_torch_fn(row["family"]), dynamic=False)
            out["backend"] = "torch.compile"
        else:
            kernel = tkjit.load(row["path"], constants=row["constants"] or None, pipeline=row.get("pipeline"))
            kernel.binary  # noqa: B018 - compiled now: the metadata below is the cubin's
            out["backend"] = kernel.metadata.get("backend", "?")
            out["schedule"] = [f"{x.pass_name}: {x.decision}" for x in kernel.decisions
                               if x.pass_name in ("stream-cols", "codegen")][:14]
            fn0 = kernel.metadata.get("ptxas", {}).get("functions", [{}])[0]
            out["registers"], out["spills"] = fn0.get("registers"), fn0.get("spill_store_bytes")
            out["smem_bytes"], out["block"] = kernel.metadata.get("smem_bytes"), kernel.metadata.get("block")
            out["grid"] = kernel.metadata.get("grid")
        args, outs = make(r, d)
        exact = truth(args)
        kernel(*args)
        torch.cuda.synchronize()
        errs = [((args[o].double() - t).norm() / t.norm()).item() for o, t in zip(outs, exact)]
        out["rel_err"] = max(errs)
        nbytes = 2 * tensors * r * d
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fresh = [make(r, d)[0] for _ in range(2)]
        call = [lambda a=a: kernel(*a) for a in fresh]
        copy = lambda: dst.copy_(src)  # noqa: E731
        for fn in call + [copy]:
            _events(fn, 5)
        tk, cp = [], []
        for i in range(rounds):
            pair = [(tk, call[i % 2]), (cp, copy)]
            for acc, fn in (pair if i % 2 == 0 else pair[::-1]):
                acc += _events(fn, per_round)
        out["tkjit_us"] = 1e3 * statistics.median(tk)
        out["copy_us"] = 1e3 * statistics.median(cp)
        out["copy_share"] = out["copy_us"] / out["tkjit_us"]
        out["GBps"] = nbytes / (out["tkjit_us"] * 1e3)
        out["status"] = "ok" if out["rel_err"] < 1e-2 else "WRONG"
    except Exception as exc:  # noqa: BLE001
        out["status"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", default="")
    ap.add_argument("--profile")
    ap.add_argument("--rows", default="examples,others,variants",
                    help="examples, others, variants, candidates, s11, s11b, s11c, s12, s12b, s13, s13b, s13c, softmax-wide, torch, torch-wide "
                         "(comma-separated)")
    a = ap.parse_args(argv)
    todo = [r for r in rows(a.rows) if all(s in f"{r['label']} D={r['D']}" for s in a.only.split(",") if s)]
    if a.profile:
        row = next(r for r in todo if f"{r['label']} D={r['D']}" == a.profile)
        kernel = tkjit.load(row["path"], constants=row["constants"] or None, pipeline=row.get("pipeline"))
        args, _ = FAMILIES[row["family"]][0](row["R"] if "R" in row else ROWS_OF_D[row["D"]], row["D"])
        for _ in range(4):
            kernel(*args)
        torch.cuda.synchronize()
        return 0
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    big_dst = torch.empty_like(big)
    _events(lambda: big_dst.copy_(big), 3)
    gib_us = 1e3 * statistics.median(_events(lambda: big_dst.copy_(big), 20))
    copy_gbps = 2 * (1 << 30) / (gib_us * 1e3)  # bytes read + written per ns
    del big, big_dst
    print(f"1 GiB d2d copy: {gib_us:.1f} us, {copy_gbps:.0f} GB/s", flush=True)
    results = []
    for row in todo:
        res = measure(row)
        if "GBps" in res:
            res["share_of_1GiB_copy"] = res["GBps"] / copy_gbps
        results.append(res)
        share = f"{100 * res['copy_share']:.0f}%" if "copy_share" in res else "-"
        if a.out:  # after every row: a run cut short keeps what it measured
            Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                               "copy_1GiB_us": gib_us, "copy_1GiB_GBps": copy_gbps,
                                               "rows": results}, indent=1, default=str) + "\n")
        print(f"{res['label']:<34} D={res['D']:<5} R={res['R']:<6} {res.get('backend', '-'):<9} "
              f"regs={res.get('registers')} smem={res.get('smem_bytes')} "
              f"tk={res.get('tkjit_us', 0):8.1f}us copy={res.get('copy_us', 0):8.1f}us share={share:>5} "
              f"of1GiB={100 * res.get('share_of_1GiB_copy', 0):3.0f}% "
              f"err={res.get('rel_err', float('nan')):.1e} {res['status']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
