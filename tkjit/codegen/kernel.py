"""A whole kernel: the PTX module text (header, entry, parameters, registers, prologue, body)
and the metadata the runtime launches it with.

Parameter ABI (docs/architecture.md): every kernel parameter in order (a global tensor is a
``.u64`` pointer, a scalar its own type), then every named runtime dimension as ``.s32`` in order
of first appearance, then (option ``strided``) each tensor's strides as ``.s64``. The grid is a JSON expression over the named dims; the block is
``32 * warps`` threads; shared memory is dynamic (``.extern .shared .align 1024``).
"""
from __future__ import annotations

import dataclasses

from ..errors import NotAvailableError, PassError
from ..ir.core import Kernel
from ..ir.ops import Blocks
from .abi import grid_expr, launch_params, param_entries, stride_registers  # noqa: F401 - the shared launch ABI
from .context import SMEM_SYMBOL, Ctx
from .emit_cluster import finish_exchanges
from .layout import choose_warp_grid, contiguous_columns
from .padding import analyze_padding
from .pipeline import find_pipelines
from .smem import plan_shared_memory
from .table import DEFAULT_TABLE, EmitterTable
from .values import Scalar

PTX_VERSION = "8.0"
PUSH_PTX_VERSION = "8.1"
"""For a kernel with push exchanges between the CTAs of a cluster: st.async needs PTX ISA 8.1."""
ARCH = "sm_90a"


def _load_params(ctx: Ctx, entries) -> list[str]:
    out = []
    for ptx_type, name, meta, p in entries:
        if meta["kind"] == "global":
            raw, addr = ctx.new("b64"), ctx.new("b64")
            out += [f"ld.param.u64 {raw}, [{name}];", f"cvta.to.global.u64 {addr}, {raw};"]
            if p is None:
                ctx.check_buffer = addr
            else:
                ctx.globals[id(p)] = addr
        elif meta["kind"] == "scalar":
            r = ctx.new("f32" if meta["dtype"] == "f32" else "b32")
            out.append(f"ld.param{ptx_type} {r}, [{name}];")
            ctx.bind(p, Scalar(r, p.type.dtype))
        elif meta["kind"] == "dim":
            r = ctx.new("b32")
            out.append(f"ld.param.s32 {r}, [{name}];")
            ctx.dims[meta["name"]] = r

    def load_stride(entry) -> str:
        r = ctx.new("b64")
        out.append(f"ld.param.s64 {r}, [{entry[1]}];")
        return r
    ctx.strides = stride_registers(entries, load_stride)
    return out


def _plan(kernel: Kernel, table: EmitterTable, grid):
    """The loop pipelines and the shared-memory plan, lowering the stage count until it fits."""
    limit = None
    while True:
        pipelines = find_pipelines(kernel, limit)
        try:
            return pipelines, plan_shared_memory(kernel, lambda op: table.scratch_bytes(op, grid), pipelines,
                                                 table.scratch_pinned)
        except PassError:
            deepest = max((p.stages for p in pipelines.values()), default=1)
            if deepest <= 1:
                raise
            limit = deepest - 1


def _block_loop(kernel: Kernel) -> Blocks:
    loops = [op for op in kernel.body.ops if isinstance(op, Blocks)]
    if len(loops) != 1:
        raise NotAvailableError(f"kernel '{kernel.name}' needs exactly one block loop to run on the GPU, "
                                f"found {len(loops)}", kernel.span)
    return loops[0]


def _check_register_tiles(kernel: Kernel) -> None:
    """A register tile over the limit reaches this backend only from a pipeline without
    stream-cols (which runs such programs over column chunks): refuse it at its definition."""
    from ..errors import NotAvailableError
    from ..ir.types import register_tile_problem
    for op in kernel.walk():
        for v in op.results:
            problem = register_tile_problem(v.type)
            if problem:
                raise NotAvailableError(f"{problem} (the stream-cols pass runs row-wise programs over "
                                        "column chunks; it was not in the pipeline)", op.span)


def emit_kernel(kernel: Kernel, options: dict | None = None,
                table: EmitterTable | None = None) -> tuple[str, dict]:
    options = dict(options or {})
    table = table or DEFAULT_TABLE
    _check_register_tiles(kernel)
    blocks = _block_loop(kernel)
    grid, decisions = choose_warp_grid(kernel, options)
    contiguous, why = contiguous_columns(kernel, grid)
    grid = dataclasses.replace(grid, contiguous_cols=contiguous)
    decisions.append({"decision": "column_order", "value": "contiguous" if contiguous else "fragment",
                      "why": why})
    pads = analyze_padding(kernel)
    pipelines, plan = _plan(kernel, table, grid)
    ctx = Ctx(kernel, grid, plan, pads, options, table)
    ctx.pipelines = pipelines
    for pipe in pipelines.values():
        pinned = "stages" in pipe.loop.attrs
        decisions.append({"decision": "stages", "value": pipe.stages,
                          "why": f"{len(pipe.loads)} shared-tile load(s) of a loop double-buffered with cp.async "
                                 f"groups, fetched {pipe.stages - 1} trip(s) ahead"
                                 + (" (pinned by @stages)" if pinned and pipe.loop.attrs["stages"] == pipe.stages
                                    else " (lowered to fit shared memory)" if pinned else " (the default)")})
    entries = param_entries(kernel, bool(options.get("strided")))
    loads = _load_params(ctx, entries)
    body = ctx.emit_block(kernel.body)
    ctx.pushes = finish_exchanges(ctx)
    counts = [grid_expr(v, blocks) for v in blocks.variadic()]
    total = counts[0]
    for c in counts[1:]:
        total = ["mul", total, c]
    persistent = blocks.attrs.get("schedule", "grid") == "persistent"
    resident = blocks.attrs.get("resident", 1)
    sms = ["num_sms"] if resident == 1 else ["mul", ["num_sms"], resident]
    cluster = blocks.attrs.get("cluster", 1)
    if cluster > 1:
        if persistent:
            raise NotAvailableError("a block loop split over a cluster runs on the grid schedule", blocks.span)
        total = ["mul", total, cluster]
        decisions.append({"decision": "cluster", "value": cluster,
                          "why": f"{cluster} CTAs per block (.reqnctapercluster {cluster}, 1, 1): the CTAs of a "
                                 "cluster run the same block, each on its own columns, and exchange row "
                                 "reductions through distributed shared memory"})
    launch_grid = [["min", total, sms]] if persistent else [total]
    decisions.append({"decision": "schedule", "value": blocks.attrs.get("schedule", "grid"),
                      "why": (f"{resident} CTA(s) per SM looping over blocks with stride gridDim.x") if persistent else
                      "one CTA per block; the linear CTA index is decomposed with the last block index fastest"})
    if blocks.attrs.get("group", 1) > 1:
        decisions.append({"decision": "block_order", "value": f"grouped by {blocks.attrs['group']}",
                          "why": "consecutive CTAs walk groups of rows so operand tiles stay in L2"})
    if kernel.attrs.get("register_cap"):
        decisions.append({"decision": "maxnreg", "value": kernel.attrs["register_cap"],
                          "why": f".maxnreg {kernel.attrs['register_cap']}: the pass option stream-cols{{maxnreg}} (ptxas "
                                 "keeps each thread within it, so more CTAs fit an SM by registers)"})
    decisions.append({"decision": "shared_memory", "value": plan.total,
                      "why": "; ".join(f"{what} at {reg.offset} ({reg.size} B)" for what, reg, _ in plan.items)
                      or "no shared memory needed"})
    decisions += ctx.decisions
    text = _module_text(kernel, entries, grid.threads, ctx, loads, body)
    meta = {
        "name": kernel.name,
        "entry": kernel.name,
        "arch": ARCH,
        "backend": "mma.sync",
        "params": launch_params(entries),
        "strided_variant": True,  # the option ``strided`` gives a variant taking any view's strides
        "dims": kernel.named_dims(),
        "grid": launch_grid,
        "block": [grid.threads, 1, 1],
        **({"cluster": [cluster, 1, 1]} if cluster > 1 else {}),
        "smem_bytes": plan.total,
        "num_warps": grid.warps,
        "warp_grid": [grid.wr, grid.wc],
        "decisions": decisions,
    }
    return text, meta


def _module_text(kernel, entries, threads, ctx: Ctx, loads, body) -> str:
    lines = [f"// tkjit: kernel '{kernel.name}', register-tile (mma.sync) backend",
             f".version {PUSH_PTX_VERSION if getattr(ctx, 'pushes', False) else PTX_VERSION}", f".target {ARCH}", ".address_size 64", ""]
    lines.append(f".extern .shared .align 1024 .b8 {SMEM_SYMBOL}[];")
    lines.append("")
    params = ",\n".join(f"  .param {t} {name}" for t, name, _, _ in entries)
    lines.append(f".visible .entry {kernel.name}(\n{params}\n)")
    lines.append(f".reqntid {threads}, 1, 1")
    cluster = _block_loop(kernel).attrs.get("cluster", 1)
    if cluster > 1:
        lines.append(f".reqnctapercluster {cluster}, 1, 1")
    if kernel.attrs.get("register_cap"):  # stream-cols{maxnreg}: a register cap for more CTAs an SM
        lines.append(f".maxnreg {kernel.attrs['register_cap']}")
    lines.append("{")
    lines += ctx.namer.declarations()
    lines += ["  " + line for line in loads]
    lines += ["  " + line for chunk in ctx.prologue for line in chunk.split("\n")]
    for line in body:
        for piece in line.split("\n"):
            lines.append(piece if piece.endswith(":") and not piece.startswith("//") else "  " + piece)
    lines.append("  ret;")
    lines.append("}")
    return "\n".join(lines) + "\n"
