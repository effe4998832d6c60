"""Re-time chosen GEMM shapes, general lowering against the template, with more batches (GPU).

    python3 benchmarks/gemm_recheck.py M,N,K [M,N,K ...] [--batches 61] [--json OUT]

benchmarks/general_lowering.py's rows (interleaved batches of 20 launches, CUDA events, inputs
rotated past L2, outputs checked), for a row whose 15-batch median was noisy.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import general_lowering as gl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--batches", type=int, default=61)
    ap.add_argument("--json")
    opts = ap.parse_args()
    gl.timed_together = functools.partial(gl.timed_together, batches=opts.batches)
    out: list = []
    gl.gemm_rows([tuple(int(x) for x in s.split(",")) for s in opts.shapes], out)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"batches": opts.batches, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
