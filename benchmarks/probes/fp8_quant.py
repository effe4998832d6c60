"""A row-wise fp8 (e4m3) quantizer as a user writes it (tests/test_fp8_stores.py's QUANT at D =
4096): tkjit against torch.compile of the same expression, same interleaved rounds, outputs
checked (scales to rounding, codes within one step), and its share of a copy of the same bytes.
Usage: fp8_quant.py OUT.json"""
import json
import sys
from pathlib import Path

import torch

import tkjit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from attention_general import interleaved_ms  # noqa: E402
from test_fp8_stores import QUANT  # noqa: E402

R, D = 16384, 4096
k = tkjit.compile(QUANT.replace("D = 512", f"D = {D}"))


def torch_quant(x):
    s = x.float().abs().amax(1) / 448.0
    return (x.float() / s[:, None]).to(torch.float8_e4m3fn), s


compiled = torch.compile(torch_quant)
x = torch.randn(R, D, device="cuda").bfloat16() * 3
q, s = torch.empty(R, D, device="cuda", dtype=torch.float8_e4m3fn), torch.empty(R, device="cuda")
k(x, q, s)
rq, rs = compiled(x)
torch.cuda.synchronize()
ok = bool(torch.allclose(s, rs, rtol=1e-6)) and int((q.view(torch.uint8).int() - rq.view(torch.uint8).int()).abs().max()) <= 1
src, dst = torch.empty(R * D * 3 // 2, device="cuda", dtype=torch.uint8), torch.empty(R * D * 3 // 2, device="cuda", dtype=torch.uint8)
med = interleaved_ms({"tkjit": lambda: k(x, q, s), "compile": lambda: compiled(x), "copy": lambda: dst.copy_(src)},
                     [()], rounds=21)
row = {"shape": [R, D], "checked": ok, **{f"{n}_ms": round(v, 5) for n, v in med.items()},
       "compile_vs_tkjit": round(med["compile"] / med["tkjit"], 4), "copy_share": round(med["copy"] / med["tkjit"], 4),
       "gpu": torch.cuda.get_device_name()}
print(row)
Path(sys.argv[1]).write_text(json.dumps(row, indent=1) + "\n")
