"""Does a launch at a ragged shape change what later launches at tile multiples run? The probe
kernel loaded twice: one object launched at its ragged shape first, the other never; then both
timed at the tile-multiple shape in the same interleaved rounds, with which variant each one's
fast path runs. Usage: ragged_then_aligned.py NAMES OUT.json"""
import importlib.util
import json
import sys

import tkjit

spec = importlib.util.spec_from_file_location("uk", "benchmarks/probes/unseen_kernels.py")
uk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uk)
out = {}
for name in sys.argv[1].split(","):
    file, build, shape, ragged = uk.PROBES[name]
    seen = tkjit.load(uk.HERE / "unseen" / file)
    fresh = tkjit.load(uk.HERE / "unseen" / file)
    err = uk.check(seen, build, ragged)
    state = {"class": type(seen).__name__, "general": seen._general is not None,
             "strided": seen._strided is not None, "options": str(getattr(seen._general, "options", ""))[:300]}
    sets = []
    for _ in range(2):
        args, ins, expr, where, flops = build(shape)
        sets.append((args, ins))
    fns = {"after_ragged": lambda args, ins: seen(*args), "fresh": lambda args, ins: fresh(*args)}
    med = uk.interleaved_ms(fns, [tuple(s) for s in sets], rounds=21)
    out[name] = {"err_ragged": err, "state": state, **{k: round(v, 5) for k, v in med.items()},
                 "fresh_over_after_ragged": round(med["after_ragged"] / med["fresh"], 4)}
    print(name, out[name], flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
