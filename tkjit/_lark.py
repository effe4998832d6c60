"""lark, imported without its optional ``regex`` backend.

lark imports the third-party ``regex`` package whenever it is installed (tens of milliseconds on
some machines: a sizeable share of a cold compile), although it only uses it for grammars built
with ``regex=True``, which tkjit's are not. So when neither lark nor regex is loaded yet, lark is
imported while ``regex`` reads as absent, and the process is left exactly as before for everyone
else: ``import regex`` works afterwards as usual.
"""
from __future__ import annotations

import sys

if "lark" not in sys.modules and "regex" not in sys.modules:
    sys.modules["regex"] = None  # type: ignore[assignment]  # makes `import regex` fail inside lark
    try:
        import lark  # noqa: F401
    finally:
        del sys.modules["regex"]

import lark  # noqa: E402

__all__ = ["lark"]
