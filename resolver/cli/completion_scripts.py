"""The completion scripts ``resolver completion`` prints, written from a description of the commands
(:class:`Command`: what :mod:`resolver.cli.completion` reads from the parser). Each script is static
shell code: a Tab runs no Python.

- bash: a function for ``complete -F``; a value that is a path (and anything it offers nothing for)
  falls back to file names (``complete -o default``); after ``resolver run SCRIPT`` only file names.
- zsh: a native ``_arguments`` function with each option's help, for ``compdef`` (or ``fpath``).
- fish: ``complete`` lines, with each option's help.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import attrs

__all__ = ["SHELLS", "Command", "Option", "Positional", "script"]

SHELLS = ("bash", "zsh", "fish")
#: What a value must look like to be offered (shell-safe in all three: domain values are like this).
_PLAIN = re.compile(r"^[\w.+-]+$")


@attrs.frozen
class Option:
    """An option: its spellings (``--num-nodes``, ``--num_nodes``), whether a value follows, the values
    it takes (empty: any), whether the value is a path, whether it may be given again, its help."""

    spellings: tuple[str, ...]
    takes_value: bool
    values: tuple[str, ...] = ()
    paths: bool = False
    repeatable: bool = False
    help: str = ""

    @property
    def offered(self) -> tuple[str, ...]:
        """The spellings a completion offers: all but the ``_`` twin of a ``-`` spelling."""
        dashed = {s.replace("_", "-") for s in self.spellings if "_" not in s}
        return tuple(s for s in self.spellings if "_" not in s or s.replace("_", "-") not in dashed)


@attrs.frozen
class Positional:
    """A positional argument: the values it takes (empty: any), whether it is a path, whether it takes
    the rest of the line (``resolver run SCRIPT ARGS...``: everything after it is the script's)."""

    values: tuple[str, ...] = ()
    paths: bool = False
    rest: bool = False


@attrs.frozen
class Command:
    name: str
    summary: str
    options: tuple[Option, ...]
    positionals: tuple[Positional, ...]


def script(shell: str, commands: Sequence[Command], version: str) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    writers: dict[str, Callable[[Sequence[Command], str], str]] = {"bash": _bash, "zsh": _zsh, "fish": _fish}
    return writers[shell](commands, version)


def _plain(values: Sequence[str]) -> list[str]:
    return [value for value in values if _PLAIN.match(value)]


# --- bash ---------------------------------------------------------------------------------------


def _bash(commands: Sequence[Command], version: str) -> str:
    names = " ".join(c.name for c in commands)
    lines = [
        f"# bash completion for resolver {version}, written by `resolver completion bash`.",
        '# Load it in ~/.bashrc: eval "$(resolver completion bash)"; or save it as',
        "# ~/.local/share/bash-completion/completions/resolver. Print it again after an upgrade.",
        "",
        "_resolver_complete() {",
        '    local cur=${COMP_WORDS[COMP_CWORD]} prev="" command="" at=0 i',
        "    (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}",
        '    if [[ $cur == "=" ]]; then cur=""; elif [[ $prev == "=" ]]; then prev=${COMP_WORDS[COMP_CWORD-2]}; fi',
        "    for (( i = 1; i < COMP_CWORD; i++ )); do",
        "        case ${COMP_WORDS[i]} in -*) ;; *) command=${COMP_WORDS[i]}; at=$i; break ;; esac",
        "    done",
        '    case "$command" in',
        f'        "") COMPREPLY=($(compgen -W "{names} -h --help --version" -- "$cur")) ;;',
        *(f'        {c.name}) _resolver_complete_{c.name} "$cur" "$prev" "$at" ;;' for c in commands),
        "    esac",
        "    return 0",
        "}",
    ]
    for command in commands:
        lines += _bash_command(command)
    lines += ["complete -o default -F _resolver_complete resolver", ""]
    return "\n".join(lines)


def _bash_command(command: Command) -> list[str]:
    valued = [o for o in command.options if o.takes_value]
    lines = ["", f"_resolver_complete_{command.name}() {{", "    local cur=$1 prev=$2 at=$3 n=0 skip=0 i word"]
    if valued:
        lines.append("    case $prev in")
        for option in valued:
            values = " ".join(_plain(option.values))
            what = f'COMPREPLY=($(compgen -W "{values}" -- "$cur"))' if values else "COMPREPLY=()"
            lines.append(f"        {'|'.join(option.spellings)}) {what}; return ;;")
        lines.append("    esac")
    # count the positional words before the cursor (an option's value is not one)
    spellings = "|".join(s for o in valued for s in o.spellings)
    lines += [
        "    for (( i = at + 1; i < COMP_CWORD; i++ )); do",
        "        word=${COMP_WORDS[i]}",
        '        if [[ $word == "=" ]]; then skip=1; continue; fi',
        "        if (( skip )); then skip=0; continue; fi",
        f"        case $word in {spellings + ') skip=1 ;; ' if spellings else ''}-*) ;; *) (( n++ )) ;; esac",
        "    done",
    ]
    for index, positional in enumerate(command.positionals):
        if positional.rest:  # everything after the words before it is not resolver's: file names
            lines.append(f"    (( n >= {index} )) && return")
    offered = " ".join(s for o in command.options for s in o.offered)
    lines.append(f'    if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "{offered}" -- "$cur")); return; fi')
    for index, positional in enumerate(command.positionals):
        values = " ".join(_plain(positional.values))
        if values:
            lines.append(f'    (( n == {index} )) && COMPREPLY=($(compgen -W "{values}" -- "$cur"))')
    lines.append("}")
    return lines


# --- zsh ----------------------------------------------------------------------------------------


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_help(text: str) -> str:
    return text.replace("[", "(").replace("]", ")").replace("\\", "/")


def _zsh(commands: Sequence[Command], version: str) -> str:
    lines = [
        "#compdef resolver",
        f"# zsh completion for resolver {version}, written by `resolver completion zsh`.",
        '# Load it in ~/.zshrc, after compinit: eval "$(resolver completion zsh)"; or save it as _resolver',
        "# in a folder of $fpath. Print it again after an upgrade.",
        "",
        "_resolver() {",
        "    local curcontext=$curcontext state line ret=1",
        "    _arguments -C \\",
        "        '(- *)'{-h,--help}'[show the help and exit]' \\",
        "        '(- *)--version[print the installed version and exit]' \\",
        "        '1:command:->command' \\",
        "        '*:: :->argument' && ret=0",
        "    case $state in",
        "        command)",
        "            local -a commands",
        "            commands=(",
        *(f"                {_zsh_quote(c.name + ':' + c.summary)}" for c in commands),
        "            )",
        "            _describe -t commands 'resolver command' commands && ret=0 ;;",
        "        argument)",
        "            curcontext=${curcontext%:*:*}:resolver-$words[1]:",
        "            case $words[1] in",
    ]
    for command in commands:
        specs = [_zsh_option(o) for o in command.options] + _zsh_positionals(command.positionals)
        lines.append(f"                {command.name}) _arguments -C \\")
        lines += [f"                    {spec} \\" for spec in specs]
        lines.append("                    && ret=0 ;;")
    lines += [
        "            esac ;;",
        "    esac",
        "    return ret",
        "}",
        "",
        'if [[ $zsh_eval_context[-1] == loadautofunc ]]; then _resolver "$@"; else compdef _resolver resolver; fi',
        "",
    ]
    return "\n".join(lines)


def _zsh_option(option: Option) -> str:
    help_text = f"[{_zsh_help(option.help)}]"
    if not option.takes_value:
        action = ""
    elif option.values:
        action = f":value:({' '.join(_plain(option.values))})"
    elif option.paths:
        action = ":file:_files"
    else:
        action = ":value: "
    exclusive = "" if option.repeatable else "(" + " ".join(option.spellings) + ")"
    star = "*" if option.repeatable else ""
    if len(option.spellings) == 1:
        return _zsh_quote(f"{exclusive}{star}{option.spellings[0]}{help_text}{action}")
    spelled = "{" + ",".join(option.spellings) + "}"
    return _zsh_quote(f"{exclusive}{star}") + spelled + _zsh_quote(f"{help_text}{action}")


def _zsh_positionals(positionals: Sequence[Positional]) -> list[str]:
    specs = []
    for index, positional in enumerate(positionals, 1):
        action = f"({' '.join(_plain(positional.values))})" if positional.values else "_files"
        if positional.rest:
            specs.append(_zsh_quote("*::argument:_files"))
        elif positional is positionals[-1] and not positional.values and len(positionals) == 1:
            specs.append(_zsh_quote(f"*:argument:{action}"))
        else:
            specs.append(_zsh_quote(f"{index}:argument:{action}"))
    return specs


# --- fish ---------------------------------------------------------------------------------------


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish(commands: Sequence[Command], version: str) -> str:
    names = " ".join(c.name for c in commands)
    lines = [
        f"# fish completion for resolver {version}, written by `resolver completion fish`.",
        "# Save it: resolver completion fish > ~/.config/fish/completions/resolver.fish",
        "# (or load it now: resolver completion fish | source). Print it again after an upgrade.",
        "",
        "complete -c resolver -e",
        "complete -c resolver -f",
        f"complete -c resolver -n 'not __fish_seen_subcommand_from {names}' -s h -l help -d 'show the help and exit'",
        f"complete -c resolver -n 'not __fish_seen_subcommand_from {names}' -l version "
        "-d 'print the installed version and exit'",
    ]
    for command in commands:
        lines.append(
            f"complete -c resolver -n 'not __fish_seen_subcommand_from {names}' -a {command.name} "
            f"-d {_fish_quote(command.summary)}"
        )
    for command in commands:
        seen = f"-n '__fish_seen_subcommand_from {command.name}'"
        for option in command.options:
            names_of = " ".join(
                f"-l {s[2:]}" if s.startswith("--") else f"-s {s[1:]}" for s in option.offered if len(s) > 1
            )
            if not option.takes_value:
                kind = ""
            elif option.values:
                kind = f" -x -a {_fish_quote(' '.join(_plain(option.values)))}"
            elif option.paths:
                kind = " -r -F"
            else:
                kind = " -x"
            lines.append(f"complete -c resolver {seen} {names_of}{kind} -d {_fish_quote(option.help)}")
        for positional in command.positionals:
            if positional.values:
                lines.append(f"complete -c resolver {seen} -a {_fish_quote(' '.join(_plain(positional.values)))}")
            elif positional.paths or positional.rest:
                lines.append(f"complete -c resolver {seen} -F")
    lines.append("")
    return "\n".join(lines)
