"""The ``tkjit`` command (also ``python -m tkjit``).

    tkjit compile FILE [--emit STAGE] [-o OUT] [-D NAME=VALUE ...] [-p PIPELINE]
    tkjit opt FILE.tkir -p PIPELINE [-o OUT] [--verify-each] [--print-ir-after-all]
    tkjit explain FILE [-D NAME=VALUE ...] [-p PIPELINE] [--protocol]
    tkjit passes
    tkjit cache ls|verify|clear
    tkjit demo
    tkjit bench [ARGS ...]
    tkjit --version

FILE may be ``-`` for standard input. Every tkjit error is printed as its diagnostic on stderr
with exit status 1 (a traceback too when TKJIT_DEBUG=1).
"""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import traceback
from pathlib import Path

from .errors import NotAvailableError, TkError

EMIT_CHOICES = "tkir, opt, ptx, cubin, sass or after:<pass>"


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(prog="tkjit", description="tkjit: a tile-language JIT for Hopper GPUs")
    parser.add_argument("--version", action="version", version=f"tkjit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("compile", help="compile a kernel file to any stage")
    _add_source_args(p)
    p.add_argument("--emit", default="opt", metavar="STAGE", help=f"the stage to print: {EMIT_CHOICES} "
                   "(default: opt)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    p.set_defaults(handler=_compile)

    p = sub.add_parser("opt", help="run a pass pipeline over textual IR (IR in, IR out)")
    p.add_argument("file", metavar="FILE.tkir", help="textual tile IR, or - for standard input")
    p.add_argument("-p", "--pipeline", required=True, help="e.g. 'canonicalize' ('' runs no pass)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.add_argument("--verify-each", action="store_true", help="verify the IR after every pass")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass on stderr")
    p.add_argument("--explain", action="store_true", help="print the decision log on stderr")
    p.set_defaults(handler=_opt)

    p = sub.add_parser("explain", help="print what the passes decided about a kernel, and why")
    _add_source_args(p)
    p.add_argument("--protocol", action="store_true",
                   help="also print the checked synchronization protocol the general lowering walks")
    p.set_defaults(handler=_explain)

    p = sub.add_parser("passes", help="list the passes and their options")
    p.set_defaults(handler=_passes)

    p = sub.add_parser("cache", help="list, verify or clear the disk cache")
    p.add_argument("action", choices=["ls", "verify", "clear"])
    p.set_defaults(handler=_cache)

    p = sub.add_parser("demo", help="compile the examples (and run them where a backend is present)")
    p.set_defaults(handler=_demo)

    p = sub.add_parser("bench", help="run the benchmarks (a GPU is needed)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="passed on to the benchmark script")
    p.set_defaults(handler=_bench)
    return parser


def _add_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a .tk kernel or .tkir IR file, or - for standard input")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a kernel constant (repeatable)")
    p.add_argument("-p", "--pipeline", default=None, help="the pass pipeline (default: the standard one)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":
        args.args = extra + args.args  # everything after `bench` belongs to the benchmark script
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.handler(args)
    except TkError as e:
        _print_error(e)
        return 1
    except BrokenPipeError:
        return 1
    except KeyboardInterrupt:
        return 130


def _print_error(e: TkError) -> None:
    from .config import get_config
    if get_config().debug:
        traceback.print_exc(file=sys.stderr)
    print(e.render(), file=sys.stderr)


# ---------------------------------------------------------------- inputs and outputs

def _read(path: str) -> tuple[str, str]:
    """(text, name for diagnostics) of a file, or of standard input for ``-``."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(), path
    except (OSError, UnicodeDecodeError) as e:
        raise TkError(f"cannot read '{path}': {getattr(e, 'strerror', None) or e}") from None


def _write(text: str | bytes, output: str | None) -> None:
    if output is None:
        if isinstance(text, bytes):
            if sys.stdout.isatty():
                raise TkError("the cubin is binary; give -o FILE (or redirect standard output)")
            sys.stdout.flush()
            sys.stdout.buffer.write(text)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(text)
        return
    try:
        if isinstance(text, bytes):
            Path(output).write_bytes(text)
        else:
            Path(output).write_text(text)
    except OSError as e:
        raise TkError(f"cannot write '{output}': {e.strerror or e}") from None


def parse_define(text: str) -> tuple[str, int | float | bool]:
    """``-D NAME=VALUE``: an integer, a float, true or false."""
    name, eq, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not eq or not name.isidentifier():
        raise TkError(f"-D {text}: expected NAME=VALUE, e.g. -D BM=128")
    if value in ("true", "false"):
        return name, value == "true"
    try:
        return name, int(value)
    except ValueError:
        pass
    try:
        return name, float(value)
    except ValueError:
        raise TkError(f"-D {text}: the value must be an integer, a float, true or false") from None


def _options(args, **extra):
    from .options import CompileOptions
    constants = dict(parse_define(d) for d in args.defines)
    return CompileOptions.resolve(constants=constants, pipeline=args.pipeline, **extra)


# ---------------------------------------------------------------- the commands

def _compile(args) -> int:
    from . import compiler
    options = _options(args, cache=False if args.no_cache else None)
    text, filename = _read(args.file)
    stage = args.emit
    last = compiler.stage_of(stage)
    front = last if last in ("tkir", "opt") else "opt"  # errors past the IR are reported as unavailable
    result = compiler.compile(text, options, filename=filename, until=front)
    try:
        compiler.advance(result, last)
    except NotAvailableError as e:
        raise compiler.StageNotAvailableError(f"cannot emit '{stage}': {e.message}",
                                              notes=[f"the stages made here: {', '.join(result.asm)}"]) from None
    if options.dump_dir is not None:
        compiler.dump_all(result)
    if stage == "cubin":
        _write(result.binary, args.output)
        return 0
    if stage not in result.asm:
        error = compiler.no_such_stage(result, stage)
        error.notes.append(f"the stages made here: {', '.join(result.asm)}")
        raise error
    _write(result.asm[stage], args.output)
    return 0


def _opt(args) -> int:
    from .compiler import optimize_ir_text
    text, filename = _read(args.file)

    def show(label: str, ir: str) -> None:
        print(f"// -----// IR {label.replace(':', ' ')} //----- //\n{ir}", file=sys.stderr)

    out, log = optimize_ir_text(text, filename, args.pipeline, verify_each=args.verify_each,
                                on_snapshot=show if args.print_ir_after_all else None)
    if args.explain:
        print(log.render(), end="", file=sys.stderr)
    _write(out, args.output)
    return 0


def _explain(args) -> int:
    from .kernel import compile as compile_kernel
    constants = dict(parse_define(d) for d in args.defines)
    text, filename = _read(args.file)
    kernel = compile_kernel(text, filename=filename, constants=constants, pipeline=args.pipeline)
    print(kernel.explain(), end="")
    if args.protocol:
        protocol = kernel.protocol
        print(protocol if protocol is not None else
              "no protocol: the kernel does not take the general sm_90a lowering\n", end="")
    return 0


def _passes(args) -> int:
    from .passes import DEFAULT_PIPELINE, describe_options, registered_passes
    for name, cls in registered_passes().items():
        print(f"{name:<16} {cls.summary}")
        if dataclasses.fields(cls):
            print(f"{'':<16} {describe_options(cls)}")
    print(f"\nthe default pipeline: {DEFAULT_PIPELINE}")
    return 0


def _cache(args) -> int:
    from .cache import DiskCache, cache_command_status
    text, status = cache_command_status(args.action, DiskCache.default())
    print(text)
    return status


def _demo(args) -> int:
    from .demo import run_demo
    return run_demo()


BENCH_SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


def _bench(args) -> int:
    """benchmarks/run.py of a source checkout, on a GPU. Without one it stops before anything runs
    or is written (``--dry-run``, which tests the script on the CPU interpreter, goes through)."""
    if not BENCH_SCRIPT.is_file():
        raise NotAvailableError(f"tkjit bench runs benchmarks/run.py from a source checkout of tkjit, and "
                                f"this install has none (looked for {BENCH_SCRIPT})")
    if "--dry-run" not in args.args and not _gpu_here():
        raise NotAvailableError("tkjit bench needs a CUDA GPU (a Hopper, with a CUDA build of torch) and none "
                                "is usable here; `tkjit bench --dry-run` checks the script on the CPU")
    return subprocess.call([sys.executable, str(BENCH_SCRIPT), *args.args])


def _gpu_here() -> bool:
    try:
        from .runtime.driver import gpu_available
        return gpu_available()
    except Exception:  # noqa: BLE001 - no cuda-python, no torch: no GPU
        return False


if __name__ == "__main__":
    raise SystemExit(main())
