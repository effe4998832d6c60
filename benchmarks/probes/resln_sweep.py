"""Residual + LayerNorm (examples/residual_layernorm.tk) at D = 4096 and 8192 against the 1 GiB
copy, with the schedule options of stream-cols that might close the gap to 85% of the copy
bandwidth (issue 17), in one process on the GPU:

    python3 benchmarks/probes/resln_sweep.py --json out.json [--only NAME,...] [--d 1024,4096,8192]
                                             [--rounds 10] [--calls 40] [--list] [--check-only]
    python3 benchmarks/probes/resln_sweep.py --profile "x2 D=4096"      (3 launches, for ncu)

Every variant is compiled, checked against float32 torch on fresh random inputs with its outputs
poisoned (NaN) first, then timed the generality harness's way (benchmarks/tkbench/timing.py on a
GPU with Triton: ``triton.testing.do_bench``, which zeroes a 256 MB buffer before every call so
that L2 holds nothing of the inputs; here the same thing written out: a 256 MB ``zero_()``, then
CUDA events around the one call; the median of every call). The rows -- each variant, RMSNorm at
the same D (examples/rmsnorm.tk, half the bytes) and the 1 GiB ``dst.copy_(src)`` of
benchmarks/tkbench/copybw.py -- are timed in ``--rounds`` rounds of ``--calls`` calls each,
the order of the rows flipping every round, after one warm-up round. Bytes as in
benchmarks/tkbench/generality.py (read + written: 4 R x D + 2 D bf16 for residual + LayerNorm).
The table: ms, GB/s, share of the copy's GB/s, the auto kernel's time over the variant's
(> 1: the variant is faster), registers, shared memory, cluster size, bar.sync in the PTX, CTAs
an SM holds and clusters the device runs at once (cuOccupancy*). D = 1024 runs the few variants
of AT_1024 as the control: the same work a CTA as the 4096 slices, no cluster. ``--list`` prints the variants; ``--check-only`` skips the timing.
On a machine without a GPU, ``--check-only --cpu`` compiles every variant, assembles it with
ptxas (no spills allowed) and runs it on the PTX simulator at 20 rows against the interpreter.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ROWS_OF_D = {1024: 65536, 4096: 16384, 8192: 8192}   # the generality rows (benchmarks/tkbench/generality.py)
AT_1024 = ("auto", "hoist", "st.cs", "l2pf256")
"""The variants run at D = 1024 too (their D = 4096 options): the control with the same work a CTA
and no cluster (88% of the copy in the generality table, against 82% at 4096)."""
GIB = 1 << 30
FLUSH_BYTES = 256 << 20                 # triton.testing.do_bench's L2 flush buffer
EPS = 1e-5
CHECKS: list[bool] = []   # whether each checked H was exactly the bf16 of the f32 sum
DRY = {"dev": "cuda", "rows": None}
"""``--dry-run`` (the CPU: the interpreter at 20 rows, a host clock, a 4 MiB copy) sets these."""

# name -> (stream-cols options at D = 4096, at D = 8192, lowering, other pipeline edits);
# "x2" doubles the cluster (slices of 512 columns: 35-36 KB of shared memory a CTA, 64 registers:
# 4 CTAs an SM against 3); "x2 chunk r48": per-chunk reductions capped at 48 registers (no spills):
# 5 CTAs an SM; "x2 w4 c128": 4 warps, chunks of 128 columns, 64 registers x 128 threads: 6 CTAs an
# SM (shared memory's bound: 6 x 35 KB).
VARIANTS = {
    "auto": ("", "", "auto", None),
    "hoist": ("loop_sync=hoist", "loop_sync=hoist", "auto", None),
    "trip": ("loop_sync=trip", "loop_sync=trip", "auto", None),
    "st.cs": ("store_hint=cs", "store_hint=cs", "auto", None),
    "st.evict_first": ("store_hint=evict_first", "store_hint=evict_first", "auto", None),
    "ld.evict_first": ("load_hint=evict_first", "load_hint=evict_first", "auto", None),
    "l2pf256": ("l2_prefetch=256", "l2_prefetch=256", "auto", None),
    "x2": ("cluster=8", "cluster=16", "auto", None),
    "x2+hoist": ("cluster=8 loop_sync=hoist", "cluster=16 loop_sync=hoist", "auto", None),
    "x2+hoist+st.cs": ("cluster=8 loop_sync=hoist store_hint=cs", "cluster=16 loop_sync=hoist store_hint=cs",
                       "auto", None),
    "x2+hoist+l2pf256": ("cluster=8 loop_sync=hoist l2_prefetch=256", "cluster=16 loop_sync=hoist l2_prefetch=256",
                         "auto", None),
    "x2 chunk r48": ("cluster=8 reduce=chunk maxnreg=48", "cluster=16 reduce=chunk maxnreg=48", "auto", None),
    "x2 w4 c128": ("cluster=8 reduce=chunk cols=128 warps=4", "cluster=16 reduce=chunk cols=128 warps=4", "auto", None),
    "hoist+st.cs+l2pf256": ("loop_sync=hoist store_hint=cs l2_prefetch=256",
                            "loop_sync=hoist store_hint=cs l2_prefetch=256", "auto", None),
    "variance=two": ("variance=two", "variance=two", "auto", None),
    "general": ("", "", "general", None),
    "general fill=tma": ("", "", "general", ("warp-spec", "warp-spec{fill=tma}")),
}


LAUNCH_PROBES = {"auto lb": "auto", "x2 lb": "x2"}
"""Not options (yet): the base variant's kernel launched with cuLaunchKernelEx and the
load-balancing cluster scheduling policy (the launcher's cuLaunchKernel takes the default, spread:
ncu's "PolicySpread"), to see whether the policy fills the SM slots that clusters leave empty."""


def policy_launcher(k):
    """A Launcher for ``k``'s loaded function whose launch is cuLaunchKernelEx with
    CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING (the bindings' calling convention, which Launcher
    takes as an injected ``launch``)."""
    from tkjit.runtime import driver as drv
    from tkjit.runtime.launcher import Launcher
    cu = drv.cu()
    base = next(iter(k._launchers.values()))

    def launch_ex(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
        cfg.sharedMemBytes = smem
        cfg.hStream = cu.CUstream(int(stream or 0))
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
        attr.value.clusterSchedulingPolicyPreference = cu.CUclusterSchedulingPolicy.CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING
        cfg.attrs, cfg.numAttrs = [attr], 1
        return cu.cuLaunchKernelEx(cfg, fn, params, extra or 0)

    meta = k.metadata
    return Launcher(base.function, meta["params"], meta["grid"], meta["block"], int(meta.get("smem_bytes", 0)),
                    name=f"{k.name}-lb", device=base.device, launch=launch_ex)


def pipeline_of(opts: str, edit) -> str | None:
    from tkjit.passes import DEFAULT_PIPELINE
    if not opts and edit is None:
        return None
    p = DEFAULT_PIPELINE.replace("stream-cols", f"stream-cols{{{opts}}}", 1) if opts else DEFAULT_PIPELINE
    if edit is not None:
        p = p.replace(edit[0], edit[1], 1)
    return p


def compile_variant(name: str, d: int, cache: bool = True):
    import tkjit
    o4, o8, lowering, edit = VARIANTS[name]
    opts = o8 if d == 8192 else o4
    kw = {"pipeline": pipeline_of(opts, edit)} if pipeline_of(opts, edit) else {}
    k = tkjit.compile((EXAMPLES / "residual_layernorm.tk").read_text(), constants={"D": d}, lowering=lowering,
                      cache=cache, **kw)
    return k, kw.get("pipeline")


def describe(k) -> dict:
    k.binary  # noqa: B018 - assembles: ptxas's report lands in the metadata
    fn = k.metadata.get("ptxas", {}).get("functions", [{}])[0]
    ptx = k.asm["ptx"]
    return {"backend": k.metadata.get("backend"), "lowering": k.metadata.get("lowering", "register-tile"),
            "registers": fn.get("registers"), "spill_bytes": fn.get("spill_store_bytes"),
            "smem_bytes": k.metadata.get("smem_bytes"), "block": k.metadata.get("block"),
            "cluster": k.metadata.get("cluster"), "bar_sync": ptx.count("bar.sync"),
            "fill": "tma" if "cp.async.bulk.tensor" in ptx else "cp.async" if "cp.async.cg" in ptx else "none"}


def occupancy(k) -> dict:
    """After a launch on the GPU: CTAs an SM holds (cuOccupancyMaxActiveBlocksPerMultiprocessor)
    and, for a cluster, how many clusters the device runs at once (cuOccupancyMaxActiveClusters);
    the share of the SMs' CTA slots those clusters fill (session 13's ncu: 92 clusters of 4 at
    3 CTAs an SM, 368 of 396 slots)."""
    try:
        from tkjit.runtime import driver as drv
        cu = drv.cu()
        fn = next(iter(k._launchers.values())).function
        threads = int(k.metadata["block"][0])
        smem = int(k.metadata.get("smem_bytes", 0))
        err, per_sm = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, threads, smem)
        out = {"ctas_per_sm": int(per_sm)}
        ctas = (k.metadata.get("cluster") or [1])[0]
        if ctas > 1:
            cfg = cu.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = ctas * 1024, 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
            cfg.sharedMemBytes = smem
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = ctas, 1, 1
            cfg.attrs, cfg.numAttrs = [attr], 1
            err, clusters = cu.cuOccupancyMaxActiveClusters(fn, cfg)
            sms = drv.num_sms(None)
            out.update(max_active_clusters=int(clusters), cluster_error=str(err))
            if sms and per_sm:
                out["slots_filled"] = int(clusters) * ctas / (sms * int(per_sm))
            try:  # the launcher's cuLaunchKernel takes the default (spread) policy; load balancing, for comparison
                policy = cu.CUlaunchAttribute()
                policy.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
                policy.value.clusterSchedulingPolicyPreference = \
                    cu.CUclusterSchedulingPolicy.CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING
                cfg.attrs, cfg.numAttrs = [attr, policy], 2
                err, balanced = cu.cuOccupancyMaxActiveClusters(fn, cfg)
                out["max_active_clusters_load_balancing"] = int(balanced)
            except Exception as exc:  # noqa: BLE001 - a diagnostic only
                out["load_balancing_error"] = f"{type(exc).__name__}: {exc}"
        return out
    except Exception as exc:  # noqa: BLE001 - a diagnostic only
        return {"occupancy_error": f"{type(exc).__name__}: {exc}"}


# ------------------------------------------------------------------ on the CPU (no GPU)

def cpu_check(names: list[str], ds: list[int]) -> list[dict]:
    """Compile, ptxas (no spills), and the PTX simulator at 20 rows against the interpreter."""
    import torch
    sys.path.insert(0, str(ROOT / "tests"))
    from test_general_no_product import _simulated
    from test_stream_cache import _norm_case
    out = []
    for d in ds:
        for name in names:
            if (d == 1024 and name not in AT_1024) or name in LAUNCH_PROBES:
                continue
            t0 = time.time()
            k, pipe = compile_variant(name, d, cache=False)
            info = describe(k)
            assert info["spill_bytes"] == 0, f"{name} D={d}: {info['spill_bytes']} bytes spilled"
            args, outs, _ = _norm_case("residual_layernorm", 20, d)
            got = _simulated(k, args, outs)
            want = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            k(*want)   # the interpreter
            for g, i in zip(got, outs):
                assert not torch.isnan(g).any(), f"{name} D={d}: an output element was never written"
                torch.testing.assert_close(g.float(), want[i].float(), rtol=1e-2, atol=1e-2)
            out.append({"name": name, "D": d, **info, "check": "ptx simulator = interpreter",
                        "seconds": round(time.time() - t0, 1)})
            print(f"{name:22s} D={d}: ok  regs {info['registers']}, smem {info['smem_bytes']}, "
                  f"cluster {info['cluster']}, bar.sync {info['bar_sync']}, {info['backend']}", flush=True)
    return out


# ------------------------------------------------------------------ on the GPU

def _dev() -> str:
    return DRY["dev"]


def _sync() -> None:
    import torch
    if _dev() == "cuda":
        torch.cuda.synchronize()


def _resln_args(r, d, dev=None):
    import torch
    dev = dev or _dev()
    bf = dict(dtype=torch.bfloat16, device=dev)
    nan = dict(fill_value=float("nan"), **bf)
    return [(torch.randn(r, d, device=dev) * 2 + 0.5).bfloat16(), torch.randn(r, d, **bf),
            torch.randn(d, **bf), torch.randn(d, **bf), torch.full((r, d), **nan), torch.full((r, d), **nan), EPS]


def check_resln(k, r, d) -> float:
    """Fresh inputs, poisoned outputs; against float32 torch (whether H is exactly the bf16 of the
    f32 sum is recorded in CHECKS). ``k``: the kernel or a launcher of it."""
    import torch
    import torch.nn.functional as F
    args = _resln_args(r, d)
    k(*args)
    _sync()
    x, res, w, b, hh, y = args[:6]
    h = x.float() + res.float()
    ref = F.layer_norm(h, (d,), w.float(), b.float(), eps=EPS)
    if torch.isnan(hh).any() or torch.isnan(y).any():
        raise AssertionError("an output element was never written (NaN left)")
    h_err = ((hh.float() - h).norm() / h.norm()).item()
    if not h_err < 1e-2:
        raise AssertionError(f"H: relative error {h_err}")
    err = ((y.float() - ref).norm() / ref.norm()).item()
    if not err < 1e-2:
        raise AssertionError(f"Y: relative error {err}")
    CHECKS.append(bool(torch.equal(hh, h.bfloat16())))
    return max(err, h_err)


def check_rms(k, r, d) -> float:
    import torch
    x = (torch.randn(r, d, device=_dev()) * 2 + 0.5).bfloat16()
    w = torch.randn(d, dtype=torch.bfloat16, device=_dev())
    y = torch.full((r, d), float("nan"), dtype=torch.bfloat16, device=_dev())
    k(x, w, y, 1e-6)
    _sync()
    xf = x.float()
    ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    err = ((y.float() - ref).norm() / ref.norm()).item()
    if torch.isnan(y).any() or not err < 1e-2:
        raise AssertionError(f"RMSNorm: relative error {err}")
    return err


def timed_calls(fn, flush, calls: int) -> list[float]:
    """do_bench's method: zero the 256 MB buffer (L2 keeps none of the inputs), events around one call."""
    import torch
    if _dev() != "cuda":  # the dry run: a host clock
        out = []
        for _ in range(calls):
            flush.zero_()
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


SKIP: dict[tuple[str, int], str] = {}
"""(variant, D) -> why it is not run: a non-portable cluster that failed its trial in a child process."""
NONPORTABLE_TRIAL_S = 120


def try_nonportable(names: list[str], ds: list[int]) -> None:
    """A cluster over 8 CTAs is a first on this code's launcher: check those variants first in a
    child process (a launch error can leave the CUDA context unusable, a hang would stop the
    sweep), and skip them here if it failed."""
    import subprocess
    import tempfile
    risky = [n for n in names if n in VARIANTS and "cluster=16" in VARIANTS[n][1]]
    if 8192 not in ds or not risky:
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "trial.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--check-only", "--only", ",".join(risky),
               "--d", "8192", "--json", str(out), "--no-trial"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NONPORTABLE_TRIAL_S)
            rows = json.loads(out.read_text())["rows"] if out.exists() else {}
            why = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        except subprocess.TimeoutExpired:
            rows, why = {}, [f"the trial hung (killed after {NONPORTABLE_TRIAL_S} s)"]
    for name in risky:
        row = rows.get(f"resln {name} D=8192")
        if row is None or "error" in row:
            SKIP[(name, 8192)] = "skipped: the child-process trial of the 16-CTA cluster failed: " + (
                row["error"] if row else why[0])
        print(f"trial of {name} D=8192 (cluster of 16): {SKIP.get((name, 8192), 'ok')}", flush=True)


def gpu_run(names: list[str], ds: list[int], rounds: int, calls: int, check_only: bool) -> dict:
    import torch
    import tkjit
    dev = torch.cuda.get_device_name() if _dev() == "cuda" else "cpu (dry run: the interpreter, a host clock)"
    rows: dict[str, dict] = {}
    fns: dict[str, object] = {}
    keep = []
    for d in ds:
        r = DRY["rows"] or ROWS_OF_D[d]
        args = _resln_args(r, d)
        keep.append(args)
        nbytes = 2.0 * (4 * r * d + 2 * d)
        for name in names:
            if (d == 1024 and name not in AT_1024) or name in LAUNCH_PROBES:
                continue
            key = f"resln {name} D={d}"
            row = rows[key] = {"kind": "residual_layernorm", "variant": name, "D": d, "R": r, "bytes": nbytes}
            try:
                t0 = time.time()
                k, pipe = compile_variant(name, d)
                row.update(describe(k), pipeline=pipe, compile_s=round(time.time() - t0, 2))
                if (name, d) in SKIP:
                    raise RuntimeError(SKIP[(name, d)])
                row["rel_err"] = check_resln(k, r, d)
                row["H_exact"] = CHECKS[-1]
                row.update(occupancy(k))
                fns[key] = (lambda k=k, a=args: k(*a))
            except Exception as exc:  # noqa: BLE001 - a failing variant is reported, the rest run
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(f"{key}: {row.get('error') or 'ok, rel err %.2e' % row['rel_err']}", flush=True)
        for name, base in LAUNCH_PROBES.items():
            if base not in names or name not in names or (d == 1024 and base not in AT_1024):
                continue
            key, bkey = f"resln {name} D={d}", f"resln {base} D={d}"
            row = rows[key] = {"kind": "residual_layernorm", "variant": name, "D": d, "R": r, "bytes": nbytes,
                               "launch": "cuLaunchKernelEx, cluster scheduling policy load balancing"}
            try:
                if bkey not in fns:
                    raise RuntimeError(f"its kernel ({base}) did not pass")
                k, pipe = compile_variant(base, d)
                row.update(describe(k), pipeline=pipe)
                check_resln(k, r, d)  # the first launch makes the kernel's own launcher (policy_launcher takes its function)
                lb = policy_launcher(k)
                row["rel_err"] = check_resln(lb, r, d)
                fns[key] = (lambda lb=lb, a=args: lb(*a))
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(f"{key}: {row.get('error') or 'ok, rel err %.2e' % row['rel_err']}", flush=True)
        key = f"rmsnorm D={d}"
        rows[key] = {"kind": "rmsnorm", "variant": "auto", "D": d, "R": r, "bytes": 2.0 * (2 * r * d + d)}
        try:
            rms = tkjit.compile((EXAMPLES / "rmsnorm.tk").read_text(), constants={"D": d})
            x = (torch.randn(r, d, device=_dev()) * 2 + 0.5).bfloat16()
            w = torch.randn(d, dtype=torch.bfloat16, device=_dev())
            y = torch.empty(r, d, dtype=torch.bfloat16, device=_dev())
            keep.append((x, w, y))
            rows[key].update(describe(rms), rel_err=check_rms(rms, r, d))
            rows[key].update(occupancy(rms))
            fns[key] = (lambda k=rms, a=(x, w, y, 1e-6): k(*a))
        except Exception as exc:  # noqa: BLE001
            rows[key]["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    size = GIB if _dev() == "cuda" else 4 << 20
    src = torch.randint(0, 256, (size,), dtype=torch.uint8, device=_dev())
    dst = torch.empty_like(src)
    dst.copy_(src)
    assert torch.equal(dst, src)
    rows["copy 1 GiB"] = {"kind": "copy", "bytes": 2.0 * size}
    fns["copy 1 GiB"] = lambda: dst.copy_(src)
    result = {"device": dev, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "method": f"256 MB zero_() then CUDA events around each call (do_bench's); {rounds} rounds of "
                        f"{calls} calls a row, the order flipping every round, after a warm-up round; median",
              "rows": rows}
    if check_only:
        return result
    flush = torch.empty(FLUSH_BYTES if _dev() == "cuda" else 1 << 20, dtype=torch.int8, device=_dev())
    order = list(fns)
    times = {key: [] for key in order}
    for key in order:   # warm-up
        timed_calls(fns[key], flush, 3)
    for rnd in range(rounds):
        for key in (order if rnd % 2 == 0 else order[::-1]):
            times[key] += timed_calls(fns[key], flush, calls)
    for key, ts in times.items():
        ts = sorted(ts)
        rows[key].update(ms=statistics.median(ts), p20_ms=ts[len(ts) // 5], p80_ms=ts[(4 * len(ts)) // 5],
                         runs=len(ts))
        rows[key]["GBps"] = rows[key]["bytes"] / rows[key]["ms"] / 1e6
    copy_gbps = rows["copy 1 GiB"]["GBps"]
    for key, row in rows.items():
        if "ms" in row:
            row["share_of_copy"] = row["GBps"] / copy_gbps
            auto = rows.get(f"resln auto D={row.get('D')}")
            if row["kind"] == "residual_layernorm" and auto and "ms" in auto:
                row["auto_over_variant"] = auto["ms"] / row["ms"]
    return result


def table(result: dict) -> str:
    lines = [f"{result['device']}, {result['date']}: {result['method']}",
             f"{'row':40s} {'ms':>8s} {'GB/s':>7s} {'copy':>6s} {'auto/v':>7s}  regs smem   clu bar cta/SM clusters (spread/lb)"]
    for key, row in result["rows"].items():
        if "error" in row:
            lines.append(f"{key:40s} ERROR {row['error']}")
            continue
        if "ms" not in row:
            continue
        ratio = f"{row['auto_over_variant']:.3f}" if "auto_over_variant" in row else ""
        clu = (row.get("cluster") or [1])[0] if row["kind"] != "copy" else ""
        clusters = "/".join(str(row[c]) for c in ("max_active_clusters", "max_active_clusters_load_balancing")
                            if c in row)  # spread (the default) / load balancing
        extra = (f"  {row.get('registers', '')!s:>4} {row.get('smem_bytes', '')!s:>6} {clu!s:>3} "
                 f"{row.get('bar_sync', '')!s:>3} {row.get('ctas_per_sm', '?')!s:>6} "
                 f"{clusters:>8}") if row["kind"] != "copy" else ""
        lines.append(f"{key:40s} {row['ms']:8.4f} {row['GBps']:7.0f} {100 * row['share_of_copy']:5.1f}% "
                     f"{ratio:>7s}{extra}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--only", default="", help="comma-separated variant names (auto is always run)")
    ap.add_argument("--d", default="1024,4096,8192")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="with --check-only: ptxas and the PTX simulator, no GPU")
    ap.add_argument("--profile", default="", help='"NAME D=N": only launch that variant 3 times (for ncu)')
    ap.add_argument("--no-trial", action="store_true", help="run the 16-CTA clusters without the child-process trial")
    ap.add_argument("--dry-run", action="store_true", help="the whole GPU path on the CPU: the interpreter at "
                    "20 rows, a host clock (checks the script, times nothing real)")
    a = ap.parse_args(argv)
    if a.list:
        for name, (o4, o8, low, edit) in VARIANTS.items():
            print(f"{name:22s} lowering={low:8s} D=4096: {o4 or '-':45s} D=8192: {o8 or '-'}"
                  + (f"  ({edit[1]})" if edit else ""))
        for name, base in LAUNCH_PROBES.items():
            print(f"{name:22s} {base}'s kernel launched with the load-balancing cluster scheduling policy")
        return 0
    names = [n for n in a.only.split(",") if n] or [*VARIANTS, *LAUNCH_PROBES]
    unknown = [n for n in names if n not in VARIANTS and n not in LAUNCH_PROBES]
    if unknown:
        ap.error(f"no variant {', '.join(unknown)}; --list shows them")
    if "auto" not in names:
        names.insert(0, "auto")
    for probe in [n for n in names if n in LAUNCH_PROBES]:
        if LAUNCH_PROBES[probe] not in names:
            names.append(LAUNCH_PROBES[probe])
    ds = [int(d) for d in a.d.split(",")]
    if a.cpu:
        rows = cpu_check(names, ds)
        if a.json:
            Path(a.json).write_text(json.dumps({"cpu_check": rows}, indent=1) + "\n")
        return 0
    if a.profile:
        name, d = a.profile.rsplit(" D=", 1)
        k, _ = compile_variant(name, int(d))
        args = _resln_args(DRY["rows"] or ROWS_OF_D[int(d)], int(d))
        for _ in range(3):
            k(*args)
        _sync()
        print(f"profiled {a.profile}: {describe(k)}")
        return 0
    if a.dry_run:
        DRY.update(dev="cpu", rows=20)
    t0 = time.time()
    if not a.dry_run and not a.no_trial:
        try_nonportable(names, ds)
    result = gpu_run(names, ds, a.rounds, a.calls, a.check_only)
    result["wall_s"] = round(time.time() - t0, 1)
    if not a.check_only:
        print(table(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 1 if any("error" in r for r in result["rows"].values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
