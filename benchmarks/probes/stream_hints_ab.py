"""stream-cols' cache hints on the general lowering (store_hint, load_hint, l2_prefetch: off by
default, never measured there): benchmarks/no_product_ab.py with one variant per hint and two
combinations, in the same rounds as the default. Usage: stream_hints_ab.py OUT.json [--only ROWS]"""
import subprocess
import sys
from pathlib import Path

from tkjit.passes import default_pipeline

VARIANTS = {"cs": "store_hint=cs", "sef": "store_hint=evict_first", "lef": "load_hint=evict_first",
            "pf256": "l2_prefetch=256", "cs_lef": "store_hint=cs,load_hint=evict_first",
            "cs_pf": "store_hint=cs,l2_prefetch=256"}

if __name__ == "__main__":
    base = default_pipeline("sm_90a")
    args = [sys.executable, str(Path(__file__).resolve().parents[1] / "no_product_ab.py"), "--out", sys.argv[1]]
    args += sys.argv[2:]
    for label, opts in VARIANTS.items():
        args += ["--variant", f"{label}={base.replace('stream-cols', 'stream-cols{' + opts + '}', 1)}"]
    sys.exit(subprocess.call(args))
