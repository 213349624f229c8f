"""The engine's values: the immutable mapping the resolver hands out, where a value came from
(:class:`Provenance`), and the one way values are written for people: :func:`display` (a value
the rules decided or compared, in explain output, errors and the rule docs) and :func:`excerpt`
(a value someone gave, quoted back in an error as Python writes it, cut short).

Domain-free: the rule engine, the config (:mod:`resolver._domain.config`) and the runtime build on these.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import attrs

__all__ = ["FrozenMapping", "Provenance", "ProvenanceView", "display", "excerpt", "fields_repr", "lean_state"]

_C = TypeVar("_C", bound=type)

#: Each attrs class's fields shown by :func:`fields_repr`, with how each is written, found on its first ``repr``.
_SHOWN: dict[type, tuple[tuple[str, Any], ...]] = {}
#: The objects being written by :func:`fields_repr` in this thread (a value that contains itself reads ``...``).
_WRITING = threading.local()


def fields_repr(self: Any) -> str:
    """``repr`` of an attrs instance, the text attrs writes: ``Name(field=value, ...)`` over the
    fields shown (``repr=False`` ones left out, ``repr=callable`` ones written by it), ``...`` for
    an object already being written.

    The package's attrs classes take this one function as their ``__repr__``
    (``__repr__ = fields_repr`` in the class body, which attrs then keeps): attrs would write and
    compile a ``__repr__`` for each class when the class is made, about 0.15 ms each, and a cold
    ``resolver explain`` makes two dozen classes before it does anything else.
    """
    cls = type(self)
    shown = _SHOWN.get(cls)
    if shown is None:
        shown = _SHOWN[cls] = tuple(
            (field.name, repr if field.repr is True else field.repr) for field in attrs.fields(cls) if field.repr
        )
    writing: set[int] | None = getattr(_WRITING, "ids", None)
    if writing is None:
        writing = _WRITING.ids = set()
    if id(self) in writing:
        return "..."
    writing.add(id(self))
    try:
        parts = ", ".join(f"{name}={write(getattr(self, name))}" for name, write in shown)
    finally:
        writing.discard(id(self))
    return f"{cls.__qualname__.rsplit('>.', 1)[-1]}({parts})"


def lean_state(**usual: Any) -> Callable[[_C], _C]:
    """A class decorator for an attrs dict class that the disk cache pickles by the thousand: each
    field named in ``usual`` (``why=""``, ``conflict=None``) also becomes a class attribute holding
    that value, and ``__getstate__`` leaves out the fields that hold it (the same type and value),
    so an unpickled instance's ``__dict__`` holds only the rest and reads of the others find the
    class attribute. Instances made by ``__init__`` hold every field, as before."""

    def decorate(cls: _C) -> _C:
        names = {field.name for field in attrs.fields(cls)}
        unknown = usual.keys() - names
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        for name, value in usual.items():
            setattr(cls, name, value)

        def __getstate__(self: Any) -> dict[str, Any]:
            return {
                key: value
                for key, value in vars(self).items()
                if key not in usual or type(value) is not type(usual[key]) or value != usual[key]
            }

        cls.__getstate__ = __getstate__  # type: ignore[assignment]
        return cls

    return decorate


def display(value: Any, *, quoted: bool = False) -> str:
    """A value as people read it: tuples as lists, booleans lowercase, mappings as ``{k=v}``.

    Text is bare in messages; ``quoted=True`` (the generated rule docs, an error's sides) quotes it
    and writes ``None`` as ``none``, as a rule file does, so ``"4"`` and ``4`` read differently.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(display(v, quoted=quoted) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={display(v, quoted=quoted)}" for k, v in value.items()) + "}"
    if quoted and isinstance(value, str):
        return repr(value)
    if quoted and value is None:
        return "none"
    return str(value)


def excerpt(value: Any, limit: int = 60) -> str:
    """A value someone gave (a flag, a variable, a rule file's entry), as Python writes it (a tuple
    as the list the user wrote), cut after ``limit`` characters: an error quotes it back."""
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= limit else text[:limit] + "..."


class FrozenMapping(Mapping[str, Any]):
    """An immutable, hashable mapping (used for ``strategy_options``)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(sorted(data.items())) if data else {}
        self._hash: int | None = None

    @classmethod
    def of_sorted(cls, data: dict[str, Any]) -> FrozenMapping:
        """A mapping of ``data``, a dict already sorted by key that no one else keeps (not copied)."""
        made = object.__new__(cls)
        made._data = data
        made._hash = None
        return made

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMapping({self._data!r})"


class ProvenanceView(Mapping[str, "Provenance"]):
    """The provenance of named fields, looked up (and built) only when read."""

    __slots__ = ("_names", "_source")

    def __init__(self, names: tuple[str, ...], source: Mapping[str, Provenance]) -> None:
        self._names = names
        self._source = source

    def __getitem__(self, key: str) -> Provenance:
        if key not in self._names:
            raise KeyError(key)
        return self._source[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"ProvenanceView({dict(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as what it shows (a config sent to another process): the evaluator it reads from stays here.
        return (FrozenMapping, (dict(self),))


@attrs.frozen
class Provenance:
    """Where a resolved value came from.

    ``kind`` is one of ``flag`` (an argument of ``resolve()`` / a CLI flag), ``flags_file`` (a
    value read from a flags file, ``--config``; ``source`` starts with the file's path), ``variable`` (an
    override environment variable), ``environment`` (a fact of the machine or cluster),
    ``rule`` (a rule of the table decided it) or ``default``. ``source`` names the flag, variable
    or fact; ``rule`` and ``why`` name the rule that decided it, and ``inputs`` lists the
    ``(slot, value)`` facts that rule read.
    """

    kind: str
    source: str | None = None
    rule: str | None = None
    why: str | None = None
    inputs: tuple[tuple[str, Any], ...] = ()

    __repr__ = fields_repr

    def describe(self) -> str:
        """One human line: ``flag devices=2``, ``rule accelerator.auto.cpu: ...``."""
        if self.kind in ("flag", "variable", "environment", "flags_file") and self.source:
            text = f"{self.kind.replace('_', ' ')} {self.source}"
            if self.rule and self.why:
                text += f" (rule {self.rule}: {self.why})"
            return text
        if self.kind == "default":
            return f"default (rule {self.rule}: {self.why})" if self.rule and self.why else "default"
        if self.rule:
            return f"rule {self.rule}: {self.why}" if self.why else f"rule {self.rule}"
        return self.kind if not self.source else f"{self.kind} {self.source}"
