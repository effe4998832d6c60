"""The measuring process. The parent (``runner.py``) starts it with a JSON file of cases; it
appends one JSON line per finished case to the results file, first a line with the environment
it sees. It exits with ``CONTEXT_LOST`` when a case left the CUDA context unusable (an illegal
address, say), so that the parent goes on with the remaining cases in a fresh process."""
from __future__ import annotations

import json
import sys
import traceback

from . import envinfo
from .checks import Kernels
from .context import Context, Mode
from .families import FAMILIES
from .rows import ERROR, Row
from .runner import CONTEXT_LOST
from .table import progress_line


def main(cases_path: str, results_path: str) -> int:
    with open(cases_path) as f:
        plan = json.load(f)
    mode = Mode.from_json(plan["mode"])
    ctx = Context.create(mode)
    with open(results_path, "a") as out:
        _emit(out, {"environment": envinfo.torch_environment(ctx)})
        kernels = Kernels(ctx)
        total = plan.get("total", len(plan["cases"]))
        for case in plan["cases"]:
            rows = run_case(case, ctx, kernels)
            for row in rows:
                print(f"[{case['id'] + 1}/{total}] {progress_line(row)}", file=sys.stderr, flush=True)
            healthy = _cuda_healthy(ctx)
            _emit(out, {"case": case["id"], "rows": rows, "context_lost": not healthy})
            if not healthy:
                print("the CUDA context is lost: the rest runs in a fresh worker", file=sys.stderr, flush=True)
                return CONTEXT_LOST
    return 0


def run_case(case: dict, ctx, kernels) -> list[dict]:
    """The case's rows as JSON; a bug of this script in a family is a row too, with its traceback."""
    family = FAMILIES[case["family"]]
    try:
        return [row.to_json() for row in family.run(case["params"], ctx, kernels)]
    except Exception as exc:  # noqa: BLE001 - the run goes on
        row = Row(case["family"], case["family"], label_params(case["params"]), params=case["params"],
                  status=ERROR)
        row.fail(exc)
        row.status = ERROR
        row.error = f"benchmark script: {row.error}"
        row.extra["traceback"] = traceback.format_exc()
        return [row.to_json()]
    finally:
        _release(ctx)


def label_params(params: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in params.items())


def _emit(out, record: dict) -> None:
    out.write(json.dumps(record, default=repr) + "\n")
    out.flush()


def _release(ctx) -> None:
    if ctx.cuda:
        import gc

        import torch
        gc.collect()
        try:
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - a lost context is found by the health check
            pass


def _cuda_healthy(ctx) -> bool:
    if not ctx.cuda:
        return True
    import torch
    try:
        torch.cuda.synchronize()
        return torch.ones(4, device="cuda").add_(1).sum().item() == 8.0
    except Exception:  # noqa: BLE001
        return False
