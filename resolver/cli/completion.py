"""``resolver completion bash|zsh|fish``: print a shell completion script for ``resolver``, written from
the command line's own parser (every command, option, choice, and each flag's values in the built-in
rule table), so it is as current as the installed version. The script is static: completing calls no
Python (the scripts themselves: :mod:`resolver.cli.completion_scripts`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from resolver.cli.completion_scripts import SHELLS, Command, Option, Positional, script
from resolver.cli.shared import EXIT_OK

if TYPE_CHECKING:
    from resolver.cli.options import Parser

__all__ = ["add_options", "commands_of", "run"]

SUMMARY = "print a completion script for bash, zsh or fish (commands, options, each flag's values)"
DESCRIPTION = (
    "Print a shell completion script for resolver: its commands, each command's options, the choices "
    "of an option and the values each flag takes in the built-in rule table, and paths where a file "
    "is expected. Load it in your shell's start-up file (the script's first lines say how); print it "
    "again after upgrading."
)
EXAMPLES = (
    'resolver completion bash  # in ~/.bashrc: eval "$(resolver completion bash)"',
    'resolver completion zsh  # in ~/.zshrc, after compinit: eval "$(resolver completion zsh)"',
    "resolver completion fish > ~/.config/fish/completions/resolver.fish",
)

#: Metavars of the values that are paths: completed with file names.
_PATHS = ("FILE", "DIR", "SCRIPT", "SPEC", "PATHS", "paths")


def add_options(completion: Parser) -> None:
    """``resolver completion``'s argument: the shell."""
    completion.add_argument("shell", metavar="SHELL", choices=SHELLS, help="the shell: " + ", ".join(SHELLS))


def run(args: argparse.Namespace) -> int:
    """Print the script for ``args.shell``."""
    from resolver._version import __version__

    sys.stdout.write(script(args.shell, commands_of(args.build_parser()), __version__))
    return EXIT_OK


def commands_of(parser: argparse.ArgumentParser) -> list[Command]:
    """Every command of ``parser`` (the whole command line's), with what completion needs of it."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    return [_command(name, summaries.get(name, ""), command) for name, command in sub.choices.items()]


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> Command:
    from resolver._domain.flags import FLAGS
    from resolver.api import builtin_table
    from resolver.cli.options import flag_values

    domains = builtin_table().domains
    flags = {flag.name: flag for flag in FLAGS}
    texts: dict[argparse.Action, Callable[[], str]] = getattr(parser, "help_texts", {})
    options, positionals = [], []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        help_text = texts[action]() if action in texts else action.help or ""
        if not action.option_strings:
            positionals.append(
                Positional(
                    values=tuple(action.choices or ()),
                    paths=str(action.metavar or action.dest) in _PATHS,
                    rest=action.nargs == argparse.REMAINDER,
                )
            )
            continue
        takes_value = action.nargs != 0
        values = tuple(action.choices or ())
        if not values and action.dest in flags:
            values = tuple(flag_values(flags[action.dest], domains))
        options.append(
            Option(
                spellings=tuple(action.option_strings),
                takes_value=takes_value,
                values=tuple(str(v) for v in values),
                paths=takes_value and not values and str(action.metavar) in _PATHS,
                repeatable=isinstance(action, argparse._AppendAction),
                help=_short(help_text),
            )
        )
    return Command(name, _short(summary), tuple(options), tuple(positionals))


def _short(text: str) -> str:
    """The first clause of a help text, for a completion menu."""
    for end in ("; ", " (", ": "):
        text = text.split(end, 1)[0]
    return text if len(text) <= 72 else text[:69] + "..."
