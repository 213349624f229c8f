"""The command line's parsers: one per command, built only for the command a process runs, with
help written only when it is printed (see :class:`_Parser`). The commands themselves:
:mod:`resolver.cli`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from resolver.api import builtin_table
from resolver.flags import FLAGS, Flag
from resolver.integers import parse_int


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help is written only when it is printed: the command's description
    and examples (:mod:`resolver.cli_help`) and the option help in ``help_texts`` (a flag's help
    lists the values the loaded rule table accepts). A process that only parses its command line
    never writes any of it."""

    def __init__(
        self,
        *args: Any,
        command: str | None = None,
        formatter_class: type[argparse.HelpFormatter] = argparse.RawDescriptionHelpFormatter,
        **kwargs: Any,
    ) -> None:
        self._formatter_class = formatter_class
        self._writing = False
        super().__init__(*args, formatter_class=self._formatter, **kwargs)  # type: ignore[arg-type,misc]
        #: The command whose description and examples this parser prints (None: ``resolver`` itself).
        self.command = command
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
        from resolver.cli_help import COMMANDS, TOP_DESCRIPTION, TOP_EPILOG

        if self.command is None:
            self.description, self.epilog = TOP_DESCRIPTION, TOP_EPILOG
        else:
            text = COMMANDS[self.command]
            self.description, self.epilog = text.wrapped_description(), text.epilog()
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


class _RuleFilesAction(argparse._AppendAction):
    """``--rules FILE``: appended as usual, and noted on the parser for the help printed after it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        super().__call__(parser, namespace, values, option_string)
        if isinstance(parser, _Parser):
            parser.rule_files.append(values)


def _help_domains(parser: _Parser) -> Mapping[str, Any]:
    """The domains of the table the command would load: the built-in one plus the --rules files
    given before --help (a file that does not load leaves the built-in values; running says why)."""
    if parser.rule_files:
        from resolver.api import load_rules
        from resolver.errors import ResolutionError, RuleTableError

        try:
            return load_rules(parser.rule_files).domains
        except (OSError, RuleTableError, ResolutionError):
            pass
    return builtin_table().domains


def _flag_help(flag: Flag, parser: _Parser) -> str:
    """A flag's help: its declaration's text, the values its domain accepts in the loaded table
    (with the --rules files given before --help), and its default."""
    text = flag.help
    if flag.listed_domains:
        domains = _help_domains(parser)
        values = sorted({value for name in flag.listed_domains for value in domains.get(name, ())})
        text += f"; {'any' if flag.repeatable else 'one'} of: {', '.join(values)}"
    if flag.default not in (None, ()):
        text += f" (default: {flag.default})"
    if flag.variable is not None:
        text += f" [env: {flag.variable}]"
    return text.replace("%", "%%")


def _simulate_help() -> str:
    from resolver.simulate import SIMULATE_HELP

    return "resolve for a machine you are not on instead of probing this one: " + SIMULATE_HELP


def _add_flags(parser: _Parser, *, can_simulate: bool = True) -> None:
    flags = parser.add_argument_group("flags (as for resolver.resolve; --num_nodes spellings work too)")
    for flag in FLAGS:  # declared once, in resolver/flags.py
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
        help="an extra rule file (or folder) on top of the built-in table (repeatable)",
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


# --- `resolver run`: each rank's output (runtime/launchers/rank_output.py does the work) ---


def _local_ranks(text: str) -> tuple[int, ...]:
    """``--local-ranks-filter 0,3`` (torchrun's spelling): local rank numbers, separated by commas."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(part.isascii() and part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of local rank numbers: expected numbers separated by commas, like 0,3"
        )
    return tuple(sorted({int(part) for part in parts}))


def _tee(text: str) -> int:
    """``--tee N`` (torchrun's values): 0 none, 1 stdout, 2 stderr, 3 both."""
    if text.strip() not in ("0", "1", "2", "3"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a stream selector: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)"
        )
    return int(text)


def _add_rank_output_options(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("rank output (every line is shown whole, prefixed with its rank: [rank 1]: ...)")
    output.add_argument(
        "--log-dir",
        "--log_dir",
        metavar="DIR",
        default=None,
        help="also write each rank's output to DIR/rank_<N>.log (created; files are overwritten)",
    )
    output.add_argument(
        "-t",
        "--tee",
        metavar="STREAMS",
        type=_tee,
        default=None,
        help="streams that go to the log files as well as the console: 0 none, 1 stdout, 2 stderr, "
        "3 both (default: 3 with --log-dir; without --log-dir, a new folder is made and printed)",
    )
    output.add_argument(
        "--local-ranks-filter",
        "--local_ranks_filter",
        metavar="RANKS",
        type=_local_ranks,
        default=None,
        help="show only these local ranks on the console, e.g. 0,3 (the log files get every rank)",
    )


class _VersionAction(argparse.Action):
    """``--version``, reading the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from resolver.envreport import resolver_version

        print(f"resolver {resolver_version()}")
        parser.exit()


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="read the flags from this TOML file ([flags] table, as in a golden scenario); "
        "a flag given on the command line wins over the file",
    )


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


def _explain_options(explain: _Parser) -> None:
    _add_flags(explain)
    _add_config(explain)
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


def _run_options(run: _Parser) -> None:
    _add_flags(run, can_simulate=False)
    _add_config(run)
    run.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop every rank (and fail) if the run takes longer than this",
    )
    _add_rank_output_options(run)
    preemption = run.add_argument_group("pre-emption (docs/runtime.md, Surviving failures)")
    preemption.add_argument(
        "--preemption-signal",
        metavar="SIGNAL",
        default=None,
        help="the signal that announces pre-emption, e.g. SIGUSR1 (sbatch --signal=USR1@90): the ranks stop at "
        "the same strategy.preempted() check, the script saves and returns, and the run exits with status 75",
    )
    preemption.add_argument(
        "--requeue",
        action="store_true",
        help="with --preemption-signal, in a SLURM job: requeue the job (scontrol requeue) after the ranks saved",
    )
    from resolver.cli_torchrun import add_torchrun_options

    add_torchrun_options(run)
    run.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="run SCRIPT as a module, as `python -m SCRIPT` would (SCRIPT is then a module name)",
    )
    run.add_argument("script", metavar="SCRIPT", nargs="?", help="the Python script to run (or, with -m, the module)")
    run.add_argument(
        "script_args",
        metavar="ARGS",
        nargs=argparse.REMAINDER,
        help="arguments for the script, passed through untouched (everything after SCRIPT, --help too)",
    )


def _check_options(check: _Parser) -> None:
    _add_flags(check, can_simulate=False)
    _add_config(check)
    check.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the longest any step may take before the check names who it waits for (default: 10)",
    )
    check.add_argument("--format", choices=("text", "json"), default="text", help="text (default), or json")


def _env_options(env: _Parser) -> None:
    env.add_argument("--format", choices=("text", "json"), default="text", help="text to paste (default), or json")


def _golden_options(golden: _Parser) -> None:
    golden.add_argument("paths", nargs="+", help="scenario files or folders of them")
    golden.add_argument("--update", action="store_true", help="rewrite each [expect] from the current rules")
    golden.add_argument("--rules", action="append", default=[], metavar="FILE", help="an extra rule file (repeatable)")


def _rules_options(rules: _Parser) -> None:
    rules.add_argument("--rules", action="append", default=[], metavar="FILE", help="an extra rule file (repeatable)")
    rules.add_argument("--output", metavar="FILE", help="write here instead of standard output")
    rules.add_argument("--check", action="store_true", help="exit 1 if --output differs from what would be written")


#: Each command's options, in the order ``resolver --help`` lists the commands (their help: cli_help.py).
_OPTIONS: dict[str, Callable[[_Parser], None]] = {
    "explain": _explain_options,
    "run": _run_options,
    "check": _check_options,
    "env": _env_options,
    "golden": _golden_options,
    "rules": _rules_options,
}


def _parser(command: str | None = None) -> _Parser:
    """The command line's parser; with ``command``, only that command's (what one process needs)."""
    parser = _Parser(prog="resolver")
    parser.add_argument("--version", action=_VersionAction, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    summaries: dict[str, Any] = {}
    if command is None:  # every command is listed by `resolver --help`
        from resolver.cli_help import COMMANDS

        summaries = {name: {"help": text.summary} for name, text in COMMANDS.items()}
    for name, add_options in _OPTIONS.items():
        if command is None or name == command:
            add_options(sub.add_parser(name, command=name, **summaries.get(name, {})))
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command a command line runs when its first word names one (then only its parser is built)."""
    return argv[0] if argv and argv[0] in _OPTIONS else None


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; an unknown option is reported with the usage of the subcommand it was given to."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(_command_of(words))
    _check_command(parser, words)
    args, unknown = parser.parse_known_args(argv)
    args.argv = argv
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
    if words and words[0] not in _OPTIONS:
        from resolver.suggest import did_you_mean

        hint = did_you_mean(words[0], _OPTIONS)
        choices = ", ".join(_OPTIONS)
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
    from resolver.suggest import closest, wording

    found = []
    for token in unknown:
        if token.startswith("-") and len(token) > 2:
            name = token.split("=", 1)[0]
            close = closest(name.lstrip("-").replace("_", "-"), shown)
            hint = wording(list(dict.fromkeys(shown[c] for c in close)), quote=False)
            if hint:
                found.append(f"{name}: {hint}")
    return "".join(f"\n  = help: {line}" for line in found)
