"""stream-cols' off-by-default options on how a streamed kernel meets barriers, hints its global
accesses and how wide a cluster may be (benchmarks/probes/resln_sweep.py measures them):
``loop_sync=hoist`` (one barrier before a chunk loop that only reads what was written before it,
codegen/emit_control.py), ``store_hint``, ``load_hint``, ``l2_prefetch`` (codegen/cache_hints.py),
``maxnreg`` and ``cluster=16`` (a non-portable cluster size: the verifier, the pass, the launcher's
opt-in). On the CPU: the IR attributes and decisions, the PTX, refusals, and the examples on the PTX
simulator (its race detector sees a missing barrier) against the interpreter."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from test_general_no_product import _simulated
from test_stream_cache import _norm_case
from test_stream_cols import RMS_IR, run_pass

import tkjit
from tkjit.errors import PassError, TkError
from tkjit.ir.parser import parse_kernel
from tkjit.passes import DEFAULT_PIPELINE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


REGISTER_TILE = "canonicalize,stream-cols,mask-branch,scale-fold"
"""These options were built and measured on the register-tile backend (its barriers are the ones
``loop_sync`` moves): the tests below compile for it; ``auto`` takes the general lowering for these
kernels since session 18, which takes the hints and the register cap too (the last test)."""


def _resln(d: int, opts: str = "", general: bool = False, **kw):
    base = DEFAULT_PIPELINE if general else REGISTER_TILE
    pipeline = base.replace("stream-cols", f"stream-cols{{{opts}}}", 1) if opts else base
    return tkjit.load(EXAMPLES / "residual_layernorm.tk", constants={"D": d}, cache=False, pipeline=pipeline, **kw)


def test_the_general_lowering_takes_the_hints_and_the_register_cap():
    """Under the default pipeline (the general lowering, auto since session 18): the row block's
    copies take the L2 prefetch size and policy, the stores straight from registers the store
    hint, and stream-cols{maxnreg} is reg-budget's pin (.maxnreg printed, said in explain())."""
    k = _resln(4096, "store_hint=cs l2_prefetch=256 load_hint=evict_first maxnreg=64", general=True)
    ptx = k.asm["ptx"]
    assert k.metadata["lowering"] == "general"
    assert "st.global.cs" in ptx and ".L2::256B" in ptx and "L2::cache_hint" in ptx and ".maxnreg 64" in ptx
    assert "pinned by stream-cols{maxnreg}" in str(k.explain())
    k.binary  # noqa: B018
    assert k.metadata["ptxas"]["functions"][0]["registers"] <= 64


def _loops(ptx: str) -> list[tuple[int, int]]:
    """(head, end) line numbers of each ``for`` loop of the PTX."""
    lines = ptx.splitlines()
    heads = {m.group(1): i for i, ln in enumerate(lines) if (m := re.match(r"\$L_for_(\d+):", ln.strip()))}
    ends = {str(int(m.group(1)) - 1): i for i, ln in enumerate(lines)
            if (m := re.match(r"\$L_for_end_(\d+):", ln.strip()))}
    return [(heads[k], ends[k]) for k in heads]


def _why(kernel, decision: str) -> list[str]:
    """The reasons explain() gives for the codegen decision ``decision``."""
    lines = str(kernel.explain()).splitlines()
    return [lines[i + 1].strip().removeprefix("because ") for i, ln in enumerate(lines[:-1])
            if ln.strip().startswith(f"@{kernel.name}: {decision}:")]


def _simulate_agrees(kernel, d: int, r: int = 20, name: str = "residual_layernorm") -> None:
    args, outs, _ = _norm_case(name, r, d)
    got = _simulated(kernel, args, outs)
    want = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kernel(*want)  # the interpreter
    for g, i in zip(got, outs):
        assert not torch.isnan(g).any(), "an output element was never written"
        torch.testing.assert_close(g.float(), want[i].float(), rtol=1e-2, atol=1e-2)


def test_the_options_become_kernel_attributes_and_are_logged():
    out, log = run_pass(RMS_IR, "stream-cols{loop_sync=hoist store_hint=cs load_hint=evict_first l2_prefetch=128 "
                                "maxnreg=64}")
    head = out.splitlines()[0]
    for attr in ('loop_barriers = "hoisted"', 'store_hint = "cs"', 'load_hint = "evict_first"', "l2_prefetch = 128",
                 "register_cap = 64"):
        assert attr in head
    text = log.render()
    assert "barrier hoisted out of the loop" in text and "take the cache hint: cs" in text
    assert "L2 prefetch size (bytes): 128" in text and "capped at: 64" in text
    plain, log = run_pass(RMS_IR, "stream-cols{loop_sync=trip}")
    assert "attributes" not in plain.splitlines()[0] or "loop_barriers" not in plain.splitlines()[0]
    assert "hoisted" not in log.render()


@pytest.mark.parametrize("opts, why", [("loop_sync=never", "loop_sync must be"), ("store_hint=lu", "store_hint must be"),
                                       ("load_hint=cs", "load_hint must be"), ("l2_prefetch=512", "l2_prefetch must be"),
                                       ("maxnreg=8", "maxnreg must be"), ("cluster=32", "cluster must be none, auto or 2 to 16")])
def test_bad_values_are_pass_errors(opts, why):
    with pytest.raises(PassError, match=why):
        run_pass(RMS_IR, f"stream-cols{{{opts}}}")


def test_auto_hoists_over_a_cluster_only():
    """loop_sync=auto (the default): residual + LayerNorm's clustered row block of two row tiles
    (D = 4096) hoists, logged with its measurement; one CTA a row block (D = 1024), and LayerNorm's
    clustered block of one row tile, keep a barrier a trip."""
    clustered = _resln(4096)
    assert _why(clustered, "loop_barriers") and "loop_sync=auto on a row block split over a cluster of 4 that " \
        "keeps 2 row tiles" in str(clustered.explain())
    assert clustered.asm["ptx"] == _resln(4096, "loop_sync=hoist").asm["ptx"]
    alone = _resln(1024)
    assert not _why(alone, "loop_barriers") and "barrier hoisted" not in str(alone.explain())
    assert alone.asm["ptx"] == _resln(1024, "loop_sync=trip").asm["ptx"]
    # one row tile over a cluster: registers can set the CTAs an SM holds, so a barrier every trip
    ln = tkjit.load(EXAMPLES / "layernorm.tk", constants={"D": 4096}, cache=False)
    assert "loop_sync=auto on a row block of 1 row tile(s)" in str(ln.explain())
    assert "barrier hoisted" not in str(ln.explain())


def test_trip_keeps_a_barrier_in_every_copy_loop_and_hoist_moves_it_before_the_first():
    base, hoisted = _resln(4096, "loop_sync=trip"), _resln(4096, "loop_sync=hoist")
    for kernel, inside in ((base, [1, 1]), (hoisted, [0, 0])):
        lines = kernel.asm["ptx"].splitlines()
        loops = _loops(kernel.asm["ptx"])
        assert len(loops) == 2
        assert [sum(ln.strip() == "bar.sync 0;" for ln in lines[a:b]) for a, b in loops] == inside
    lines = hoisted.asm["ptx"].splitlines()
    first = _loops(hoisted.asm["ptx"])[0][0]
    wait = max(i for i, ln in enumerate(lines[:first]) if "cp.async.wait_all" in ln)
    assert lines[first - 1].strip() == "bar.sync 0;" and wait < first - 1  # after the copies landed
    assert not _why(base, "loop_barriers")
    why = _why(hoisted, "loop_barriers")
    assert any("once, before the loop" in w for w in why) and any("none at the loop's head" in w for w in why)
    assert "barrier hoisted" in str(hoisted.explain())


def test_a_loop_that_writes_what_its_next_trip_reads_keeps_its_barrier():
    """Per-chunk reductions write the reduction scratch every trip, which the trip before read:
    the hoisted form keeps the barrier at the top of every trip (and the simulator agrees)."""
    k = _resln(4096, "reduce=chunk loop_sync=hoist")
    why = _why(k, "loop_barriers")
    assert why and all("every trip" in w for w in why)
    _simulate_agrees(k, 4096)


def test_the_simulator_catches_a_hoisted_barrier_placed_before_the_copies_land():
    """Without the barrier before the first loop the first trip reads the row block while other
    threads' copies may still land: the simulator's race detector refuses it (so the check of the
    hoisted form below can fail)."""
    import dataclasses

    from ptxsim import RaceError
    k = _resln(4096, "loop_sync=hoist")
    lines = k.asm["ptx"].splitlines()
    first = _loops(k.asm["ptx"])[0][0]
    del lines[first - 1]
    fake = dataclasses.make_dataclass("K", ["asm", "metadata", "_result"])({"ptx": "\n".join(lines)}, k.metadata,
                                                                           k._result)
    args, outs, _ = _norm_case("residual_layernorm", 20, 4096)
    with pytest.raises(RaceError):
        _simulated(fake, args, outs)


@pytest.mark.parametrize("d, opts", [(4096, "loop_sync=hoist"), (8192, "loop_sync=hoist"),
                                     (4096, "store_hint=cs l2_prefetch=256"),
                                     (4096, "store_hint=evict_first load_hint=evict_first"),
                                     (4096, "cluster=8 loop_sync=hoist"), (8192, "cluster=16")])
def test_the_variants_agree_on_the_ptx_simulator(d, opts):
    k = _resln(d, opts)
    k.binary  # noqa: B018 - ptxas
    fn = k.metadata["ptxas"]["functions"][0]
    assert fn["spill_store_bytes"] == fn["spill_load_bytes"] == 0
    _simulate_agrees(k, d)


@pytest.mark.parametrize("name", ["rmsnorm", "layernorm"])
def test_the_other_norms_hoisted_agree_on_the_ptx_simulator(name):
    k = tkjit.load(EXAMPLES / f"{name}.tk", constants={"D": 4096}, cache=False,
                   pipeline=DEFAULT_PIPELINE.replace("stream-cols", "stream-cols{loop_sync=hoist}", 1))
    assert _why(k, "loop_barriers")
    _simulate_agrees(k, 4096, 21, name)


def test_the_sweep_script_runs_on_the_cpu(tmp_path):
    """benchmarks/probes/resln_sweep.py end to end on the CPU (--dry-run: the interpreter at 20 rows,
    a host clock): each row checked, the table and the JSON written."""
    import importlib.util
    import json
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "probes" / "resln_sweep.py"
    spec = importlib.util.spec_from_file_location("resln_sweep", path)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    out = tmp_path / "sweep.json"
    try:
        assert sweep.main(["--dry-run", "--rounds", "1", "--calls", "1", "--only", "x2", "--d", "4096",
                           "--json", str(out)]) == 0
    finally:
        sweep.DRY.update(dev="cuda", rows=None)
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"resln auto D=4096", "resln x2 D=4096", "rmsnorm D=4096", "copy 1 GiB"}
    assert rows["resln x2 D=4096"]["cluster"] == [8, 1, 1] and rows["resln x2 D=4096"]["rel_err"] < 1e-2
    assert all("ms" in r for r in rows.values())
    with pytest.raises(SystemExit):
        sweep.main(["--only", "nosuch"])


def test_the_cache_hints_are_in_the_ptx():
    ptx = _resln(4096, "store_hint=cs l2_prefetch=256").asm["ptx"]
    stores = [ln for ln in ptx.splitlines() if "st.global" in ln and ".v4" in ln]
    assert stores and all("st.global.cs.v4.b32" in ln for ln in stores)
    copies = [ln for ln in ptx.splitlines() if "cp.async.cg" in ln]
    assert copies and all("cp.async.cg.shared.global.L2::256B " in ln for ln in copies)
    ptx = _resln(4096, "store_hint=evict_first load_hint=evict_first").asm["ptx"]
    assert ptx.count("createpolicy.fractional.L2::evict_first.b64") == 1
    policy = re.search(r"createpolicy\S+ (%rd\d+), 1.0;", ptx).group(1)
    stores = [ln for ln in ptx.splitlines() if "st.global" in ln and ".v4" in ln]
    assert stores and all("st.global.L1::no_allocate.L2::cache_hint.v4.b32" in ln and ln.endswith(f", {policy};")
                          for ln in stores)
    copies = [ln for ln in ptx.splitlines() if "cp.async.cg" in ln]
    assert copies and all(".L2::cache_hint " in ln and ln.endswith(f", {policy};") for ln in copies)
    base = _resln(4096).asm["ptx"]
    assert "createpolicy" not in base and ".cs." not in base and "L2::" not in base


def test_maxnreg_caps_the_registers():
    k = _resln(4096, "maxnreg=64")
    assert ".maxnreg 64" in k.asm["ptx"]
    k.binary  # noqa: B018
    assert k.metadata["ptxas"]["functions"][0]["registers"] <= 64
    assert _why(k, "maxnreg") == [".maxnreg 64: the pass option stream-cols{maxnreg} (ptxas keeps each thread within "
                                  "it, so more CTAs fit an SM by registers)"]


def test_a_cluster_of_16_is_a_non_portable_size_the_pass_takes_when_pinned():
    k = _resln(8192, "cluster=16")
    assert ".reqnctapercluster 16, 1, 1" in k.asm["ptx"] and k.metadata["cluster"] == [16, 1, 1]
    assert "non-portable" in str(k.explain()) and "512 columns each" in str(k.explain())
    assert _resln(8192).metadata["cluster"] == [8, 1, 1]  # auto never takes it
    with pytest.raises(TkError, match="cluster must be 1 to 16"):
        parse_kernel(RMS_IR.replace("blocks %0", "blocks {cluster = 17} %0"))


def test_the_launcher_opts_in_to_a_cluster_over_8(monkeypatch):
    from tkjit.runtime import driver
    calls = []

    class Fake:
        class CUfunction_attribute:
            CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = "nonportable"

        @staticmethod
        def cuFuncSetAttribute(fn, attr, value):
            calls.append((fn, attr, value))
            return (0,)

    monkeypatch.setattr(driver, "_cu", Fake)
    monkeypatch.setattr(driver, "check", lambda result, what: result)
    driver.allow_nonportable_cluster("fn", 8)
    assert calls == []
    driver.allow_nonportable_cluster("fn", 16)
    assert calls == [("fn", "nonportable", 1)]
