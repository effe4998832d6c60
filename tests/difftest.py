"""Differential testing of generated kernels (tkjit/testing/gen.py): each program runs on the CPU
interpreter and as the register-tile backend's PTX on the PTX simulator (tests/ptxsim.py), and,
with a GPU, compiled by the default pipeline and launched on CUDA tensors; the outputs must
agree. Shared by tests/test_differential.py (CI) and benchmarks/difftest.py (long runs)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from tkjit.testing.gen import Program, generate

RTOL = 2e-2
"""Per element, relative to the output's largest magnitude (bf16/f16 outputs round at 2^-8 and
2^-11; approximate math on the GPU differs in the last f32 bits, which a tanh or a bf16 store
can magnify to one bf16 ulp)."""


@dataclass
class Outcome:
    seed: int
    stage: str
    """``ok``, ``compile`` (a path refused a valid kernel), ``run`` (a path raised), ``mismatch``."""
    detail: str = ""
    features: set = field(default_factory=set)


def interpret(prog: Program) -> list[torch.Tensor]:
    from tkjit.frontend import lower_source
    from tkjit.interpreter import run
    kernel = lower_source(prog.source, f"{prog.name}.tk")
    args = prog.make_args()
    run(kernel, args)
    return [args[i] for i in prog.outputs]


def ptx_of(prog: Program, pipeline: str | None):
    """The compiler's PTX and metadata for the program (``pipeline="canonicalize"``: the
    register-tile backend, which the simulator runs; None: the default pipeline)."""
    from tkjit.compiler import compile
    from tkjit.options import CompileOptions
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs on the mma.sync backend"
        result = compile(prog.source, CompileOptions.resolve(pipeline=pipeline, cache=False),
                         filename=f"{prog.name}.tk", until="ptx")
    return result


def simulated(prog: Program) -> list[torch.Tensor]:
    from simkit import simulate
    result = ptx_of(prog, "canonicalize")
    args = prog.make_args()
    return simulate(result.tkir, args, prog.outputs, max_ctas=64,
                    ptx_meta=(result.asm["ptx"], result.metadata))


def on_gpu(prog: Program) -> list[torch.Tensor]:
    import tkjit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = tkjit.compile(prog.source, filename=f"{prog.name}.tk")
    args = prog.make_args("cuda")
    k(*args)
    torch.cuda.synchronize()
    return [args[i].cpu() for i in prog.outputs]


def compare(ref: list[torch.Tensor], got: list[torch.Tensor], names: list[str]) -> str:
    """'' when every output agrees, else what differs first."""
    for name, a, b in zip(names, ref, got):
        a, b = a.double(), b.double()
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        if not torch.equal(nan_a, nan_b):
            where = (nan_a != nan_b).nonzero()[0].tolist()
            return (f"{name}: NaN at {where} in {'the reference' if nan_a[tuple(where)] else 'the result'} only "
                    f"({int((nan_a != nan_b).sum())} elements); reference {a[tuple(where)].item()}, got {b[tuple(where)].item()}")
        a, b = a.masked_fill(nan_a, 0), b.masked_fill(nan_b, 0)
        inf = torch.isinf(a) | torch.isinf(b)
        if not torch.equal(a[inf], b[inf]):
            return f"{name}: infinities differ"
        a, b = a.masked_fill(inf, 0), b.masked_fill(inf, 0)
        scale = max(a.abs().max().item() if a.numel() else 0.0, 1e-6)
        err = (a - b).abs()
        bad = err > RTOL * scale + 1e-5
        if bad.any():
            where = bad.nonzero()[0].tolist()
            return (f"{name}: {int(bad.sum())} of {a.numel()} elements differ; at {where} reference "
                    f"{a[tuple(where)].item():.6g}, got {b[tuple(where)].item():.6g} (scale {scale:.3g})")
    return ""


def differential(seed: int, target: str = "sim", hopper: bool = False) -> Outcome:
    """Run program ``seed`` on the interpreter and on ``target`` (``sim`` or ``gpu``).

    Stages: ``ok``; ``refused`` (a backend declined a valid kernel with a located
    NotAvailableError -- a documented limitation, counted apart); ``interpret``, ``compile``
    (the default pipeline, Hopper passes and general lowering included, raised something else),
    ``run`` (the simulator or the GPU raised: a race, an unsupported instruction, a fault) and
    ``mismatch`` -- the last four are bugs."""
    from tkjit.errors import NotAvailableError
    prog = generate(seed, hopper=hopper)
    names = [prog.params[i].name for i in prog.outputs]
    features = set(prog.features)
    if hopper and target == "sim":  # compile only, through ptxas: the simulator has no wgmma
        return compiled(prog, features)
    try:
        ref = interpret(prog)
    except Exception as e:  # noqa: BLE001 -- every failure is a finding
        return Outcome(seed, "interpret", f"{type(e).__name__}: {e}", features)
    if target == "sim":
        try:  # the default pipeline (the Hopper passes, the general lowering) must take it too
            default = ptx_of(prog, None)
            features.add("hopper" if "Hopper" in default.asm["ptx"].split("\n", 1)[0] else "mma.sync")
        except NotAvailableError:
            features.add("refused-default")
        except Exception as e:  # noqa: BLE001
            return Outcome(seed, "compile", f"{type(e).__name__}: {str(e)[:2000]}", features)
    try:
        got = simulated(prog) if target == "sim" else on_gpu(prog)
    except NotAvailableError as e:
        return Outcome(seed, "refused", e.render()[:2000], features)
    except Exception as e:  # noqa: BLE001
        return Outcome(seed, "run", f"{type(e).__name__}: {str(e)[:2000]}", features)
    detail = compare(ref, got, names)
    return Outcome(seed, "mismatch" if detail else "ok", detail, features)


def compiled(prog: Program, features: set) -> Outcome:
    """Compile ``prog`` by the default pipeline to a cubin (ptxas), without running it."""
    from tkjit.compiler import advance
    from tkjit.errors import NotAvailableError
    try:
        result = ptx_of(prog, None)
        features.add("hopper" if "Hopper" in result.asm["ptx"].split("\n", 1)[0] else "mma.sync")
        advance(result, "cubin")
    except NotAvailableError as e:
        return Outcome(prog.seed, "refused", e.render()[:2000], features)
    except Exception as e:  # noqa: BLE001
        return Outcome(prog.seed, "compile", f"{type(e).__name__}: {str(e)[:2000]}", features)
    return Outcome(prog.seed, "compiled", "", features)


def program(source: str, dims: dict, seed: int = 0, scalars: dict | None = None) -> Program:
    """A hand-written (or minimized) program in the generator's conventions: tensors named Y*
    are outputs, X* inputs; ``scalars`` gives the scalar parameters' values."""
    import re
    from tkjit.testing.gen import Param
    sig = re.search(r"kernel \w+\((.*?)\) \{", source, re.S).group(1)
    params = []
    for name, typ in re.findall(r"(\w+): ([^,\[]+(?:\[[^\]]*\])?)", sig):
        m = re.match(r"gl<(\w+)>\[(.*)\]", typ)
        if m:
            params.append(Param(name, "out" if name.startswith("Y") else "in", m.group(1),
                                tuple(d.strip() for d in m.group(2).split(","))))
        else:
            params.append(Param(name, typ.strip(), value=(scalars or {})[name]))
    return Program(seed, source, params, dict(dims))


def check(prog: Program, target: str = "sim") -> str:
    """'' when the interpreter and ``target`` agree on ``prog``, else the difference."""
    names = [prog.params[i].name for i in prog.outputs]
    ref = interpret(prog)
    got = simulated(prog) if target == "sim" else on_gpu(prog)
    return compare(ref, got, names)


def _block_end(lines: list[str], i: int) -> int:
    """The index of the line closing the brace opened at the end of line ``i``."""
    depth = 0
    for j in range(i, len(lines)):
        depth += lines[j].count("{") - lines[j].count("}")
        if j > i and depth <= 0:
            return j if lines[j].strip() == "}" or depth < 0 else j
        if j > i and lines[j].strip().startswith("} else {") and depth == 1:
            continue
    return len(lines) - 1


def minimize(prog: Program, fails) -> Program:
    """Delta-debug ``prog``: drop statements (and whole loops, ifs, else branches) while
    ``fails(candidate)`` stays true. ``fails`` gets a Program and returns a bool; a candidate
    that no longer compiles in the front end counts as not failing."""
    from tkjit.errors import TkError
    from tkjit.frontend import lower_source

    def still(lines):
        cand = Program(prog.seed, "\n".join(lines), prog.params, prog.dims, prog.features)
        try:
            lower_source(cand.source, f"{cand.name}.tk")
        except TkError:
            return None
        try:
            return cand if fails(cand) else None
        except Exception:  # noqa: BLE001
            return None

    lines = prog.source.split("\n")
    body_start = next(i for i, l in enumerate(lines) if "blocks(" in l) + 1
    changed = True
    while changed:
        changed = False
        i = body_start
        while i < len(lines):
            s = lines[i].strip()
            if s in ("}", "") or i >= len(lines) - 3:
                i += 1
                continue
            if s.startswith("} else {"):
                end = _block_end(lines, i)
                cand = lines[:i] + ["  " * 0 + lines[i].replace("} else {", "}")] + lines[end + 1:]
            elif s.endswith("{"):
                end = _block_end(lines, i)
                cand = lines[:i] + lines[end + 1:]
            else:
                cand = lines[:i] + lines[i + 1:]
            got = still(cand)
            if got is not None:
                lines, prog, changed = cand, got, True
            else:
                i += 1
    return prog
