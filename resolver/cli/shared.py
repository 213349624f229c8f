"""What the commands share: the exit codes, and the command line's flags resolved the way ``resolve()``
takes them (over a ``--config`` flags file, on the probed or ``--simulate``d machine)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from resolver._domain.flags import FLAGS, collect_flags
from resolver._domain.rule_tables import rule_files_in_use, table_in_use
from resolver._snapshot.environment import Environment
from resolver.api import builtin_table, removed_flag_error, resolve
from resolver.cli.options import removed_flags_given

if TYPE_CHECKING:
    from resolver._domain.config import ResolvedConfig
    from resolver._domain.rule_files import RuleFile
    from resolver.flagsfile import FlagsFile

__all__ = [
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "as_typed",
    "check_removed",
    "environment_for",
    "resolve_args",
    "rule_files_for",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

EXIT_CODES = "exit codes: 0 resolved, 1 resolution error (conflict or invalid input), 2 usage error."


def resolve_args(args: argparse.Namespace, **keywords: Any) -> ResolvedConfig:
    """``resolve()`` with the command line's flags, over the flags file of ``--config`` if any."""
    flags = _flags(args)
    loaded = _flags_file(args)
    if loaded is None:
        return resolve(**flags, **keywords)
    given = args.given_flags & set(flags)
    file = loaded.without(given)
    return resolve(**{k: v for k, v in flags.items() if k in given}, config_file=file, **keywords)


def rule_files_for(args: argparse.Namespace) -> tuple[RuleFile, ...]:
    """The rule files the command's resolve adds to the built-in table, each with what named it:
    ``RESOLVER_RULES``'s, the ``--config`` flags file's ``rules``, then ``--rules``."""
    loaded = _flags_file(args)
    return rule_files_in_use(args.rules, loaded.rules if loaded is not None else (), spelling="--rules")


def _flags_file(args: argparse.Namespace) -> FlagsFile | None:
    """The ``--config`` flags file, read once per command (``--config <(make-flags)`` can be read once)."""
    if args.config is None:
        return None
    loaded: FlagsFile | None = getattr(args, "_loaded_config", None)
    if loaded is None:
        from resolver.flagsfile import load_flags_file

        loaded = args._loaded_config = load_flags_file(args.config)
    return loaded


def environment_for(spec: str | None, rules: Sequence[RuleFile]) -> Environment:
    """The simulated machine, or the real one probed for every variable the rules (with ``rules``,
    from :func:`rule_files_for`) read."""
    if spec is not None:
        from resolver.cli.simulate import simulate

        return simulate(spec)
    return Environment.probe(table=table_in_use(rules))


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags = collect_flags(vars(args))
    flags.update({flag.name: tuple(flags[flag.name]) for flag in FLAGS if flag.repeatable})
    return flags


def check_removed(args: argparse.Namespace) -> None:
    """A removed flag on the command line (either spelling, with or without a value) is an error
    with the replacement, as ``resolve()`` gives it."""
    for name, spelling, value in removed_flags_given(args):
        error = removed_flag_error(builtin_table(), name, value, cli=True, spelling=spelling)
        if error is not None:
            raise error


def as_typed(source: str) -> str:
    """Where a value came from, as the user typed it: a flag the runtime names as ``resolve()`` takes it
    (``master_port``) is the command line's option (``--master-port``) here; any other source as it is."""
    for flag in FLAGS:
        if flag.name == source:
            return flag.cli_spellings()[0]
    return source
