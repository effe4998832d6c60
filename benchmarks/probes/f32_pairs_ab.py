"""f32 row vectors loaded a column pair at a time (tried in session 19 in codegen/vector_pairs.py,
then reverted: dequantizing GEMM 1.06-1.08x, attention_bwd_dkdv 1.06x, its causal form 0.94x,
…-s19-f32-pairs-{1,2}.json) against the element loads, same run: each kernel compiled twice, once with the pair path
refused for f32 (the code before), timed in interleaved rounds (benchmarks/attention_general's
harness) on the same inputs, outputs checked equal. Kernels: the attention backward's dK/dV
(L and Di are f32 vectors read every trip; causal and not), the dequantizing GEMM (a per-K-channel
f32 scale every trip). Usage: f32_pairs_ab.py OUT.json [ROUNDS] [ONLY,NAMES]"""
import importlib.util
import json
import sys
from pathlib import Path

import torch

import tkjit
from tkjit.codegen import vector_pairs
from tkjit.ir.types import F32

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from attention_general import interleaved_ms  # noqa: E402

spec = importlib.util.spec_from_file_location("uk", ROOT / "benchmarks/probes/unseen_kernels.py")
uk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uk)


def both(compile_):
    """(the kernel as compiled now, the kernel with f32 pairs refused: its source given a trailing
    comment, so no compile of the first is reused for it; each one's PTX built while the patch is
    as it should be)."""
    now = compile_("")
    now.asm["ptx"]  # noqa: B018 - built before the patch (the PTX stage is lazy)
    original = vector_pairs.vector_loads_paired

    def no_f32(ctx, param, t, split, positions):
        return param.type.dtype != F32 and original(ctx, param, t, split, positions)
    vector_pairs.vector_loads_paired = no_f32
    try:
        before = compile_("\n# the element loads\n")
        before.asm["ptx"]  # noqa: B018 - built now, under the patch (the PTX stage is lazy)
    finally:
        vector_pairs.vector_loads_paired = original
    assert now.asm["ptx"] != before.asm["ptx"], "the pair path changed nothing"
    return now, before


def bwd_case(causal: bool):
    d, (b, h, hkv, n) = 128, (4, 16, 4, 4096)
    bf = dict(dtype=torch.bfloat16, device="cuda")
    q, k, v, do = (torch.randn(b, hh, n, d, **bf) for hh in (h, hkv, hkv, h))
    lse = torch.randn(b, h, n, device="cuda") + 8.0
    di = torch.randn(b, h, n, device="cuda") * 0.1
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    args = (q, k, v, do, lse, di, dk, dv, d ** -0.5)
    src = (ROOT / "examples/attention_bwd_dkdv.tk").read_text()
    kernels = both(lambda tail: tkjit.compile(src + tail, filename="attention_bwd_dkdv.tk", cache=False,
                                              constants={"D": d, "CAUSAL": causal}))
    return kernels, args, (6, 7)


def dequant_case():
    file, build, shape, _ = uk.PROBES["gemm_dequant_a"]
    args, *_ = build(shape)
    src = (uk.HERE / "unseen" / file).read_text()
    return both(lambda tail: tkjit.compile(src + tail, filename=file, cache=False)), tuple(args), (3,)


ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 21
ONLY = sys.argv[3].split(",") if len(sys.argv) > 3 else None
out = {}
for name, make in {"attention_bwd_dkdv": lambda: bwd_case(False), "attention_bwd_dkdv causal": lambda: bwd_case(True),
                   "gemm_dequant_a": dequant_case}.items():
    if ONLY and name not in ONLY:
        continue
    (now, before), args, outs = make()
    now(*args)
    got = [args[i].clone() for i in outs]
    before(*args)
    same = all(torch.equal(g, args[i]) for g, i in zip(got, outs))
    med = interleaved_ms({"pairs": lambda *a: now(*args), "elements": lambda *a: before(*args)}, [()], rounds=ROUNDS)
    again = interleaved_ms({"elements": lambda *a: before(*args), "pairs": lambda *a: now(*args)}, [()], rounds=ROUNDS)
    med = {k: (med[k] + again[k]) / 2 for k in med}  # (both orders of the first round)
    out[name] = {"same_outputs": same, **{k: round(v, 5) for k, v in med.items()},
                 "pairs_speedup": round(med["elements"] / med["pairs"], 4)}
    print(name, out[name], flush=True)
json.dump({"gpu": torch.cuda.get_device_name(), "rows": out}, open(sys.argv[1], "w"), indent=1)
