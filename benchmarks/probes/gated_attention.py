"""The unseen gated causal attention (gated_attention.tk) on the GPU: checked against float64
torch (outputs NaN-poisoned), then timed under lowering auto and general against SDPA cuDNN plus
the gate, in interleaved batches (benchmarks/attention_general.interleaved_ms).

    python3 benchmarks/probes/gated_attention.py [--json OUT.json]
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

import tkjit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from attention_general import interleaved_ms  # noqa: E402


def reference(q, k, v, g, scale):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    n = s.shape[-1]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v.double() * g.double()[..., None]


def main() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for b, h, n in ((2, 3, 1000), (4, 16, 4096), (1, 16, 16384)):
        d, scale = 64, 1 / math.sqrt(64)
        ks = {low: tkjit.load(HERE / "gated_attention.tk", lowering=low) for low in ("auto", "general")}
        q, k, v = (torch.randn(b, h, n, d, device="cuda").bfloat16() for _ in range(3))
        g = torch.rand(b, h, n, device="cuda")
        ref = reference(q[:1, :2], k[:1, :2], v[:1, :2], g[:1, :2], scale)
        row = {"B": b, "H": h, "N": n, "D": d}
        for low, kern in ks.items():
            o = torch.full_like(q, float("nan"))
            kern(q, k, v, g, o, scale)
            torch.cuda.synchronize()
            row[f"{low}_err"] = ((o[:1, :2].double() - ref).norm() / ref.norm()).item()
            row[f"{low}_nan"] = int(o.isnan().sum().item())
            row[f"{low}_backend"] = f"{kern.metadata.get('backend')}/{kern.metadata.get('lowering')}"
        sets = [(q, k, v, g, torch.empty_like(q))]
        fns = {low: (lambda kk: lambda q_, k_, v_, g_, o_: kk(q_, k_, v_, g_, o_, scale))(kern)
               for low, kern in ks.items()}
        fns["cudnn"] = lambda q_, k_, v_, g_, o_: torch.nn.functional.scaled_dot_product_attention(
            q_, k_, v_, is_causal=True, scale=scale) * g_[..., None].bfloat16()
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            med = interleaved_ms(fns, sets)
        row.update({f"{name}_ms": round(t, 5) for name, t in med.items()})
        row["auto_vs_cudnn"] = round(med["cudnn"] / med["auto"], 3)
        row["general_vs_auto"] = round(med["auto"] / med["general"], 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if len(sys.argv) > 2 and sys.argv[1] == "--json":
        Path(sys.argv[2]).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
