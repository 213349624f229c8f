"""The command line's parser: one per command, built only for the command a process runs, with
help written only when it is printed (:class:`~resolver.cli.options.Parser`). Each command's options,
help and code are its module's (:mod:`resolver.cli.commands` names them)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from resolver.cli.commands import COMMANDS, TOP_DESCRIPTION, TOP_EPILOG, command_module
from resolver.cli.options import Parser, removed_flags_given
from resolver.cli.terminal_color import add_color_option


class _VersionAction(argparse.Action):
    """``--version``, reading the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from resolver.cli.env import resolver_version

        print(f"resolver {resolver_version()}")
        parser.exit()


def _given_flags(argv: Sequence[str] | None, command: str) -> set[str]:
    """The names of the options written on the command line (not left at their default)."""
    parser = _parser(command)
    stack = [parser]
    while stack:
        current = stack.pop()
        for action in current._actions:
            action.default = argparse.SUPPRESS
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    given, _ = parser.parse_known_args(argv)
    return set(vars(given))


def _parser(command: str | None = None) -> Parser:
    """The command line's parser; with ``command``, only that command's (what one process needs)."""
    parser = Parser(prog="resolver", about=_top_help)
    parser.add_argument("--version", action=_VersionAction, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        if command is None or name == command:
            module = command_module(name)
            summary: dict[str, Any] = {"help": module.SUMMARY} if command is None else {}  # `resolver --help`
            command_parser = sub.add_parser(name, about=functools.partial(_command_help, module), **summary)
            module.add_options(command_parser)
            add_color_option(command_parser)  # every command's output may be coloured
    return parser


def _top_help() -> tuple[str, str]:
    return TOP_DESCRIPTION, TOP_EPILOG


def _command_help(module: ModuleType) -> tuple[str, str]:
    """A command's description and epilog (its examples), from its module."""
    import textwrap

    examples = "\n".join(f"  {line}" for line in module.EXAMPLES)
    trailer = getattr(module, "TRAILER", "")
    epilog = (trailer + "\n\n" if trailer else "") + f"examples:\n{examples}\n"
    return textwrap.fill(module.DESCRIPTION, 88), epilog


def _command_of(argv: Sequence[str]) -> str | None:
    """The command a command line runs when its first word names one (then only its parser is built)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; an unknown option is reported with the usage of the subcommand it was given to."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(_command_of(words))
    _check_command(parser, words)
    args, unknown = parser.parse_known_args(argv)
    args.argv = argv
    args.build_parser = _parser  # the whole command line's parser, built when asked (resolver completion)
    # the options written on the command line, which win over a --config file's flags
    args.given_flags = _given_flags(argv, args.command) if getattr(args, "config", None) is not None else set()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = subparsers.choices[args.command]
    if removed_flags_given(args):
        return args  # the command reports the removed flag, with its replacement, before anything else
    if args.command == "run" and args.script is None:  # argparse would also call ARGS required
        command.error("the following argument is required: SCRIPT (a Python file, or a module name with -m)")
    if unknown:
        command.error(f"unrecognized arguments: {' '.join(unknown)}{_option_suggestions(command, unknown)}")
    return args


def _check_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown command is a usage error naming the closest commands (argparse only lists them)."""
    words = [word for word in argv if not word.startswith("-")]
    if words and words[0] not in COMMANDS:
        from resolver._engine.suggest import did_you_mean

        hint = did_you_mean(words[0], COMMANDS)
        choices = ", ".join(COMMANDS)
        parser.error(f"unknown command {words[0]!r}" + (f"; {hint}" if hint else "") + f" (choose from {choices})")


def _option_suggestions(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """``; did you mean --strategy?`` for each unknown option that is close to one the parser has."""
    # every spelling of an option (`--num-nodes`, `--num_nodes`) compared as `num-nodes`; the first shown
    shown: dict[str, str] = {}
    for action in parser._actions:
        spellings = [o for o in action.option_strings if o.startswith("--")]
        if action.help is not argparse.SUPPRESS and spellings:
            for spelling in spellings:
                shown.setdefault(spelling[2:].replace("_", "-"), spellings[0])
    from resolver._engine.suggest import closest, wording

    found = []
    for token in unknown:
        if token.startswith("-") and len(token) > 2:
            name = token.split("=", 1)[0]
            close = closest(name.lstrip("-").replace("_", "-"), shown)
            hint = wording(list(dict.fromkeys(shown[c] for c in close)), quote=False)
            if hint:
                found.append(f"{name}: {hint}")
    return "".join(f"\n  = help: {line}" for line in found)
