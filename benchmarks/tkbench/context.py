"""What every measurement needs to know about the run: the device, the mode, the L2 size, the timer."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

CPU_NOMINAL_L2 = 256 * 1024
"""On the CPU (dry run) input rotation is still exercised, against this nominal cache size."""


@dataclass(frozen=True)
class Mode:
    """How the run was asked for: ``quick`` (fewer, smaller shapes), ``dry_run`` (tiny shapes on
    the CPU interpreter, to test the script itself), ``kernels`` (generality rows of these
    examples only)."""
    quick: bool = False
    dry_run: bool = False
    kernels: tuple = ()      # generality: only these examples' cases (empty: the family's own choice)

    def to_json(self) -> dict:
        return {"quick": self.quick, "dry_run": self.dry_run, "kernels": list(self.kernels)}

    @classmethod
    def from_json(cls, data: dict) -> "Mode":
        return cls(quick=bool(data.get("quick")), dry_run=bool(data.get("dry_run")),
                   kernels=tuple(data.get("kernels") or ()))


@dataclass
class Context:
    """The worker's view of the machine; made once per worker process."""
    mode: Mode
    device: str                 # "cuda" or "cpu"
    l2_bytes: int
    free_bytes: int             # device memory free at start (rotation stays well under it)
    have_triton: bool
    warmup_ms: float = 25.0
    rep_ms: float = 100.0

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @classmethod
    def create(cls, mode: Mode) -> "Context":
        import torch
        have_triton = _importable("triton.testing")
        if mode.dry_run:
            return cls(mode, "cpu", CPU_NOMINAL_L2, 1 << 30, have_triton, warmup_ms=0.0, rep_ms=0.0)
        if not torch.cuda.is_available():
            raise SystemExit("benchmarks/run.py: no CUDA GPU is visible to torch here "
                             "(use --dry-run to test the script on the CPU)")
        torch.backends.cuda.matmul.allow_tf32 = False      # the float32 references stay float32
        torch.backends.cudnn.allow_tf32 = False
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0)) or 50 * 1024 * 1024
        free, _total = torch.cuda.mem_get_info()
        rep = 60.0 if mode.quick else 100.0
        return cls(mode, "cuda", l2, int(free), have_triton, warmup_ms=25.0, rep_ms=rep)


def _importable(module: str) -> bool:
    """Whether ``module`` imports (a missing or broken package alike: not used)."""
    import importlib
    try:
        importlib.import_module(module)
    except Exception:  # noqa: BLE001
        return False
    return True
