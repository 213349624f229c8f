"""The shape of a runtime error that carries its fix: the message and the hint as data."""

from __future__ import annotations

__all__ = ["HintedError", "with_hint"]


def with_hint(message: str, hint: str | None) -> str:
    """``message``, then ``hint`` on a line of its own (``  hint: ...``), as the resolver's errors end."""
    return message if not hint else f"{message}\n  hint: {hint}"


class HintedError(Exception):
    """An error that says what went wrong (``message``) and how to fix it (``hint``; ``None`` where no
    one fix is known), as data. ``str()`` is the message, then the hint on a line of its own, the shape
    of :class:`resolver.ResolutionError`; ``resolver``'s command line renders both packages' errors
    from these fields alike.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(with_hint(message, hint))
