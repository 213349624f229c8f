"""``resolver explain``: resolve for this machine (or a simulated one) and say what was decided and
why, for people (text), programs (JSON) or Graphviz (the decision graph: :mod:`resolver.cli.decision_graph`)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from resolver._domain.config import DECIDED_FIELDS, ResolvedConfig, display, get_converter
from resolver._domain.rule_tables import table_in_use
from resolver._engine.errors import ResolutionError
from resolver._engine.reporter import RecordingReporter
from resolver.cli.options import add_config, add_flags
from resolver.cli.shared import (
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_OK,
    check_removed,
    environment_for,
    resolve_args,
    rule_files_for,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from resolver._domain.rule_files import RuleFile
    from resolver._snapshot.environment import Environment
    from resolver.cli.options import Parser

__all__ = [
    "EXPLAIN_SCHEMA_VERSION",
    "add_options",
    "error_data",
    "explain_json",
    "explain_text",
    "launched_text",
    "rule_files_text",
    "run",
]

#: Where a launcher (``resolver run``, ``runtime.launch``) hands a rank its config, as JSON: the runtime's
#: ``runtime._protocol.rank_environment.CONFIG_VARIABLE``, read here without importing the runtime.
LAUNCHED_CONFIG_VARIABLE = "RESOLVER_CONFIG"

#: Bumped whenever a key of ``resolver explain --format json`` changes meaning or disappears.
EXPLAIN_SCHEMA_VERSION = 1

_FIELDS = DECIDED_FIELDS

SUMMARY = "print each resolved field, its value and why"
DESCRIPTION = (
    "Resolve the flags for this machine (or a simulated one) and print each resolved field, "
    "its value and why; on failure, a diagnostic naming both sides and the fix. --format json gives "
    "the same as data, --format dot the decision graph for Graphviz."
)
EXAMPLES = (
    "resolver explain --devices 2 --strategy ddp",
    "resolver explain --devices 8 --simulate cuda=8,slurm",
    "resolver explain --simulate my-cluster-node.toml,interactive --verbose",
    "resolver explain --devices 2 --format json --verbose",
    "resolver explain --devices 4 --simulate cuda=8,slurm --format dot > decision.dot",
    "resolver explain --config train.toml --devices 4",
)
TRAILER = EXIT_CODES


def add_options(explain: Parser) -> None:
    """``resolver explain``'s options: the flags, ``--config``, ``--simulate``, ``--format``, ``--verbose``."""
    add_flags(explain)
    add_config(explain)
    explain.add_argument(
        "--format",
        choices=("text", "json", "dot"),
        default="text",
        help="text (default), json (schema_version, environment, config or error), or dot (the decision "
        "graph, for Graphviz: dot -Tsvg)",
    )
    explain.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also show every intermediate decision (text: extra rows; json: a `decisions` list; dot: all nodes)",
    )


def run(args: argparse.Namespace) -> int:
    """Resolve and print the config (or the error) as text, JSON or DOT; the exit code."""
    from resolver._engine.reporter import RecordingReporter
    from resolver.cli.explain import explain_json, explain_text

    launched = os.environ.get(LAUNCHED_CONFIG_VARIABLE)
    if launched and args.format == "text" and args.config is None and args.simulate is None and not _any_flag(args):
        return _explain_launched(launched)
    # every decision is recorded only for what shows it: the plain table needs the fields alone
    trace = RecordingReporter() if args.verbose or args.format == "dot" else None
    environment: Environment | None = None
    config: ResolvedConfig | None = None
    failure: ResolutionError | None = None
    files: tuple[RuleFile, ...] = ()
    try:
        files = rule_files_for(args)
        environment = environment_for(args.simulate, files)
        check_removed(args)
        config = resolve_args(args, environment=environment, rules=args.rules or None, reporter=trace)
    except ResolutionError as error:
        failure = error
    if args.format == "json":
        print(explain_json(config, trace, failure, environment=environment, verbose=args.verbose, rule_files=files))
    elif args.format == "dot":
        from resolver.cli.decision_graph import decision_graph

        table = table_in_use(files)
        assert trace is not None
        sys.stdout.write(decision_graph(trace, table, error=failure, everything=args.verbose))
        if failure is not None:
            print(failure.diagnostic(), file=sys.stderr)
    elif failure is not None:
        print("\n".join([failure.diagnostic(), *rule_files_text(files)]), file=sys.stderr)
    else:
        assert config is not None
        text = explain_text(config, trace, verbose=args.verbose, rule_files=files)
        print("\n".join([text, *launched_text(config, os.environ.get(LAUNCHED_CONFIG_VARIABLE))]))
    return EXIT_OK if failure is None else EXIT_ERROR


def explain_text(
    config: ResolvedConfig,
    trace: RecordingReporter | None = None,
    *,
    verbose: bool = False,
    rule_files: Sequence[RuleFile] = (),
) -> str:
    """One line per field: name, value, and where the value came from; then the notes, and the
    rule files added to the built-in table with what named each."""
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
    return "\n".join(lines + rule_files_text(rule_files))


def _any_flag(args: argparse.Namespace) -> bool:
    """Whether the command line gives a flag a value other than its default."""
    from resolver._domain.flags import FLAGS

    return any(getattr(args, flag.name) not in (flag.default, None, (), []) for flag in FLAGS)


def _explain_launched(launched_json: str) -> int:
    """Inside a launched rank, with no flags: this rank's own config, as its launcher placed it."""
    try:
        launched = ResolvedConfig.from_json(launched_json)
    except (ValueError, TypeError, KeyError) as exc:
        print(f"error: this process's launched config ({LAUNCHED_CONFIG_VARIABLE}) could not be read: {exc}\n"
              f"  = help: unset {LAUNCHED_CONFIG_VARIABLE} to resolve for this machine, or give the flags to "
              "explain", file=sys.stderr)  # fmt: skip
        return EXIT_ERROR
    print(f"this rank's config, as its launcher placed it ({LAUNCHED_CONFIG_VARIABLE}; give flags to resolve afresh):")
    print(explain_text(launched))
    return EXIT_OK


def launched_text(config: ResolvedConfig, launched_json: str | None) -> list[str]:
    """Inside a launched rank (``RESOLVER_CONFIG`` set): what its launcher decided that this resolution did
    not (a multi-node round's node rank, node count and world size, each with why; the round's note), as
    lines after the table; none elsewhere."""
    if not launched_json:
        return []
    try:
        launched = ResolvedConfig.from_json(launched_json)
    except (ValueError, TypeError, KeyError) as exc:
        return ["", f"this process's launched config ({LAUNCHED_CONFIG_VARIABLE}) could not be read: {exc}"]
    names = [name for name in _FIELDS if getattr(launched, name) != getattr(config, name)
             or launched.provenance.get(name) != config.provenance.get(name)]  # fmt: skip
    rows = [(name, display(getattr(launched, name)), launched.provenance[name].describe()) for name in names
            if name in launched.provenance]  # fmt: skip
    notes = [note for note in launched.notes if note not in config.notes]
    if not rows and not notes:
        return []
    lines = [
        "",
        f"as launched ({LAUNCHED_CONFIG_VARIABLE}), where this rank's launcher decided otherwise or says why:",
    ]
    if rows:
        width = max(len(r[0]) for r in rows) + 2
        vwidth = max(len(r[1]) for r in rows) + 2
        lines += [f"  {n:<{width}}{v:<{vwidth}}{w}".rstrip() for n, v, w in rows]
    lines += [f"  - {note}" for note in notes]
    return lines


def rule_files_text(rule_files: Sequence[RuleFile]) -> list[str]:
    """The rule files added to the built-in table, a line each with what named it (none: no lines)."""
    if not rule_files:
        return []
    width = max(len(file.path) for file in rule_files) + 2
    return ["", "rule files (added to the built-in table):"] + [
        f"  {file.path:<{width}}{file.describe()}" for file in rule_files
    ]


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
    rule_files: Sequence[RuleFile] = (),
) -> str:
    """The JSON of ``resolver explain``: schema version, snapshot used, rule files added to the
    built-in table (each with its ``path``, ``kind`` and ``source``), config or error.

    ``decisions`` (every intermediate slot, in order) is there only with ``verbose``.
    """
    converter = get_converter()
    data: dict[str, Any] = {"schema_version": EXPLAIN_SCHEMA_VERSION, "ok": error is None}
    data["rule_files"] = [file.to_dict() for file in rule_files]
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
