"""The errors a user of the resolver can meet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from resolver._engine.values import display, fields_repr

if TYPE_CHECKING:
    from resolver._engine.values import Provenance

__all__ = ["ConflictError", "ResolutionError", "RuleTableError", "Side", "diagnostic"]


@attrs.frozen
class Side:
    """One of the things involved: a slot, its value and where that value came from."""

    slot: str
    value: Any
    provenance: Provenance

    __repr__ = fields_repr

    def describe(self) -> str:
        return f"{self.slot} = {display(self.value, quoted=True)}  <- {self.provenance.describe()}"


class ResolutionError(ValueError):
    """The flags and the environment do not resolve to a configuration.

    ``rule`` names the rule that found the problem, ``sides`` the inputs involved (each with its
    value and provenance), ``hint`` the fix.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        rule: str | None = None,
        sides: tuple[Side, ...] = (),
    ) -> None:
        self.message = message
        self.hint = hint
        self.rule = rule
        self.sides = sides
        lines = [message] + [f"  - {side.describe()}" for side in sides]
        if hint:
            lines.append(f"  hint: {hint}")
        super().__init__("\n".join(lines))

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """The rule that raised this, then the rules that decided each side."""
        ids = [self.rule] if self.rule else []
        ids += [s.provenance.rule for s in self.sides if s.provenance.rule and s.provenance.rule not in ids]
        return tuple(ids)

    def diagnostic(self) -> str:
        """A compiler-style, multi-line rendering for the CLI (:func:`diagnostic`)."""
        return diagnostic(self)


def diagnostic(error: BaseException) -> str:
    """The command line's rendering of an error, the same for both packages' errors: ``error[rule]:`` and
    the message, each side with where its value came from, then ``= help:`` and the hint.

    It reads the fields, not the text: ``message`` and ``hint`` (which a :class:`ResolutionError` and
    a runtime error that carries its fix both have), ``rule`` and ``sides`` where the error has them.
    An error without a ``message`` and a ``hint`` is ``error:`` and its text.
    """
    message = getattr(error, "message", None)
    if not isinstance(message, str) or not hasattr(error, "hint"):
        return f"error: {error}"
    rule = getattr(error, "rule", None)
    lines = [f"error[{rule}]: {message}" if rule else f"error: {message}"]
    for side in getattr(error, "sides", ()):
        lines.append(f"  --> {side.slot} = {display(side.value, quoted=True)}")
        lines.append(f"      from {side.provenance.describe()}")
    hint = getattr(error, "hint", None)
    if hint:
        lines.append(f"  = help: {hint}")
    return "\n".join(lines)


class ConflictError(ResolutionError):
    """Two sources disagree: names the conflict rule, both sides with their provenance, and a fix."""


class RuleTableError(ValueError):
    """The rule table itself is broken (found when it loads); names the file and the rule."""

    def __init__(
        self, message: str, *, file: str | None = None, rule: str | None = None, line: int | None = None
    ) -> None:
        self.message = message  # without the place: a wrapper (resolver.plugins) re-words it
        self.file = file
        self.rule = rule
        self.line = line
        where = file or "<rules>"
        if line is not None:
            where += f":{line}"
        if rule:
            where += f": rule {rule!r}"
        super().__init__(f"{where}: {message}")


# Tracebacks and doctests name the errors where users import them from (``resolver.ConflictError``),
# not this internal module; pickle finds them there too (``resolver`` imports them on first use).
for _error in (ResolutionError, ConflictError, RuleTableError):
    _error.__module__ = "resolver"
del _error
