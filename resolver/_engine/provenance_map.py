"""Provenance of a resolution's slots, built only when someone looks (most resolutions never do)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from resolver._engine.values import Provenance

if TYPE_CHECKING:
    from resolver._engine.steps import Choice

__all__ = ["DEFAULT", "ProvenanceMap"]

#: The provenance of a slot no rule decided.
DEFAULT = Provenance("default")


class Replaying(Protocol):
    """What the map asks of the evaluator that made it (``resolver._engine.evaluator.Evaluator``,
    which imports this module: a protocol here rather than an import back)."""

    @property
    def decided_slots(self) -> tuple[str, ...]: ...

    @property
    def other_inputs(self) -> tuple[str, ...]: ...

    def replay(self, values: Mapping[str, Any], given: Mapping[str, None]) -> dict[str, Choice | None]: ...

    def provenance_of(
        self, choice: Choice, values: Mapping[str, Any], provenance: Mapping[str, Provenance]
    ) -> Provenance: ...


class ProvenanceMap(Mapping[str, Provenance]):
    """Provenance of every slot, built only when someone looks (most resolutions never do).

    ``origins`` says which rule decided each slot (None: its default). A run of the generated
    code records none: the first look replays the closures over the decided values' inputs
    (``given``: the inputs that took their defaults), which choose the same rules.
    """

    def __init__(
        self,
        evaluator: Replaying,
        values: Mapping[str, Any],
        inputs: Mapping[str, Provenance] | Callable[[str], Provenance | None],
        origins: Mapping[str, Choice | None] | None,
        given: Mapping[str, None] | None = None,
    ) -> None:
        self._evaluator = evaluator
        self._values = values
        self._inputs = inputs
        self._known = origins
        self._given = given
        self._done: dict[str, Provenance] = {}

    @property
    def _origins(self) -> Mapping[str, Choice | None]:
        if self._known is None:
            self._known = self._evaluator.replay(self._values, self._given or {})
        return self._known

    def __getitem__(self, slot: str) -> Provenance:
        found = self._done.get(slot)
        if found is not None:
            return found
        if slot in self._origins:
            choice = self._origins[slot]
            found = DEFAULT if choice is None else self._evaluator.provenance_of(choice, self._values, self)
        else:
            inputs = self._inputs
            found = inputs(slot) if callable(inputs) else inputs.get(slot)
            if found is None:
                raise KeyError(slot)
        self._done[slot] = found
        return found

    def __iter__(self) -> Iterator[str]:
        origins = self._origins
        yield from (s for s in self._values if s not in origins)
        yield from (s for s in self._evaluator.other_inputs if s in origins)
        yield from (s for s in self._evaluator.decided_slots if s in origins)

    def __len__(self) -> int:
        return len(self._values.keys() | self._origins.keys())
