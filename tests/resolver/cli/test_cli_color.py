"""Colour on a terminal for the verdicts and the errors; none in a pipe, with NO_COLOR or --color never;
FORCE_COLOR or --color always colour a pipe too (issue 39, point 14d). The installed command, run on a
real terminal (a pseudo-terminal) or a pipe."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_support import resolver_command, run_resolver

RED_ERROR = "\033[1;31merror[flag.strategy.unknown]:\033[0m unknown strategy 'dpp'"
CYAN_HELP = "  \033[1;36m= help:\033[0m choose one of:"
PLAIN_ERROR = "error[flag.strategy.unknown]: unknown strategy 'dpp'"
ESCAPE = "\033["
CONFLICT = ("explain", "--strategy", "dpp")


def on_a_terminal(*args: str, **variables: str) -> str:
    """What ``resolver ARGS`` writes to a terminal (stdout and stderr both are one)."""
    terminal, its_end = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    process = subprocess.Popen(
        [str(resolver_command()), *args], stdin=subprocess.DEVNULL, stdout=its_end, stderr=its_end,
        env={**environ, "TERM": "xterm", **variables},
    )  # fmt: skip
    os.close(its_end)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(terminal, 65536)
            except OSError:  # the other end closed: all is read
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(timeout=60)
    finally:
        process.kill()
        os.close(terminal)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_terminal_gets_the_error_in_colour() -> None:
    shown = on_a_terminal(*CONFLICT)

    assert RED_ERROR in shown
    assert CYAN_HELP in shown
    assert "  \033[34m-->\033[0m flag.strategy = 'dpp'" in shown


@pytest.mark.parametrize(
    ("args", "variables"),
    [
        ((), {"NO_COLOR": "1"}),
        (("--color", "never"), {}),
        (("--color=never",), {"FORCE_COLOR": "1"}),
        ((), {"TERM": "dumb"}),
        ((), {"OMPI_COMM_WORLD_SIZE": "2"}),  # a rank of mpirun: its terminal is mpirun's forwarding pty
    ],
)
def test_no_color_or_color_never_leaves_a_terminal_plain(args: tuple[str, ...], variables: dict[str, str]) -> None:
    shown = on_a_terminal(*CONFLICT, *args, **variables)

    assert PLAIN_ERROR in shown and ESCAPE not in shown


def test_an_empty_no_color_is_not_set() -> None:
    assert RED_ERROR in on_a_terminal(*CONFLICT, NO_COLOR="")


def test_a_pipe_is_plain_unless_colour_is_forced() -> None:
    plain = run_resolver(*CONFLICT)
    assert plain.stderr.startswith(PLAIN_ERROR) and ESCAPE not in plain.stderr + plain.stdout

    for forced in (run_resolver(*CONFLICT, env={"FORCE_COLOR": "1"}), run_resolver(*CONFLICT, "--color", "always")):
        assert forced.stderr.startswith(RED_ERROR), forced.stderr

    both = run_resolver(*CONFLICT, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert ESCAPE not in both.stderr  # NO_COLOR wins over FORCE_COLOR


def test_a_usage_error_is_coloured_too() -> None:
    done = run_resolver("explain", "--stratgy", "ddp", "--color", "always")

    assert done.returncode == 2
    assert "\033[1;31mresolver explain: error:\033[0m unrecognized arguments: --stratgy ddp" in done.stderr
    assert "  \033[1;36m= help:\033[0m --stratgy: did you mean --strategy?" in done.stderr


def test_a_scripts_own_color_option_does_not_colour_resolver_run(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("raise SystemExit(3)\n")

    done = run_resolver("run", "--devices", "1", "job.py", "--color", "always", cwd=tmp_path)

    assert done.returncode == 3 and ESCAPE not in done.stderr, done.stderr


def test_golden_verdicts_are_coloured(tmp_path: Path) -> None:
    (tmp_path / "wrong.toml").write_text(
        'description = "expects the wrong strategy"\n[flags]\ndevices = 1\n[environment]\ncpu_count = 4\n'
        '[expect]\nstrategy = "ddp"\n'
    )

    done = run_resolver("golden", str(tmp_path), "--color", "always")

    assert done.returncode == 1
    assert f"\033[1;31mFAIL\033[0m {tmp_path / 'wrong.toml'}" in done.stdout
    assert "0 passed, \033[1;31m1 failed\033[0m" in done.stdout


@pytest.mark.parametrize(
    ("line", "colored"),
    [
        ("ok   barrier     2 ranks, values checked, 2.6 ms", "\033[32mok\033[0m   barrier     2 ranks"),
        ("FAIL rendezvous  rank 1 (vm) did not reach", "\033[1;31mFAIL\033[0m rendezvous"),
        ("WARN speed       slow link", "\033[33mWARN\033[0m speed"),
        ("       = help: free the port", "       \033[1;36m= help:\033[0m free the port"),
        ("9 checks, passed, 2 ranks, 20.4 s", "9 checks, \033[32mpassed\033[0m, 2 ranks"),
        ("9 checks, FAILED (rendezvous), 2 ranks, 3.0 s", "9 checks, \033[1;31mFAILED\033[0m (rendezvous)"),
        (
            "resolver run: rank 1 failed (exit code 1): ValueError: bad",
            "\033[1;31mresolver run: rank 1 failed\033[0m (",
        ),
        ("strategy   ddp   flags file train.toml: okay", "strategy   ddp   flags file train.toml: okay"),
        ("okay, not a verdict", "okay, not a verdict"),
    ],
)
def test_each_verdict_of_a_report_has_its_colour(line: str, colored: str) -> None:
    from resolver.cli.terminal_color import color_line

    assert color_line(line).startswith(colored)
