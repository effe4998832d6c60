"""tkjit: a JIT compiler for a ThunderKittens-style tile language targeting NVIDIA Hopper."""
from .errors import (DiagnosticError, InterpreterError, LaunchError, NotAvailableError, PassError,
                     TkError, ToolchainError, VerifyError)
from .source import Source, Span

__version__ = "0.1.0"

from .kernel import CompiledKernel, compile, load  # noqa: E402  (the user API)
