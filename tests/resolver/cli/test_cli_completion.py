"""`resolver completion bash|zsh|fish`: the script each shell loads completes the commands, the options,
their choices and each flag's values (issue 39, point 14b). Each script runs in its real shell: bash's
completion function as `complete -F` calls it, fish's `complete -C`, zsh's Tab on a terminal; a shell
that is not installed is skipped, or fails under CI (``RESOLVER_REQUIRE_SHELLS=1``, set by ``.ci/run``,
which installs them)."""

from __future__ import annotations

import functools
import os
import pty
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from resolver.api import builtin_table
from tests.support.cli_support import resolver_command, run_resolver

STRATEGIES = sorted(builtin_table().domains["strategy_flag"])
REQUIRED = os.environ.get("RESOLVER_REQUIRE_SHELLS") == "1"


def _needs(shell: str) -> Callable[[Any], Any]:
    """Skip a test when ``shell`` is missing; fail it instead where CI requires every shell."""
    if shutil.which(shell) is not None or not REQUIRED:
        return pytest.mark.skipif(shutil.which(shell) is None, reason=f"{shell} is not installed")

    def failing(test: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(test)
        def missing(*args: Any, **kwargs: Any) -> None:
            pytest.fail(f"RESOLVER_REQUIRE_SHELLS=1 but {shell} is not installed (apt-get install {shell})")

        return missing

    return failing


needs = {shell: _needs(shell) for shell in ("bash", "zsh", "fish")}


def shell_environment() -> dict[str, str]:
    """This environment, with the installed `resolver` first on PATH (the scripts call nothing else)."""
    return {**os.environ, "PATH": os.pathsep.join([str(resolver_command().parent), os.environ["PATH"]])}


def bash_completions(*words: str) -> list[str]:
    """What bash offers for a line of ``words`` (the last is the word at the cursor), as Tab gets it."""
    quoted = " ".join(f"'{word}'" for word in words)
    program = (
        'source <(resolver completion bash) && COMP_WORDS=(resolver ' + quoted + ') && COMP_CWORD=' + str(len(words))
        + ' && _resolver_complete resolver && printf "%s\\n" "${COMPREPLY[@]}"'
    )  # fmt: skip
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, env=shell_environment(), timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@needs["bash"]
@pytest.mark.parametrize(
    ("words", "offered"),
    [
        (("ex",), ["explain"]),
        (
            ("",),
            ["explain", "run", "check", "config", "env", "golden", "rules", "completion", "-h", "--help", "--version"],
        ),  # fmt: skip
        (("explain", "--str"), ["--strategy"]),
        (("explain", "--strategy", "ddp_sp"), [s for s in STRATEGIES if s.startswith("ddp_sp")]),
        (("run", "--accelerator", ""), ["auto", "cpu", "cuda", "gpu", "mps", "tpu", "xla"]),
        (("explain", "--format", "j"), ["json"]),
        (("explain", "--color", "=", "al"), ["always"]),  # --color=al: bash splits at "="
        (("check", "--num-no"), ["--num-nodes"]),  # the `_` spelling is accepted, not offered twice
        (("completion", ""), ["bash", "zsh", "fish"]),
        (("run", "--devices", "2", "train.py", "--st"), []),  # after SCRIPT, the script's own: file names
        (("config", "--devices", "2", ""), []),  # FILE: file names
    ],
)
def test_bash_completes_commands_options_and_values(words: tuple[str, ...], offered: list[str]) -> None:
    assert bash_completions(*words) == offered


@needs["bash"]
def test_bash_falls_back_to_file_names_where_it_offers_nothing() -> None:
    done = subprocess.run(
        ["bash", "-c", "source <(resolver completion bash) && complete -p resolver"],
        capture_output=True, text=True, env=shell_environment(), timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == "complete -o default -F _resolver_complete resolver"


@needs["fish"]
def test_fish_completes_with_each_ones_help() -> None:
    lines = ("resolver ex", "resolver explain --str", "resolver run --precision bf16-", "resolver completion ")
    program = "resolver completion fish | source; " + "; ".join(f"complete -C '{line}'; echo ==" for line in lines)
    done = subprocess.run(["fish", "-c", program], capture_output=True, text=True, env=shell_environment(), timeout=60)
    assert done.returncode == 0, done.stderr
    answers = [block.strip().splitlines() for block in done.stdout.split("==\n")][:4]
    assert answers[0] == ["explain\tprint each resolved field, its value and why"]
    assert answers[1] == ["--strategy\thow the work is spread over devices"]
    assert [line.split("\t")[0] for line in answers[2]] == ["bf16-mixed", "bf16-true"]
    assert [line.split("\t")[0] for line in answers[3]] == ["bash", "fish", "zsh"]


def zsh_tab(line: str, home: Path) -> str:
    """What an interactive zsh shows after ``line`` and Tab, with the script loaded as the user loads it."""
    (home / ".zshrc").write_text(
        'autoload -Uz compinit && compinit -u\neval "$(resolver completion zsh)"\n'
        'PS1="READY> "\nunset zle_bracketed_paste\n'
    )
    terminal, its_end = pty.openpty()
    environ = {**shell_environment(), "ZDOTDIR": str(home), "TERM": "dumb"}
    shell = subprocess.Popen(["zsh", "-i"], stdin=its_end, stdout=its_end, stderr=its_end, env=environ)
    os.close(its_end)

    def read_until(quiet: float, limit: float, prompt: bool = False) -> bytes:
        """The output until the shell is quiet for ``quiet`` seconds, or (``prompt``) shows its prompt;
        at most ``limit`` seconds."""
        seen, end = b"", time.monotonic() + limit
        while time.monotonic() < end and not (prompt and b"READY> " in seen):
            if not select.select([terminal], [], [], quiet)[0]:
                if prompt:
                    continue
                break
            try:
                seen += os.read(terminal, 65536)
            except OSError:
                break
        return seen

    try:
        read_until(1.0, 60, prompt=True)  # start-up (compinit, the script) and the prompt
        os.write(terminal, line.encode() + b"\t")
        shown = read_until(1.0, 30)
        os.write(terminal, b"\x15exit\n")  # Ctrl-U: drop the line; then leave
        shell.wait(timeout=30)
        return shown.decode(errors="replace")
    finally:
        shell.kill()
        os.close(terminal)


@needs["zsh"]
@pytest.mark.parametrize(
    ("line", "completed"),
    [
        ("resolver expl", "resolver explain "),
        ("resolver explain --str", "resolver explain --strategy "),
        ("resolver explain --strategy ddp_fo", "resolver explain --strategy ddp_fork"),
        ("resolver completion f", "resolver completion fish "),
    ],
)
def test_zsh_completes_on_a_terminal(line: str, completed: str, tmp_path: Path) -> None:
    assert completed in zsh_tab(line, tmp_path)


def test_an_unknown_shell_is_a_usage_error_naming_the_shells() -> None:
    done = run_resolver("completion", "tcsh")

    assert done.returncode == 2
    assert "invalid choice: 'tcsh' (choose from 'bash', 'zsh', 'fish')" in done.stderr
