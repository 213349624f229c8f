"""Rendering a resolution for people (text) and programs (JSON): what was decided, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from resolver._domain.config import DECIDED_FIELDS, ResolvedConfig, display, get_converter
from resolver._engine.errors import ResolutionError
from resolver._engine.reporter import RecordingReporter

if TYPE_CHECKING:
    from resolver._snapshot.environment import Environment

__all__ = ["EXPLAIN_SCHEMA_VERSION", "error_data", "explain_json", "explain_text"]

#: Bumped whenever a key of ``resolver explain --format json`` changes meaning or disappears.
EXPLAIN_SCHEMA_VERSION = 1

_FIELDS = DECIDED_FIELDS


def explain_text(config: ResolvedConfig, trace: RecordingReporter | None = None, *, verbose: bool = False) -> str:
    """One line per field: name, value, and where the value came from."""
    rows = [(name, display(getattr(config, name)), config.provenance[name].describe()) for name in _FIELDS]
    if verbose and trace is not None:
        rows.append(("", "", ""))
        rows.append(("-- every decision --", "", ""))
        for slot, (value, prov) in trace.decisions.items():
            if slot not in _FIELDS:
                rows.append((slot, display(value), prov.describe()))
    # every column as wide as its longest value, so a long value never runs into the next one
    width = max(len(r[0]) for r in rows) + 2
    vwidth = max(len(r[1]) for r in rows) + 2
    lines = [f"{n:<{width}}{v:<{vwidth}}{w}".rstrip() for n, v, w in rows]
    if config.notes:
        lines.append("")
        lines.append("notes:")
        lines += [f"  - {note}" for note in config.notes]
    return "\n".join(lines)


def error_data(error: ResolutionError) -> dict[str, Any]:
    converter = get_converter()
    return {
        "kind": type(error).__name__,
        "rule": error.rule,
        "rule_ids": list(error.rule_ids),
        "message": error.message,
        "hint": error.hint,
        "sides": [
            {"slot": s.slot, "value": converter.unstructure(s.value), "provenance": converter.unstructure(s.provenance)}
            for s in error.sides
        ],
    }


def explain_json(
    config: ResolvedConfig | None,
    trace: RecordingReporter | None,
    error: ResolutionError | None,
    *,
    environment: Environment | None = None,
    verbose: bool = False,
) -> str:
    """The JSON of ``resolver explain``: schema version, snapshot used, config or error.

    ``decisions`` (every intermediate slot, in order) is there only with ``verbose``.
    """
    converter = get_converter()
    data: dict[str, Any] = {"schema_version": EXPLAIN_SCHEMA_VERSION, "ok": error is None}
    if environment is not None:
        data["environment"] = environment.to_dict()
    if config is not None:
        data["config"] = config.to_dict()
    if verbose and trace is not None:
        data["decisions"] = [
            {"slot": slot, "value": converter.unstructure(value), "provenance": converter.unstructure(prov)}
            for slot, (value, prov) in trace.decisions.items()
        ]
    if error is not None:
        data["error"] = error_data(error)
    import json  # only for --format json

    return json.dumps(data, indent=2, sort_keys=True, default=str)
