"""Errors as data: a runtime error carries its fix as ``hint`` (as a resolver error does), its text ends
with the ``  hint:`` line users know, and ``resolver``'s command line prints both packages' errors alike."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest

import runtime
from resolver.cli import main
from runtime.collectives.errors import CollectiveNotSetUpError

RUNTIME = Path(runtime.__file__).parent


def _stderr_of(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if not line.startswith("resolver: ")]


def test_the_cli_prints_a_runtime_error_as_it_prints_a_resolver_error(capsys, tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    # the resolver's: a conflict between two flags
    code, resolver_lines = _stderr_of(capsys, "run", "--accelerator", "cpu", "--devices", "2",
                                      "--strategy", "single_device", str(script))  # fmt: skip
    assert code == 1
    # the runtime's: the flags resolve, but the runtime refuses the pre-emption options
    code, runtime_lines = _stderr_of(capsys, "run", "--accelerator", "cpu", "--devices", "1", "--requeue", str(script))
    assert code == 2
    for lines in (resolver_lines, runtime_lines):  # the message first, the fix last, in the same words
        assert re.match(r"error(\[[\w.]+\])?: \S", lines[0]), lines
        assert lines[-1].startswith("  = help: "), lines
    assert runtime_lines == [
        "error: --requeue requeues a pre-empted SLURM job, but no --preemption-signal is given",
        "  = help: add --preemption-signal SIGUSR1 (and submit with sbatch --signal=USR1@90 --requeue)",
    ]
    assert resolver_lines[-1] == "  = help: pass devices=1, or strategy='ddp' to use all 2"


@pytest.mark.parametrize(
    "error",
    [
        runtime.RuntimeConfigError("the config names no such thing", hint="name another"),
        runtime.MissingDependencyError("strategy 'deepspeed'", "deepspeed"),
        runtime.PortInUseError("127.0.0.1", 29500, "MASTER_PORT"),
        runtime.StrategyMisuseError("backward", "called before setup", "call strategy.setup(model) first"),
        runtime.CheckpointDamagedError("/ckpt", "/ckpt/a.pt", "is truncated", "save it again"),
        runtime.LaunchTimeoutError([1], 30.0),
        CollectiveNotSetUpError("torch", "all_reduce", "run it inside strategy.launch"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_a_runtime_error_carries_its_hint_and_ends_its_text_with_it(error: runtime.HintedError):
    assert error.hint and error.message
    assert str(error) == f"{error.message}\n  hint: {error.hint}"
    assert "hint:" not in error.message
    if type(error) is runtime.RuntimeConfigError:  # sent between ranks and to the launcher
        copy = pickle.loads(pickle.dumps(error))
        assert (str(copy), copy.message, copy.hint) == (str(error), error.message, error.hint)


def test_an_error_without_a_fix_has_no_hint_line():
    error = runtime.RuntimeConfigError("the config names no such thing")
    assert error.hint is None and str(error) == "the config names no such thing"


def _baked_hints(source: str) -> list[int]:
    """The lines of ``source`` where a string (a part of an f-string included) holds a ``hint:`` line."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and ("\n  hint: " in node.value or node.value.startswith("  hint: "))
    )  # fmt: skip


def test_no_runtime_message_has_a_hint_baked_into_its_text():
    """Every hint is passed as hint= (the grep of issue 35's closing note, as a check): no string in the
    runtime's source holds a ``hint:`` line, but the one that renders ``str()`` of every such error."""
    renderer = RUNTIME / "errors" / "_hinted.py"
    baked = {
        str(path.relative_to(RUNTIME.parent)): lines
        for path in sorted(RUNTIME.rglob("*.py"))
        if path != renderer and (lines := _baked_hints(path.read_text()))
    }
    assert baked == {}
    assert _baked_hints(renderer.read_text())  # it is where the line is written


def test_the_check_finds_a_baked_hint_however_it_is_written():
    source = (
        'raise RuntimeConfigError(f"{problem}\\n  hint: {fix}")\n'
        'x = ("a problem\\n"\n     "  hint: a fix")\n'
        'y = "  hint: the fix"\n'
        'z = RuntimeConfigError("a problem", hint="the fix")\n'
    )
    assert _baked_hints(source) == [1, 2, 4]
