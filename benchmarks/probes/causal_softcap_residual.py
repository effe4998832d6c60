"""An unseen kernel through the default lowering on the GPU (probe): causal_softcap_residual.tk
(causal attention with tanh softcapping, no L, a residual tile added in the epilogue). Prints
the backend, the binary the launch picked per N (short / persistent / one CTA per tile), the
error against float64 torch (outputs NaN-poisoned), and the time against SDPA cuDNN's plain causal
attention of the same shape (less work: no softcap, no residual; a speed-of-light reference).

    python3 benchmarks/probes/causal_softcap_residual.py [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from attention_general import interleaved_ms  # noqa: E402


def exact(q, k, v, res, scale, cap):
    s = cap * torch.tanh(scale * (q.double() @ k.double().transpose(-1, -2)) / cap)
    n = q.shape[2]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v.double() + res.double()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    kern = tkjit.compile((HERE / "causal_softcap_residual.tk").read_text(), filename="causal_softcap_residual.tk")
    rows = []
    for n, b in ((1024, 16), (2048, 8), (3000, 4), (4096, 4)):
        h, d, scale, cap = 16, 128, 128 ** -0.5, 30.0
        sets = [tuple(torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(4))
                + (torch.empty(b, h, n, d, dtype=torch.bfloat16, device="cuda"),) for _ in range(2)]
        q, k, v, res, o = sets[0]
        o.fill_(float("nan"))
        kern(q, k, v, res, o, scale, cap)
        torch.cuda.synchronize()
        ref = exact(q[:1, :2], k[:1, :2], v[:1, :2], res[:1, :2], scale, cap)
        err = ((o[:1, :2].double() - ref).norm() / ref.norm()).item()
        picked = [x.decision for x in kern.decisions.for_pass("grid") if f"N={n} " in x.subject + " "]
        from torch.nn.attention import SDPBackend, sdpa_kernel
        fns = {"tkjit": lambda q, k, v, r, o: kern(q, k, v, r, o, scale, cap),
               "cudnn": lambda q, k, v, r, o: torch.nn.functional.scaled_dot_product_attention(
                   q, k, v, is_causal=True, scale=scale)}
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            med = interleaved_ms(fns, sets)
        row = {"N": n, "B": b, "H": h, "err": err, "nan": int(o.isnan().sum().item()),
               "binary": picked[-1] if picked else "", "tkjit_ms": round(med["tkjit"], 5),
               "cudnn_ms": round(med["cudnn"], 5), "cudnn_plain_vs_tkjit": round(med["cudnn"] / med["tkjit"], 4)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "backend": f"{kern.metadata.get('backend')}/{kern.metadata.get('lowering')}"}
    print(info)
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
