"""The kernels the PTX backend is tested on (tests/codegen_kernels/*.tkir), with input makers and
float64 torch references. Shared by the CPU tests (PTX simulator) and the GPU tests.

Each case makes its inputs with a torch.Generator on the CPU; ``shapes`` are the GPU test shapes
and ``sim_shapes`` small ones for the simulator (both include non-multiples of the tiles).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

KERNEL_DIR = Path(__file__).parent / "codegen_kernels"
EXAMPLE_DIR = Path(__file__).parent.parent / "examples"


@dataclass
class Case:
    name: str
    params: list[str]
    """Kernel parameter names in order (tensors and scalars)."""
    outputs: list[str]
    make: Callable[[dict, torch.Generator], dict]
    """dims -> {param name: CPU tensor or Python scalar}."""
    reference: Callable[[dict], dict]
    """inputs -> {output name: float64 tensor}."""
    shapes: list[dict]
    sim_shapes: list[dict]
    rtol: float = 1e-2
    atol: float = 1e-2
    sass: dict = field(default_factory=dict)
    """Expected SASS properties: {"HMMA": True, "LDG.E.128": True, ...}."""
    example: str | None = None
    """The examples/<example>.tk kernel (lowered by the front end) instead of hand-written IR."""
    constants: dict = field(default_factory=dict)

    @property
    def ir_path(self) -> Path:
        return KERNEL_DIR / f"{self.name}.tkir"

    def kernel(self):
        """The case's verified tile IR kernel."""
        if self.example is None:
            from tkjit.ir.parser import parse_kernel
            return parse_kernel(self.ir_path.read_text(), str(self.ir_path))
        from tkjit.frontend import lower_source
        path = EXAMPLE_DIR / f"{self.example}.tk"
        return lower_source(path.read_text(), str(path), dict(self.constants))


def _randn(gen, *shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def _softmax_make(d, gen):
    return {"X": _randn(gen, d["N"], d["D"], scale=3.0), "Y": torch.empty(d["N"], d["D"], dtype=torch.bfloat16)}


def _softmax_ref(i):
    return {"Y": torch.softmax(i["X"].double(), dim=-1)}


def _softmax_f32_make(d, gen):
    return {"X": _randn(gen, d["N"], d["D"], dtype=torch.float32, scale=3.0),
            "Y": torch.empty(d["N"], d["D"], dtype=torch.float32)}


def _layernorm_make(d, gen):
    n, dd = d["N"], d["D"]
    return {"X": _randn(gen, n, dd, scale=2.0) + 0.5, "W": _randn(gen, dd), "B": _randn(gen, dd),
            "Y": torch.empty(n, dd, dtype=torch.bfloat16), "eps": 1e-5}


def _layernorm_ref(i):
    x = i["X"].double()
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), i["W"].double(), i["B"].double(), i["eps"])
    return {"Y": y}


def _rotary_make(d, gen):
    b, h, n = d["B"], d["H"], d["N"]
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-torch.arange(64, dtype=torch.float64) / 64)
    ang = pos * inv
    return {"X": _randn(gen, b, h, n, 128), "COS": torch.cos(ang).float(), "SIN": torch.sin(ang).float(),
            "Y": torch.empty(b, h, n, 128, dtype=torch.bfloat16)}


def _rotary_ref(i):
    x = i["X"].double()
    x1, x2 = x[..., :64], x[..., 64:]
    c, s = i["COS"].double(), i["SIN"].double()
    return {"Y": torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)}


def _gemm_make(d, gen):
    m, n, k = d["M"], d["N"], d["K"]
    return {"A": _randn(gen, m, k), "B": _randn(gen, k, n), "C": torch.empty(m, n, dtype=torch.bfloat16)}


def _gemm_ref(i):
    return {"C": i["A"].double() @ i["B"].double()}


def _gemm_abt_make(d, gen):
    m, n, k = d["M"], d["N"], d["K"]
    return {"A": _randn(gen, m, k, dtype=torch.float16), "B": _randn(gen, n, k, dtype=torch.float16),
            "C": torch.empty(m, n, dtype=torch.float32)}


def _gemm_abt_ref(i):
    return {"C": i["A"].double() @ i["B"].double().T}


def _gemm_atb_make(d, gen):
    m, n, k = d["M"], d["N"], d["K"]
    return {"A": _randn(gen, k, m), "B": _randn(gen, k, n), "BIAS": _randn(gen, n, dtype=torch.float32),
            "C": torch.empty(m, n, dtype=torch.bfloat16)}


def _gemm_atb_ref(i):
    return {"C": i["A"].double().T @ i["B"].double() + i["BIAS"].double()}


def _attention_make(d, gen):
    b, h, n = d["B"], d["H"], d["N"]
    return {"Q": _randn(gen, b, h, n, 64), "K": _randn(gen, b, h, n, 64), "V": _randn(gen, b, h, n, 64),
            "O": torch.empty(b, h, n, 64, dtype=torch.bfloat16), "scale": 1.0 / math.sqrt(64)}


def _attention_ref(i, causal=False):
    q, k, v = (i[x].double() for x in "QKV")
    s = (q @ k.transpose(-1, -2)) * i["scale"]
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool, device=s.device), 1), float("-inf"))
    return {"O": torch.softmax(s, dim=-1) @ v}


def _maps_make(d, gen):
    n = d["N"]
    return {"X": _randn(gen, n, 64, dtype=torch.float32), "Y": torch.empty(n, 64), "S": torch.empty(d["R"], 64),
            "mode": d.get("mode", 1)}


def _maps_ref(i):
    x = i["X"].double()
    ax = x.abs()
    lg, l2 = torch.log(torch.exp(x)), torch.log2(torch.exp2(x))
    x3 = x * 64
    t = torch.maximum(torch.sin(x3), torch.cos(x3)) + torch.minimum(lg, l2) - torch.sqrt(ax)
    t = t + torch.rsqrt(ax + 1) * torch.tanh(x) + torch.relu(x) / (ax + 1) + x
    y = t * 0.5 if i["mode"] == 1 else t
    n = x.shape[0]
    nb = -(-n // 64)
    sums = torch.zeros(nb, 64, dtype=torch.float64, device=x.device)
    for b in range(nb):
        sums[b] = x[64 * b:64 * b + 64].sum(0)
    return {"Y": y, "S": sums}


def _ex_softmax_make(d, gen):
    return {"X": _randn(gen, d["R"], d["C"], scale=3.0) - 4, "Y": torch.empty(d["R"], d["C"], dtype=torch.bfloat16)}


def _ex_layernorm_make(d, gen):
    r, dd = d["R"], d["D"]
    return {"X": _randn(gen, r, dd, scale=2.0) + 0.5, "W": _randn(gen, dd), "Bias": _randn(gen, dd),
            "Y": torch.empty(r, dd, dtype=torch.bfloat16), "eps": 1e-5}


def _ex_layernorm_ref(i):
    x = i["X"].double()
    return {"Y": torch.nn.functional.layer_norm(x, (x.shape[-1],), i["W"].double(), i["Bias"].double(), i["eps"])}


def _ex_rotary_make(d, gen):
    b, h, n, dd = d["B"], d["H"], d["N"], d["D"]
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    ang = pos * 10000.0 ** (-torch.arange(dd // 2, dtype=torch.float64) / (dd // 2))
    return {"X": _randn(gen, b, h, n, dd), "COS": torch.cos(ang).bfloat16(), "SIN": torch.sin(ang).bfloat16(),
            "Y": torch.empty(b, h, n, dd, dtype=torch.bfloat16)}


def _ex_rotary_ref(i):
    x = i["X"].double()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = i["COS"].double(), i["SIN"].double()
    return {"Y": torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)}


def _ex_attention_make(d, gen):
    b, h, hkv, n, dd = d["B"], d["H"], d["HKV"], d["N"], d["D"]
    return {"Q": _randn(gen, b, h, n, dd), "K": _randn(gen, b, hkv, n, dd), "V": _randn(gen, b, hkv, n, dd),
            "O": torch.empty(b, h, n, dd, dtype=torch.bfloat16), "L": torch.empty(b, h, n),
            "scale": 1.0 / math.sqrt(dd)}


def _ex_attention_ref(i, causal):
    q, k, v = (i[x].double() for x in "QKV")
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = (q @ k.transpose(-1, -2)) * i["scale"]
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool, device=s.device), 1), float("-inf"))
    return {"O": torch.softmax(s, dim=-1) @ v, "L": torch.logsumexp(s, dim=-1)}


def _copies_make(d, gen):
    m = d["M"]
    return {"A": _randn(gen, m, 32, dtype=torch.float16), "S": _randn(gen, m, dtype=torch.float16),
            "C": torch.empty(m, 32, dtype=torch.float16), "D": torch.empty(m, 32, dtype=torch.float16),
            "E": torch.empty(m)}


def _copies_ref(i):
    a = i["A"].double()
    yh = (a * i["S"].double()[:, None]).half().double()
    eye = torch.zeros(32, 32, dtype=torch.float64, device=a.device)
    eye[:min(32, a.shape[0])] = a[:32]
    return {"D": yh, "C": yh @ eye.T, "E": a.sum(1)}


def _scalars_make(d, gen):
    return {"R": torch.empty(13, 16), "n": d["n"], "m": d["m"], "x": d["x"]}


def _scalars_ref(i):
    n, m = i["n"], i["m"]
    x = float(torch.tensor(i["x"], dtype=torch.float32))             # what an f32 argument holds
    trunc = abs(n) // abs(m) * (1 if (n >= 0) == (m >= 0) else -1)
    root = torch.tensor(x, dtype=torch.float32) ** 2                  # may overflow to inf in f32
    rounded = min(float(torch.round(root.sqrt()).double()), 2.0**31 - 1)   # cvt.rni saturates
    rows = [x, -((-n) // m), n // m, n % m, max(n, m), min(n, m), -n, abs(n), max(n, 0), min(n, m),
            1.0, rounded, trunc]
    return {"R": torch.tensor(rows, dtype=torch.float32).double()[:, None].expand(13, 16)}  # stored as f32


CASES = [
    Case("softmax", ["X", "Y"], ["Y"], _softmax_make, _softmax_ref,
         shapes=[{"N": 4096, "D": 1000}, {"N": 77, "D": 129}, {"N": 1, "D": 4097}, {"N": 513, "D": 256}],
         sim_shapes=[{"N": 37, "D": 200}, {"N": 5, "D": 13}],
         sass={"LDGSTS.E.BYPASS.128": True, "STG.E.128": True}),
    Case("softmax_f32", ["X", "Y"], ["Y"], _softmax_f32_make, _softmax_ref,
         shapes=[{"N": 1000, "D": 256}, {"N": 33, "D": 255}],
         sim_shapes=[{"N": 17, "D": 256}, {"N": 5, "D": 7}], rtol=1e-4, atol=1e-6,
         sass={"LDGSTS.E.BYPASS.128": True, "STG.E.128": True}),
    Case("layernorm", ["X", "W", "B", "Y", "eps"], ["Y"], _layernorm_make, _layernorm_ref,
         shapes=[{"N": 4096, "D": 1024}, {"N": 100, "D": 1000}, {"N": 33, "D": 777}, {"N": 7, "D": 64}],
         sim_shapes=[{"N": 19, "D": 1024}, {"N": 3, "D": 250}],
         sass={"LDGSTS.E.BYPASS.128": True, "STG.E.128": True}),
    Case("rotary", ["X", "COS", "SIN", "Y"], ["Y"], _rotary_make, _rotary_ref,
         shapes=[{"B": 2, "H": 8, "N": 1024}, {"B": 3, "H": 5, "N": 77}],
         sim_shapes=[{"B": 2, "H": 1, "N": 40}],
         sass={"LDGSTS.E.BYPASS.128": True, "STG.E.128": True}),
    Case("gemm", ["A", "B", "C"], ["C"], _gemm_make, _gemm_ref,
         shapes=[{"M": 1024, "N": 1024, "K": 1024}, {"M": 300, "N": 520, "K": 200}, {"M": 129, "N": 257, "K": 72},
                 {"M": 77, "N": 96, "K": 64}],
         sim_shapes=[{"M": 130, "N": 264, "K": 72}],
         sass={"HMMA": True, "LDGSTS.E.BYPASS.128": True, "LDSM": True, "STG.E.128": True}),
    Case("gemm_abt", ["A", "B", "C"], ["C"], _gemm_abt_make, _gemm_abt_ref,
         shapes=[{"M": 512, "N": 384, "K": 256}, {"M": 65, "N": 130, "K": 40}, {"M": 70, "N": 64, "K": 0}],
         sim_shapes=[{"M": 70, "N": 64, "K": 40}, {"M": 20, "N": 64, "K": 0}],
         sass={"HMMA": True, "LDSM": True}),
    Case("gemm_atb", ["A", "B", "BIAS", "C"], ["C"], _gemm_atb_make, _gemm_atb_ref,
         shapes=[{"M": 256, "N": 256, "K": 256}, {"M": 100, "N": 70, "K": 48}],
         sim_shapes=[{"M": 70, "N": 40, "K": 48}],
         sass={"HMMA": True, "LDSM.16.MT88": True}),
    Case("attention", ["Q", "K", "V", "O", "scale"], ["O"], _attention_make, _attention_ref,
         shapes=[{"B": 2, "H": 4, "N": 1024}, {"B": 1, "H": 3, "N": 200}, {"B": 2, "H": 1, "N": 33}],
         sim_shapes=[{"B": 1, "H": 1, "N": 100}],
         sass={"HMMA": True, "SHFL.BFLY": True}),
    Case("attention_causal", ["Q", "K", "V", "O", "scale"], ["O"], _attention_make,
         lambda i: _attention_ref(i, causal=True),
         shapes=[{"B": 2, "H": 4, "N": 1024}, {"B": 1, "H": 2, "N": 130}],
         sim_shapes=[{"B": 1, "H": 1, "N": 100}],
         sass={"HMMA": True}),
    Case("copies", ["A", "S", "C", "D", "E"], ["C", "D", "E"], _copies_make, _copies_ref,
         shapes=[{"M": 1000}, {"M": 20}], sim_shapes=[{"M": 70}, {"M": 20}], rtol=2e-2, atol=2e-2,
         sass={"HMMA.16816.F16": True, "LDSM": True}),
    Case("scalars", ["R", "n", "m", "x"], ["R"], _scalars_make, _scalars_ref,
         shapes=[{"n": -7, "m": 2, "x": -2.5}, {"n": 7, "m": -2, "x": 3.5}, {"n": -8, "m": -3, "x": 0.5}],
         sim_shapes=[{"n": -7, "m": 2, "x": -2.5}, {"n": 7, "m": -2, "x": 3.5}, {"n": 9, "m": 3, "x": 1e30}],
         rtol=0, atol=0),
    Case("maps", ["X", "Y", "S", "mode"], ["Y", "S"], _maps_make, _maps_ref,
         shapes=[{"N": 1000, "R": 16}, {"N": 64, "R": 1, "mode": 0}],
         sim_shapes=[{"N": 70, "R": 2}, {"N": 64, "R": 1, "mode": 0}], rtol=2e-3, atol=2e-3),
]

EXAMPLES = [
    Case("ex_softmax", ["X", "Y"], ["Y"], _ex_softmax_make, _softmax_ref, example="softmax",
         shapes=[{"R": 16384, "C": 1024}, {"R": 77, "C": 1024}, {"R": 1, "C": 1024}],
         sim_shapes=[{"R": 20, "C": 1024}], sass={"LDGSTS.E.BYPASS.128": True, "STG.E.128": True}),
    Case("ex_layernorm", ["X", "W", "Bias", "Y", "eps"], ["Y"], _ex_layernorm_make, _ex_layernorm_ref,
         example="layernorm", shapes=[{"R": 8192, "D": 1024}, {"R": 100, "D": 1024}, {"R": 3, "D": 1024}],
         sim_shapes=[{"R": 18, "D": 1024}], sass={"LDGSTS.E.BYPASS.128": True, "STG.E.128": True}),
    Case("ex_rotary", ["X", "COS", "SIN", "Y"], ["Y"], _ex_rotary_make, _ex_rotary_ref, example="rotary",
         shapes=[{"B": 2, "H": 16, "N": 2048, "D": 128}, {"B": 1, "H": 3, "N": 100, "D": 128}],
         sim_shapes=[{"B": 1, "H": 2, "N": 70, "D": 128}], sass={"LDGSTS.E.BYPASS.128": True, "STG.E.128": True}),
    Case("ex_gemm", ["A", "B", "C"], ["C"], _gemm_make, _gemm_ref, example="gemm",
         shapes=[{"M": 2048, "N": 2048, "K": 2048}, {"M": 1000, "N": 600, "K": 136}, {"M": 33, "N": 300, "K": 64}],
         sim_shapes=[{"M": 130, "N": 264, "K": 72}],
         sass={"HMMA": True, "LDGSTS.E.BYPASS.128": True, "LDSM": True, "STG.E.128": True}),
    # the register-tile (mma.sync) backend at the Hopper path's previous key block: the example's
    # 176 rows (sized for wgmma's registers) spill 76 B there
    Case("ex_attention", ["Q", "K", "V", "O", "L", "scale"], ["O", "L"], _ex_attention_make,
         lambda i: _ex_attention_ref(i, False), example="attention", constants={"BKV": 128},
         shapes=[{"B": 2, "H": 8, "HKV": 2, "N": 1024, "D": 128}, {"B": 1, "H": 2, "HKV": 1, "N": 300, "D": 128}],
         sim_shapes=[{"B": 1, "H": 2, "HKV": 1, "N": 140, "D": 128}], sass={"HMMA": True}),
    Case("ex_attention_causal_d64", ["Q", "K", "V", "O", "L", "scale"], ["O", "L"], _ex_attention_make,
         lambda i: _ex_attention_ref(i, True), example="attention",
         constants={"D": 64, "CAUSAL": True, "BQ": 64, "BKV": 64},
         shapes=[{"B": 2, "H": 4, "HKV": 4, "N": 1024, "D": 64}, {"B": 1, "H": 2, "HKV": 2, "N": 130, "D": 64}],
         sim_shapes=[{"B": 1, "H": 1, "HKV": 1, "N": 100, "D": 64}], sass={"HMMA": True}),
]

ALL_CASES = CASES + EXAMPLES
BY_NAME = {c.name: c for c in ALL_CASES}


def dims_of(shape: dict) -> dict:
    """The tensor dimensions of a shape (upper-case names; lower-case ones are scalar arguments)."""
    return {k: v for k, v in shape.items() if k.isupper()}
