"""The options more than one command has (the flags, ``--rules``, ``--simulate``, ``--config``),
and the parser whose help is written only when it is printed (:class:`Parser`). Each command adds
its own options in its module (:mod:`resolver.cli.commands` names them)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping
from typing import Any

from resolver._domain.flags import FLAGS, Flag
from resolver._domain.timeouts import parse_timeout
from resolver._engine.integers import parse_int
from resolver.api import builtin_table

__all__ = ["Parser", "add_config", "add_flags", "cli_value", "flag_values", "removed_flags_given", "timeout_option"]


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help is written only when it is printed: the description and epilog
    (``about``: the command's help, from its module) and the option help in ``help_texts`` (a flag's
    help lists the values the loaded rule table accepts). A process that only parses its command
    line never writes any of it."""

    def __init__(
        self,
        *args: Any,
        about: Callable[[], tuple[str, str]] | None = None,
        formatter_class: type[argparse.HelpFormatter] = argparse.RawDescriptionHelpFormatter,
        **kwargs: Any,
    ) -> None:
        self._formatter_class = formatter_class
        self._writing = False
        super().__init__(*args, formatter_class=self._formatter, **kwargs)  # type: ignore[arg-type,misc]
        #: Writes this parser's description and epilog when its help is printed.
        self.about = about
        #: Options whose help is written when help is printed.
        self.help_texts: dict[argparse.Action, Callable[[], str]] = {}
        #: The --rules files read so far: help printed after them lists the values they add.
        self.rule_files: list[str] = []

    def _formatter(self, prog: str, **options: Any) -> argparse.HelpFormatter:
        """argparse makes a formatter for every option it adds, to check it; only one that writes
        text measures the terminal (measuring imports shutil, a few milliseconds)."""
        if not self._writing:
            options.setdefault("width", 80)
        return self._formatter_class(prog, **options)

    def format_usage(self) -> str:
        self._writing = True
        try:
            return super().format_usage()
        finally:
            self._writing = False

    def format_help(self) -> str:
        if self.about is not None:
            self.description, self.epilog = self.about()
        for action, write in self.help_texts.items():
            action.help = write()
        self.help_texts.clear()
        self._writing = True
        try:
            return super().format_help()
        finally:
            self._writing = False


def _devices(text: str) -> int | str:
    number = parse_int(text)
    return text.strip() if number is None else number


_CLI_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "devices": _devices}


def cli_value(flag: Flag, text: str) -> Any:
    """A flag's value from text, as its command-line option reads it (a ``ValueError`` when it cannot);
    a repeatable flag takes its values separated by commas."""
    if flag.repeatable:
        return [part.strip() for part in text.split(",") if part.strip()]
    return text if flag.cli_type is None else _CLI_TYPES[flag.cli_type](text)


def flag_values(flag: Flag, domains: Mapping[str, Any]) -> list[str]:
    """The values a flag's help lists: those of its domains in a table's ``domains``."""
    return sorted({value for name in flag.listed_domains for value in domains.get(name, ())})


class _RuleFilesAction(argparse._AppendAction):
    """``--rules FILE``: appended as usual, and noted on the parser for the help printed after it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        super().__call__(parser, namespace, values, option_string)
        if isinstance(parser, Parser):
            parser.rule_files.append(values)


def _help_domains(parser: Parser) -> Mapping[str, Any]:
    """The domains of the table the command would load: the built-in one plus the files of
    RESOLVER_RULES and the --rules files given before --help (a file that does not load leaves the
    built-in values; running says why)."""
    from resolver._engine.errors import ResolutionError, RuleTableError

    try:
        from resolver._domain.rule_tables import rule_files_in_use, table_in_use

        return table_in_use(rule_files_in_use(parser.rule_files, spelling="--rules")).domains
    except (OSError, RuleTableError, ResolutionError):
        return builtin_table().domains


def _flag_help(flag: Flag, parser: Parser) -> str:
    """A flag's help: its declaration's text, the values its domain accepts in the loaded table
    (with the --rules files given before --help), and its default."""
    text = flag.help
    if flag.listed_domains:
        values = flag_values(flag, _help_domains(parser))
        text += f"; {'any' if flag.repeatable else 'one'} of: {', '.join(values)}"
    if flag.default not in (None, ()):
        text += f" (default: {flag.default})"
    if flag.variable is not None:
        text += f" [env: {flag.variable}]"
    return text.replace("%", "%%")


def _simulate_help() -> str:
    from resolver.cli.simulate import SIMULATE_HELP

    return "resolve for a machine you are not on instead of probing this one: " + SIMULATE_HELP


def add_flags(parser: Parser, *, can_simulate: bool = True) -> None:
    flags = parser.add_argument_group("flags (as for resolver.resolve; --num_nodes spellings work too)")
    for flag in FLAGS:  # declared once, in resolver/_domain/flags.py
        options: dict[str, Any] = {"dest": flag.name}
        if flag.repeatable:
            options.update(action="append", default=[], metavar="NAME")
        else:
            options["default"] = flag.default
            if flag.cli_type is not None:
                options["type"] = _CLI_TYPES[flag.cli_type]
        action = flags.add_argument(*flag.cli_spellings(), **options)
        parser.help_texts[action] = functools.partial(_flag_help, flag, parser)
    where = parser.add_argument_group("rules and machine")
    where.add_argument(
        "--rules",
        action=_RuleFilesAction,
        default=[],
        metavar="FILE",
        help="an extra rule file (or folder) on top of the built-in table and those of RESOLVER_RULES (repeatable)",
    )
    if can_simulate:
        parser.help_texts[where.add_argument("--simulate", metavar="SPEC")] = _simulate_help
    for name in builtin_table().removed:  # removed flags are data (rules/removed.toml)
        spellings = dict.fromkeys((f"--{name.replace('_', '-')}", f"--{name}"))  # both, as for every flag
        parser.add_argument(
            *spellings, dest=f"removed_{name}", action=_RemovedFlag, nargs="?", default=None, help=argparse.SUPPRESS
        )


class _RemovedFlag(argparse.Action):
    """A removed flag, with or without a value: keeps the spelling written and the value (or
    ``NO_VALUE``), so that the command reports it with its migration text (``removed_flag_error``)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        from resolver.api import NO_VALUE

        setattr(namespace, self.dest, (option, NO_VALUE if values is None else values))


def removed_flags_given(args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """The removed flags on the command line: ``(flag, spelling, value)`` each, in the table's order."""
    found = []
    for name in builtin_table().removed:
        given = getattr(args, f"removed_{name}", None)
        if given is not None:
            found.append((name, given[0], given[1]))
    return found


def add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="read the flags from this TOML file ([flags] table, as in a golden scenario); "
        "a flag given on the command line wins over the file",
    )


def timeout_option(unset: str) -> Callable[[str], float]:
    """The type of a ``--timeout`` option: seconds in the range every timeout has
    (:mod:`resolver._domain.timeouts`), else a usage error that states it; ``unset`` says what leaving
    the option out means."""

    def seconds(text: str) -> float:
        try:
            return parse_timeout(text, repr(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc} ({unset})") from None

    return seconds
