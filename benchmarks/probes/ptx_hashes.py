"""Hash the PTX (comment lines stripped) of every example and tests/general_corpus.py and
tests/unseen_corpus.py kernel, to check that a change keeps other kernels' PTX byte-identical
(CPU only).

    python benchmarks/probes/ptx_hashes.py OUT.json [--pipeline PIPELINE]
    python benchmarks/probes/ptx_hashes.py --compare A.json B.json

Each example is compiled under lowering auto and general, and general also under the binaries
the launch may pick (tkjit/trip_dispatch.py: mbarrier{release=early}, grid{overlap=-1}); the
attention examples with D/CAUSAL constants at D = 64/96/128/256, causal and not (the others with
D at 64 and 128). ``--pipeline`` compiles under that pipeline instead of the default one (the
launch variants derived from it). A kernel that does not compile records its error. Run it in the
two trees (e.g. a ``git worktree`` of the merge base) and ``--compare`` the files: the keys whose
hashes differ are listed."""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def digest(ptx: str) -> str:
    text = "\n".join(line for line in ptx.splitlines() if not line.strip().startswith("//"))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def jobs():
    sys.path.insert(0, str(ROOT / "tests"))
    import general_corpus
    for f in sorted((ROOT / "examples").glob("*.tk")):
        src, name = f.read_text(), f.stem
        m = re.search(r"kernel \w+<([^>]*)>", src)
        params = m.group(1) if m else ""
        consts = [{}]
        if name.startswith("attention") and "CAUSAL" in params:
            consts = [{"D": d, "CAUSAL": c} for d in (64, 96, 128, 256) for c in (False, True)]
        elif name.startswith("attention") and "D =" in params:
            consts = [{"D": d} for d in (64, 128)]
        for c in consts:
            for lowering, variant in (("auto", None), ("general", None), ("general", "early"), ("general", "grid")):
                yield name, src, c, lowering, variant
    for case in general_corpus.CASES:
        yield "corpus:" + case.name, case.source, case.constants, "general", None
    import unseen_corpus
    for case in unseen_corpus.CASES:
        yield "unseen:" + case.name, case.source, case.constants, "general", None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--pipeline")
    ap.add_argument("--compare", nargs=2)
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        differ = [k for k in a if a[k] != b.get(k)]
        print(f"{len(a)} keys, {len(differ)} differ" + "".join(f"\n  {k}" for k in differ))
        return
    warnings.filterwarnings("ignore")
    import tkjit
    from tkjit.trip_dispatch import early_release, one_cta_per_tile
    out = {}
    for name, src, c, lowering, variant in jobs():
        key = f"{name} {json.dumps(c, sort_keys=True)} {lowering} {variant or ''}"
        kw = {"pipeline": args.pipeline} if args.pipeline else {}
        if variant == "early":
            kw["pipeline"] = early_release(args.pipeline)
            if kw["pipeline"] is None:
                continue
        elif variant == "grid":
            kw["pipeline"] = one_cta_per_tile(args.pipeline)
        try:
            k = tkjit.compile(src, filename=name.split(":")[-1] + ".tk", constants=c, lowering=lowering,
                              cache=False, **kw)
            out[key] = digest(k.asm["ptx"])
        except Exception as e:  # noqa: BLE001 - recorded: the same error in both trees is no change
            out[key] = f"ERR {type(e).__name__}: {str(e)[:80]}"
        print(key, out[key], flush=True)
    Path(args.out).write_text(json.dumps(out, indent=0) + "\n")


if __name__ == "__main__":
    main()
