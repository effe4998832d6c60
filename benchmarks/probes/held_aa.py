"""A/A and A/B of the held register-A product: the probe kernel loaded, compiled again, loaded
again and compiled with mbarrier{hold=off}, timed in the same interleaved rounds (15 and 31), so
the spread of identical binaries is measured beside the difference hold makes. Only tkjit kernels
share the rounds (benchmarks/probes/unseen_kernels.py, which interleaves torch.compile and
cuBLAS, read identical binaries 7-10% apart in two runs). Usage: held_aa.py NAMES OUT.json"""
import importlib.util
import json
import sys

import tkjit
from tkjit.passes import default_pipeline

spec = importlib.util.spec_from_file_location("uk", "benchmarks/probes/unseen_kernels.py")
uk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uk)

NOHOLD = default_pipeline("sm_90a").replace("mbarrier", "mbarrier{hold=off}", 1)
out = {}
for name in sys.argv[1].split(","):
    file, build, shape, ragged = uk.PROBES[name]
    src = (uk.HERE / "unseen" / file).read_text()
    ks = {"load": tkjit.load(uk.HERE / "unseen" / file),
          "compile": tkjit.compile(src, filename=file, cache=False),
          "load2": tkjit.load(uk.HERE / "unseen" / file),
          "nohold": tkjit.compile(src, filename=file, cache=False, pipeline=NOHOLD)}
    sets = []
    for _ in range(2):
        args, ins, expr, where, flops = build(shape)
        sets.append((args, ins))
    fns = {n: (lambda k: lambda args, ins: k(*args))(k) for n, k in ks.items()}
    for rounds in (15, 31):
        med = uk.interleaved_ms(fns, [tuple(s) for s in sets], rounds=rounds)
        out[f"{name}-{rounds}"] = {n: round(v, 5) for n, v in med.items()}
        print(name, rounds, out[f"{name}-{rounds}"], flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
