"""benchmarks/run.py without a GPU: the --dry-run mode runs every family at tiny shapes on the CPU
interpreter through the real worker process, and must produce the JSON, the rows (including an
error row for a kernel that does not compile) and the short table last. The parent's runner is
tested against a fake worker that hangs, crashes and loses its context; the GPU-test summary
against a small pytest suite; summarize.py against the dry run's JSON."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "benchmarks" / "run.py"
sys.path.insert(0, str(REPO / "benchmarks"))

from tkbench import gpu_tests, table, targets  # noqa: E402
from tkbench.runner import Runner  # noqa: E402


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run([sys.executable, str(RUN), "--dry-run", "--no-tests", "--plot", "--out", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads(out.read_text()), out


def rows_of(report, family):
    return [row for row in report["rows"] if row["family"] == family]


def test_dry_run_writes_every_family(dry_run):
    _, report, _ = dry_run
    assert report["mode"]["dry_run"] and report["environment"]["device"] == "cpu"
    assert report["tests"] == {"ran": False, "why": "--no-tests"}
    families = {row["family"] for row in report["rows"]}
    assert families == {"gemm", "attention", "copy", "layernorm", "softmax", "rotary", "generality", "jit",
                        "selftest"}
    assert report["workers"] == 1


def test_dry_run_checks_the_kernels_against_float64(dry_run):
    _, report, _ = dry_run
    for family in ("gemm", "attention", "layernorm", "softmax", "rotary"):
        for row in rows_of(report, family):
            assert row["status"] == "ok", row
            assert row["unwritten"] == 0 and 1e-5 < row["rel_err"] < 1e-2
            assert row["tkjit_ms"] > 0 and row["tkjit_timing"]["runs"] == 3
            assert row["rotation_sets"] >= 1
    gemm = rows_of(report, "gemm")[0]
    assert gemm["ratio"] == pytest.approx(gemm["ref_ms"] / gemm["tkjit_ms"])
    assert gemm["tkjit_tflops"] == pytest.approx(gemm["flops"] / gemm["tkjit_ms"] / 1e9)


def test_dry_run_generality_rows(dry_run):
    """Each generality row names its kernel's backend and reference; the kernels are checked
    (two outputs, C read and written, attention on two heads) and the README table is printed."""
    proc, report, _ = dry_run
    rows = rows_of(report, "generality")
    assert {row["extra"]["kernel"] for row in rows} == {"gemm_bias_gelu", "gemm_alpha_beta",
                                                        "residual_layernorm", "attention_window"}
    for row in rows:
        assert row["status"] == "ok" and row["extra"]["backend"] == "interpreter", row
        assert row["unwritten"] == 0 and 1e-5 < row["rel_err"] < 1e-2 and row["tkjit_ms"] > 0
    baseline = next(row for row in rows if row["ref_name"] == "cuBLAS matmul (no epilogue)")
    assert baseline["ref_rel_err"] is None and baseline["target"] == "≥ 0.97× cuBLAS matmul"
    norm = next(row for row in rows if row["extra"]["kernel"] == "residual_layernorm")
    assert norm["frac_of_copy"] is not None and norm["target"] == "≥ 85% of copy bandwidth"
    assert "| attention_window | B=1 H=2 N=100 D=64 window=40 | interpreter | FlexAttention" in proc.stdout


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("kernel", ["gemm_bias_gelu", "gemm_bias_silu", "bmm", "gemm_alpha_beta", "gemm_atb",
                                    "gemm_fp8", "mlp", "rmsnorm", "residual_layernorm", "attention_nol",
                                    "attention_window", "attention_softcap", "attention_alibi", "attention_exp",
                                    "attention_mask", "attention_f16", "attention_bwd", "linear_attention"])
def test_generality_references_compute_what_the_kernel_does(kernel):
    """Every generality reference (FlexAttention's score_mod/block_mask, torch.compile's
    expression run eagerly here, the cuBLAS calls) matches the float64 truth the kernel is
    checked against, on the CPU at the dry run's shape: the ratios compare like with like."""
    from tkbench import generality
    from tkbench.context import Context, Mode
    ctx = Context(Mode(dry_run=True), "cpu", 1 << 18, 1 << 30, False, 0.0, 0.0)
    p = dict(kernel=kernel, **generality.DRY[kernel])
    spec = generality.SPECS[kernel]
    args = spec.make(p, "cpu")
    truth = spec.exact(p, args)
    for name, ref in spec.refs(p, ctx):
        if name in generality.BASELINES:
            continue
        try:
            err = generality.reference_error(ref, args, p, spec, truth)
        except RuntimeError as exc:  # a CPU build: no cuDNN attention, no fp8 matmul
            assert "SDPA cuDNN" in name or "_scaled_mm" in name, exc
            continue
        assert err < 1e-2, (name, err)
    assert generality.shape_of(p) and (spec.flops or spec.bytes)(p) > 0


def test_dry_run_reference_failures_are_recorded_not_fatal(dry_run):
    _, report, _ = dry_run
    attention = rows_of(report, "attention")
    assert [row["ref_name"] for row in attention] == ["SDPA cuDNN", "SDPA flash"] * 2
    for row in attention:
        if row["ref_name"] == "SDPA cuDNN":   # a CPU build of torch has no cuDNN attention
            assert row["ref_error"].startswith("RuntimeError: ") and row["ref_ms"] is None
            assert row["ratio"] is None and row["status"] == "ok"


def test_dry_run_memory_bound_rows_share_of_copy(dry_run):
    _, report, _ = dry_run
    copy = rows_of(report, "copy")[0]
    assert copy["status"] == "measured" and copy["ref_gbps"] > 0
    for family in ("layernorm", "softmax", "rotary"):
        row = rows_of(report, family)[0]
        assert row["frac_of_copy"] == pytest.approx(row["tkjit_gbps"] / copy["ref_gbps"])
    assert rows_of(report, "layernorm")[0]["target"] == "≥ 90% of copy bandwidth"


def test_dry_run_error_row_for_a_kernel_that_does_not_compile(dry_run):
    proc, report, _ = dry_run
    (row,) = rows_of(report, "selftest")
    assert row["status"] == "error" and row["tkjit_ms"] is None
    assert row["error"].startswith("VerifyError: gemm_swapped.tk:11:13: error: mma_AB:")
    assert "tkjit: VerifyError: gemm_swapped.tk:11:13" in proc.stdout


def test_dry_run_jit_rows_say_what_is_missing(dry_run):
    _, report, _ = dry_run
    launch, vs_triton, cold, load = rows_of(report, "jit")
    assert launch["tkjit_ms"] > 0 and launch["ref_ms"] > 0 and launch["extra"]["launcher_us"] > 0
    assert vs_triton["ref_error"] == "n/a: Triton needs a GPU (dry run)"
    for row in (cold, load):
        assert row["ref_error"] == "n/a: Triton needs a GPU (dry run)"
        assert row["status"] in ("n/a", "measured", "error", "unsupported")


def test_dry_run_prints_the_table_last(dry_run):
    proc, report, out = dry_run
    lines = proc.stdout.rstrip("\n").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("what "))
    headline = lines[:header]
    while headline and headline[-1].startswith("plot: "):  # written when matplotlib is installed
        headline.pop()
    assert any(f"JSON: {out}" in line for line in headline[-2:])
    body = [line for line in lines[header + 2:] if not line.startswith("    ")]
    assert len(body) == len(report["rows"])
    assert lines[-1].startswith("    tkjit: VerifyError")   # the self-test row's error, the last row's note
    assert all(len(line) <= 120 for line in lines[header:])


def test_summarize_turns_the_json_into_markdown(dry_run, tmp_path):
    _, report, out = dry_run
    md = tmp_path / "benchmarks.md"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "summarize.py"), str(out), "-o", str(md)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    assert text.startswith(f"## {report['date'][:10]} — cpu (dry run)\n")
    for title in ("### bf16 GEMM vs torch.matmul (cuBLAS)", "### Attention forward vs PyTorch SDPA",
                  "### Memory-bound kernels vs eager PyTorch", "### JIT costs",
                  "### Generality: examples written as a new user would, and the backend each took"):
        assert title in text
    assert "| gemm bf16 vs torch.matmul | M=N=K=128 |" in text
    assert "| gemm_alpha_beta | M=96 N=80 K=64 | interpreter | cuBLAS addmm_ (in place) |" in text
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "summarize.py"), str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "is not a results file" in proc.stderr


def test_only_names_the_families():
    proc = subprocess.run([sys.executable, str(RUN), "--only", "gemm,nope"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "unknown benchmark family nope; choose from gemm, attention, copy" in proc.stderr


# ---------------------------------------------------------------- the runner, with a fake worker

FAKE_WORKER = textwrap.dedent("""\
    import json, os, sys, time
    plan = json.load(open(sys.argv[1]))
    out = open(sys.argv[2], "a")
    def emit(record):
        out.write(json.dumps(record) + "\\n")
        out.flush()
    if plan["cases"][0]["params"]["act"] == "no-start":
        sys.exit("no GPU here")
    emit({"environment": {"gpu": "fake"}})
    for case in plan["cases"]:
        act = case["params"]["act"]
        row = {"family": case["family"], "what": act, "shape": "-", "status": "ok", "params": case["params"]}
        if act == "hang":
            time.sleep(600)
        if act == "crash":
            print("boom: the fake worker dies", flush=True)
            os._exit(9)
        if act == "lose":
            emit({"case": case["id"], "rows": [row], "context_lost": True})
            sys.exit(3)
        emit({"case": case["id"], "rows": [row]})
""")


def run_fake(tmp_path, acts, timeout=1.0, budget=120.0):
    worker = tmp_path / "worker.py"
    worker.write_text(FAKE_WORKER)

    def argv(cases_path, results_path):
        return [sys.executable, str(worker), cases_path, results_path]

    cases = [{"id": i, "family": family, "params": {"act": act}} for i, (family, act) in enumerate(acts)]
    runner = Runner(worker_argv=argv, case_timeout_s=timeout, deadline=time.monotonic() + budget, echo=None)
    outcome = runner.run(cases, {"dry_run": True})
    return outcome, [outcome.rows[case["id"]][0] for case in cases]


def test_runner_survives_a_hang_a_crash_and_a_lost_context(tmp_path):
    acts = [("a", "ok"), ("a", "hang"), ("a", "ok"), ("b", "crash"), ("b", "ok"), ("c", "lose"), ("c", "ok")]
    outcome, rows = run_fake(tmp_path, acts)
    assert [row["status"] for row in rows] == ["ok", "timeout", "ok", "crashed", "ok", "ok", "ok"]
    assert rows[1]["error"] == "stopped after 1 s without finishing (hung?)"
    assert rows[3]["error"] == ("the worker exited with status 9 during this case; "
                                "its last output: boom: the fake worker dies")
    assert outcome.workers == 4 and outcome.environment == {"gpu": "fake"}
    assert outcome.strikes == {"a": 1, "b": 1, "c": 1}


def test_runner_skips_a_family_that_keeps_hanging(tmp_path):
    _, rows = run_fake(tmp_path, [("h", "hang"), ("h", "hang"), ("h", "ok"), ("g", "ok")], timeout=0.5)
    assert [row["status"] for row in rows] == ["timeout", "timeout", "skipped", "ok"]
    assert rows[2]["error"] == "not run: 2 earlier cases of this family hung or crashed"


def test_runner_stops_when_the_worker_cannot_start(tmp_path):
    outcome, rows = run_fake(tmp_path, [("a", "no-start"), ("a", "ok"), ("b", "ok")])
    assert outcome.workers == 1
    assert [row["status"] for row in rows] == ["crashed", "crashed", "crashed"]
    assert rows[1]["error"] == "not run: the worker could not start: no GPU here"


def test_runner_past_the_budget_skips_everything(tmp_path):
    outcome, rows = run_fake(tmp_path, [("a", "ok"), ("b", "ok")], budget=0.0)
    assert outcome.workers == 0
    assert [row["error"] for row in rows] == ["not run: the run's time budget was spent"] * 2


# ---------------------------------------------------------------- the GPU-test summary, the table, targets

def test_gpu_test_summary_counts_a_small_suite(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_three.py").write_text(textwrap.dedent("""\
        import pytest
        def test_passes():
            assert True
        def test_fails():
            assert 1 == 2, "boom"
        @pytest.mark.skip(reason="not here")
        def test_skipped():
            pass
    """))
    result = gpu_tests.run_gpu_tests(120, path=str(suite))
    assert (result["passed"], result["failures"], result["skipped"], result["returncode"]) == (1, 1, 1, 1)
    assert len(result["failing"]) == 1 and "test_fails: AssertionError: boom" in result["failing"][0]
    assert result["summary"].startswith("1 failed, 1 passed, 1 skipped")
    # The test's id is relative to pytest's rootdir, which depends on where the checkout lives.
    first_line = result["first_failure"].splitlines()[0]
    assert first_line.endswith("test_three::test_fails") and "assert 1 == 2" in result["first_failure"]
    assert gpu_tests.describe(result).startswith("GPU tests: 1 passed, 1 failed, 0 errors, 1 skipped in ")


def test_gpu_test_summary_of_a_suite_that_hangs(tmp_path):
    (tmp_path / "test_slow.py").write_text("import time\ndef test_sleeps():\n    time.sleep(60)\n")
    result = gpu_tests.run_gpu_tests(3, path=str(tmp_path))
    assert result["returncode"] is None and result["error"] == "stopped after 3 s"
    assert gpu_tests.describe(result).startswith("GPU tests: stopped after 3 s; pytest said:")


def test_table_formats_times_rates_and_errors():
    assert [table.fmt_time(t) for t in (None, 0.0035, 0.25, 12.5, 2500.0)] == ["-", "3.5us", "0.250ms", "12.5ms",
                                                                             "2.50s"]
    row = {"what": "gemm bf16 vs torch.matmul", "shape": "M=N=K=4096", "status": "error", "tkjit_ms": None,
           "ref_ms": 0.19, "ratio": None, "rel_err": None, "ref_tflops": 723.0,
           "error": "ToolchainError: error: ptxas failed " + "x" * 200, "ref_error": None}
    text = table.render([row])
    assert "ERROR" in text.splitlines()[2] and "723 TFLOPS" in text.splitlines()[2]
    assert text.splitlines()[3].startswith("    tkjit: ToolchainError: error: ptxas failed")
    assert len(text.splitlines()[3]) == table.ERROR_WIDTH


def test_a_wrong_kernel_meets_no_target():
    row = {"family": "gemm", "what": "gemm", "status": "WRONG", "ratio": 2.0,
           "params": {"group": "square", "M": 4096, "N": 4096, "K": 4096}}
    targets.attach(row)
    assert row["target"] == "≥ 1.05× cuBLAS" and row["meets_target"] is False
    row.update(status="ok")
    targets.attach(row)
    assert row["meets_target"] is True


def test_pair_timing_alternates_the_sides(monkeypatch):
    """tkjit and its reference are timed in alternating rounds (A B, B A, ...), so that a clock
    drift over the pair's time does not fall on whichever side is timed second."""
    from types import SimpleNamespace

    from tkbench import timing
    order = []

    def fake_times(fn, warmup_ms, rep_ms):
        order.append((fn(), warmup_ms > 0))
        return [1.0 if fn() == "a" else 2.0] * 3

    monkeypatch.setattr(timing, "_cuda_events_times", fake_times)
    ctx = SimpleNamespace(cuda=True, have_triton=False, warmup_ms=25.0, rep_ms=80.0)
    a, b = timing.measure_pair(lambda: "a", lambda: "b", ctx)
    assert order[:2] == [("a", True), ("b", True)]          # each side warmed up once
    rounds = [side for side, warm in order[2:]]
    assert not any(warm for _, warm in order[2:])
    assert rounds[:4] == ["a", "b", "b", "a"] and len(rounds) == 2 * timing.PAIR_ROUNDS
    assert (a.median_ms, b.median_ms) == (1.0, 2.0) and a.runs == b.runs == 3 * timing.PAIR_ROUNDS
    assert "interleaved" in a.method


def test_generality_rows_of_chosen_examples():
    """--kernels: the generality rows of the named examples only (their GPU shapes, or the dry
    run's); a name without rows is refused."""
    from tkbench import generality
    from tkbench.context import Mode
    full = generality.cases(Mode(kernels=("attention_bwd", "attention_f16")))
    assert {c["kernel"] for c in full} == {"attention_bwd", "attention_f16"} and all(c["N"] == 4096 for c in full)
    assert [c["kernel"] for c in generality.cases(Mode(dry_run=True, kernels=("attention_exp",)))] == ["attention_exp"]
    assert Mode.from_json(Mode(kernels=("attention_exp",)).to_json()).kernels == ("attention_exp",)
    with pytest.raises(ValueError, match="no example attention_nope"):
        generality.cases(Mode(kernels=("attention_nope",)))
