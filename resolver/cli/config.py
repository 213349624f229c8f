"""``resolver config``: write the flags file that ``--config`` reads (as ``accelerate config`` does), from
the flags on the command line and, on a terminal, one question per flag; resolved before it is written,
so a set that conflicts is refused with the conflict (the format: :mod:`resolver.flagsfile`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from resolver._domain.flags import FLAGS, Flag
from resolver._domain.rule_files import RuleFile, listed_rule_files
from resolver._domain.rule_tables import rule_files_in_use
from resolver._engine.errors import ResolutionError
from resolver.api import builtin_table, load_rules, resolve
from resolver.cli.options import add_flags, cli_value, flag_values
from resolver.cli.shared import EXIT_ERROR, EXIT_OK, EXIT_USAGE, check_removed, environment_for
from resolver.flagsfile import FlagsFile

if TYPE_CHECKING:
    from resolver._domain.config import ResolvedConfig
    from resolver._snapshot.environment import Environment
    from resolver.cli.options import Parser

__all__ = ["add_options", "flags_file_text", "run"]

SUMMARY = "write a flags file for --config, from the flags given or by asking for each (like accelerate config)"
DESCRIPTION = (
    "Write the flags given on the command line as the TOML flags file that --config reads "
    "(resolver explain/run/check --config FILE, resolve(config_file=FILE)). On a terminal, each flag "
    "not given is asked for, with its values and its default (Enter keeps the default, which is not "
    "written); with --no-prompt, or when the input is not a terminal, nothing is asked. The flags are "
    "resolved first, on this machine or the --simulate'd one: a value that does not resolve is asked "
    "again, and a set that conflicts is refused with the conflict, nothing written. FILE - prints the "
    "file instead."
)
EXAMPLES = (
    "resolver config train.toml",
    "resolver config --devices 2 --strategy ddp --precision bf16-mixed train.toml",
    "resolver config --devices 8 --num-nodes 2 --simulate cuda=8,slurm --no-prompt cluster.toml",
    "resolver config --devices 2 --force train.toml",
    "resolver config --accelerator cpu --devices 2 -",
)
TRAILER = (
    "exit codes: 0 written, 1 the flags do not resolve (or FILE exists, or input ended), 2 usage error, "
    "130 interrupted (Ctrl-C); nothing is written unless the exit code is 0."
)
#: The exit status after Ctrl-C, as a shell reports a process that SIGINT ended.
EXIT_INTERRUPTED = 130
_HEADER = (
    "# Flags for `resolver explain|run|check --config FILE` and resolve(config_file=FILE), written by\n"
    '# `resolver config`. Keys are resolve()\'s keyword names; see docs/usage.md, "Flags files".\n'
)


def add_options(config: Parser) -> None:
    """``resolver config``'s options: the flags, ``--rules``, ``--simulate``, ``--force``, ``--no-prompt``, FILE."""
    add_flags(config)
    config.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    config.add_argument(
        "--no-prompt",
        action="store_true",
        help="ask nothing, even on a terminal: write the flags given (at least one)",
    )
    config.add_argument("file", metavar="FILE", help="the flags file to write (- prints it)")


def flags_file_text(flags: Mapping[str, Any], rules: Sequence[str] = ()) -> str:
    """A flags file holding ``flags`` (keyword names of ``resolve()``) and the rule files ``rules`` (paths
    relative to the file's folder), as ``resolver config`` writes it."""
    import tomli_w

    table = {**flags, "rules": list(rules)} if rules else dict(flags)
    return _HEADER + tomli_w.dumps({"flags": table})


def _rules_beside(file: str, rules: Sequence[str] | None) -> list[str]:
    """``--rules``' paths (as typed, from here) relative to the folder of the flags file ``file``, as its
    ``rules`` key holds them (``-``: this folder)."""
    folder = os.path.dirname(os.path.abspath(file)) if file != "-" else os.getcwd()
    return [os.path.relpath(os.path.abspath(path), folder) for path in rules or ()]


def run(args: argparse.Namespace) -> int:
    """Ask (on a terminal), resolve, write; the exit code."""
    to_stdout = args.file == "-"
    if not to_stdout and os.path.lexists(args.file) and not args.force:
        print(
            f"error: {args.file} exists; resolver config does not overwrite it\n"
            "  = help: pass --force to overwrite it, or name another file",
            file=sys.stderr,
        )
        return EXIT_ERROR
    given = _given(args)
    asking = not args.no_prompt and sys.stdin is not None and sys.stdin.isatty()
    if not given and not asking:
        print(
            "error: no flag to write: give the flags (resolver config --devices 2 --strategy ddp FILE), "
            "or run it on a terminal without --no-prompt to be asked for each",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        check_removed(args)
        environment = environment_for(args.simulate, rule_files_in_use(args.rules, spelling="--rules"))
        config = _resolved(given, args, environment)  # the command line's flags alone first
        if asking:
            _ask(given, args, environment)
            config = _resolved(given, args, environment)
    except ResolutionError as error:
        where = "" if args.simulate else " (resolved for this machine: for another, add --simulate, e.g. cuda=8,slurm)"
        print(f"{error.diagnostic()}\nresolver config: {args.file} not written{where}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"\nresolver config: interrupted; {args.file} not written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except EOFError as stop:
        print(f"\nresolver config: {stop}; {args.file} not written", file=sys.stderr)
        return EXIT_ERROR
    text = flags_file_text(given, _rules_beside(args.file, args.rules))
    if to_stdout:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        _write(args.file, text, force=args.force)
    except OSError as exc:
        print(f"error: cannot write {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"resolver config: resolves here to {config.summary()}", file=sys.stderr)
    print(
        f"resolver config: wrote {args.file}; use it with resolver run --config {args.file} SCRIPT",
        file=sys.stderr,
    )
    return EXIT_OK


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The flags written on the command line (those not left at their default), in declaration order."""
    given: dict[str, Any] = {}
    for flag in FLAGS:
        value = getattr(args, flag.name)
        if flag.repeatable:
            if value:
                given[flag.name] = list(value)
        elif value != flag.default:
            given[flag.name] = value
    return given


def _resolved(flags: Mapping[str, Any], args: argparse.Namespace, environment: Environment) -> ResolvedConfig:
    """``flags`` resolved as ``--config FILE`` will read them (their provenance names FILE), with
    ``--rules``' files as the file's ``rules`` key will name them."""
    return resolve(config_file=FlagsFile(args.file, dict(flags), _file_rules(args)), environment=environment)


def _file_rules(args: argparse.Namespace) -> tuple[RuleFile, ...]:
    """``--rules``' files as FILE's ``rules`` key names them (checked: a missing one is an error)."""
    if not args.rules:
        return ()
    where = f"{args.file}: rules (from --rules)"
    return listed_rule_files(_rules_beside(args.file, args.rules), args.file if args.file != "-" else "./-", where)


def _ask(given: dict[str, Any], args: argparse.Namespace, environment: Environment) -> None:
    """One question per flag not given, on stderr, the answers read from stdin, added to ``given``. Each
    answer is resolved with those before it: a value wrong in itself is asked again; one that conflicts
    with the rest may be typed again to keep it (a flag asked later, or --simulate, may settle it)."""
    domains = (load_rules(args.rules) if args.rules else builtin_table()).domains
    out = sys.stderr
    out.write(f"resolver config: the flags of {args.file}; Enter keeps the default shown in [ ], Ctrl-C stops\n")
    for flag in FLAGS:
        if flag.name in given:
            continue
        values = flag_values(flag, domains)
        out.write(f"\n{flag.name}: {flag.help}" + (f"\n  one of: {', '.join(values)}" if values else "") + "\n")
        refused: Any = None
        while True:
            answer = _answer(flag, out)
            if answer is None:
                break
            try:
                if answer != refused:
                    _resolved({**given, flag.name: answer}, args, environment)
            except ResolutionError as error:
                out.write(error.diagnostic() + "\n")
                if not {side.slot for side in error.sides} <= {f"arg.{flag.name}", f"flag.{flag.name}"}:
                    out.write(f"  (type {answer!r} again to keep it: a flag asked later may settle this)\n")
                    refused = answer
                continue
            given[flag.name] = answer
            break
    out.write("\n")


def _answer(flag: Flag, out: TextIO) -> Any:
    """The value typed for ``flag`` (``None``: Enter, the default), asked again until it parses."""
    default = "" if flag.default in (None, ()) else str(flag.default)
    while True:
        out.write(f"{flag.name} [{default or 'not set'}]: ")
        out.flush()
        line = sys.stdin.readline()
        if not line:
            raise EOFError(f"the input ended before {flag.name} was answered")
        text = line.strip()
        if not text:
            return None
        try:
            return cli_value(flag, text)
        except ValueError:
            out.write(f"  {flag.name} takes a whole number, e.g. 2\n")


def _write(path: str, text: str, *, force: bool) -> None:
    """Write ``text`` to ``path``: with ``force`` whole or not at all (over the old file), else only as a
    new file (never over one that appeared since the check)."""
    if not force:
        with open(path, "x", encoding="utf-8") as file:
            file.write(text)
        return
    temporary = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
