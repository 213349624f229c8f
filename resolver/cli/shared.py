"""What the commands share: the exit codes, and the command line's flags resolved the way ``resolve()``
takes them (over a ``--config`` flags file, on the probed or ``--simulate``d machine)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from resolver._domain.flags import FLAGS, collect_flags
from resolver._snapshot.environment import Environment
from resolver.api import builtin_table, load_rules, removed_flag_error, resolve
from resolver.cli.options import removed_flags_given

if TYPE_CHECKING:
    from resolver._domain.config import ResolvedConfig

__all__ = [
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "as_typed",
    "check_removed",
    "environment_for",
    "resolve_args",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

EXIT_CODES = "exit codes: 0 resolved, 1 resolution error (conflict or invalid input), 2 usage error."


def resolve_args(args: argparse.Namespace, **keywords: Any) -> ResolvedConfig:
    """``resolve()`` with the command line's flags, over the flags file of ``--config`` if any."""
    flags = _flags(args)
    if args.config is None:
        return resolve(**flags, **keywords)
    from resolver.flagsfile import load_flags_file

    given = args.given_flags & set(flags)
    file = load_flags_file(args.config).without(given)
    return resolve(**{k: v for k, v in flags.items() if k in given}, config_file=file, **keywords)


def environment_for(spec: str | None, rules: list[str]) -> Environment:
    """The simulated machine, or the real one probed for every variable the rules (with ``rules``) read."""
    if spec is not None:
        from resolver.cli.simulate import simulate

        return simulate(spec)
    return Environment.probe(table=load_rules(rules) if rules else builtin_table())


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
