"""Hooks for watching a resolution (the explain trace is one reporter; the engine never prints)."""

from __future__ import annotations

from typing import Any

from resolver._engine.errors import ResolutionError
from resolver._engine.values import Provenance

__all__ = ["RecordingReporter", "Reporter"]


class Reporter:
    """Subclass and override what you want to watch; every hook does nothing by default."""

    def decided(self, slot: str, value: Any, provenance: Provenance) -> None:
        """A slot got its value."""

    def noted(self, rule: str, text: str) -> None:
        """A note rule fired: an explained choice made on the user's behalf."""

    def stage_finished(self, stage: str, value: Any) -> None:
        """A stage is complete; ``value`` is its frozen, typed result."""

    def failed(self, error: ResolutionError) -> None:
        """A conflict rule fired; the error is raised right after."""


class RecordingReporter(Reporter):
    """Keeps every event in order, for ``resolver explain`` and for tests."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.decisions: dict[str, tuple[Any, Provenance]] = {}
        self.stages: dict[str, Any] = {}

    def decided(self, slot: str, value: Any, provenance: Provenance) -> None:
        self.decisions[slot] = (value, provenance)
        self.events.append(("decided", (slot, value, provenance)))

    def noted(self, rule: str, text: str) -> None:
        self.events.append(("noted", (rule, text)))

    def stage_finished(self, stage: str, value: Any) -> None:
        self.stages[stage] = value
        self.events.append(("stage", (stage, value)))

    def failed(self, error: ResolutionError) -> None:
        self.events.append(("failed", error))
