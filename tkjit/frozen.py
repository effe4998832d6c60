"""``Frozen``: what ``@dataclass(frozen=True)`` adds to a class, as a mixin.

A frozen dataclass generates ``__setattr__``, ``__delattr__`` (and, with ``eq``, ``__hash__``) for
every class, each compiled separately when its module is imported (a cold compile imports about a
hundred dataclasses). tkjit's immutable records (the AST, the IR's types, the sync protocol's
steps, options, matches, ...) take these two from here instead and are declared
``@dataclass(unsafe_hash=True)`` (compared, hashed and printed as a frozen dataclass is) or with
``eq=False`` where a frozen one had it. A field is set once, by ``__init__``;
``dataclasses.replace`` makes a changed copy. (Passes stay ``frozen=True``: the pass registry
asks for it.) A dataclass without a docstring also costs an ``inspect.signature`` call at import,
to make one: give every dataclass a docstring.
"""
from __future__ import annotations

from dataclasses import FrozenInstanceError


class Frozen:
    """Assigning a field that is already set, or any other attribute, or deleting one, raises
    ``FrozenInstanceError``, as on a frozen dataclass."""

    __slots__ = ()

    def __setattr__(self, name: str, value) -> None:
        if name in self.__dict__ or name not in self.__dataclass_fields__:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
