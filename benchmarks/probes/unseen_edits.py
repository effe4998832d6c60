"""One-token edits of the examples (a constant changed): the backend each takes, spills, ptxas
warnings and the schedule headline (consumers, stages, epilogue) beside the example's own.

    PYTHONPATH=$PWD:$PWD/tests python benchmarks/probes/unseen_edits.py
"""
from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import tkjit

EDITS = [
    ("attention_nol", {}), ("attention_nol", {"D": 80}), ("attention_nol", {"D": 112}),
    ("attention_nol", {"D": 80, "CAUSAL": True}), ("attention_nol", {"BKV": 64}),
    ("attention_nol", {"D": 64, "BKV": 64}), ("attention_nol", {"D": 256, "BKV": 64}),
    ("attention", {"D": 96}), ("attention", {"D": 64, "CAUSAL": True}),
    ("attention_exp", {"D": 96}), ("attention_mask", {"D": 64, "BKV": 64}),
    ("attention_window", {"D": 64}), ("attention_softcap", {"D": 64}), ("attention_alibi", {"D": 64}),
    ("attention_f16", {"D": 64}),
    ("attention_bwd_dkdv", {"D": 64}), ("attention_bwd_dkdv", {"CAUSAL": True}),
    ("attention_bwd_dq", {"D": 64}), ("attention_bwd_dq", {"CAUSAL": True}),
    ("gemm_bias_gelu", {"BM": 64}), ("gemm_bias_gelu", {"BN": 128}), ("gemm_bias_gelu", {"BK": 32}),
    ("gemm_bias_gelu", {"BN": 192}), ("gemm_bias_silu", {"BK": 128}),
    ("gemm", {"BN": 128}), ("gemm", {"BM": 64, "BN": 128}), ("gemm", {"BK": 128}),
    ("bmm", {"BN": 128}), ("gemm_atb", {"BM": 64}), ("gemm_alpha_beta", {"BN": 128}),
    ("gemm_fp8", {"BN": 128}), ("gemm_fp8", {"BK": 64}),
    ("attention_bwd_dkdv", {"D": 80}), ("attention_bwd_dq", {"D": 80}), ("attention", {"D": 80, "CAUSAL": True}),
    ("attention_bwd_dkdv", {"BKV": 64}), ("attention_bwd_dq", {"BQ": 64}),
    ("gemm", {"BM": 256}), ("gemm", {"BN": 64}), ("gemm", {"BM": 192}), ("gemm_fp8", {"BK": 256}),
    ("gemm_alpha_beta", {"BM": 64}), ("gemm_atb", {"BN": 128}), ("bmm", {"BM": 64}),
    ("mlp", {"D": 64}), ("mlp", {"BF": 128}), ("linear_attention", {"D": 128}), ("linear_attention", {"C": 128}),
]


def headline(k) -> str:
    t = str(k.explain())
    ws = re.search(r"^warp-spec\n  \S+ (.*?)$", t, re.M)
    pp = re.search(r"^pipeline\n  .*?: (\d+ stage\(s\))", t, re.M)
    ep = re.findall(r"^  store at [^:]*:\d+:\d+: (.*)$", t, re.M)
    return f"{ws.group(1) if ws else '-'}; {pp.group(1) if pp else '-'}; epi {ep}"


def main(only):
    root = Path(__file__).resolve().parents[2] / "examples"
    for name, consts in EDITS:
        if only and name not in only:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                k = tkjit.load(root / f"{name}.tk", constants=consts or None, cache=False)
                sass = k.asm["sass"]
                md = k.metadata
                spills = len(re.findall(r"\b(LDL|STL)\b", sass))
                warn = [m for m in md["ptxas"]["messages"] if m["level"] == "warning"]
                row = f"{md.get('backend')} ({md.get('lowering')}) spills {spills} ptxas-warn {len(warn)} | {headline(k)}"
            except Exception as e:  # noqa: BLE001 - the table records what the compile does
                row = f"ERROR {type(e).__name__}: {str(e)[:400]}"
        w = [str(x.message)[:200] for x in caught]
        print(f"| {name} {consts} | {row} | {w if w else ''}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
