"""docs/usage.md's console examples are run: each `$ resolver ...` line with the real command, in a
folder holding the files the doc writes (a ```toml or ```python block whose first line is
``# NAME``), and every output line the doc shows must be printed (spacing aside)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from tests.cli_support import ROOT, run_resolver

USAGE = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"^ *```(\w+)\n(.*?)^ *```", re.S | re.M)


def _blocks(kind: str) -> list[str]:
    return [_dedent(body) for lang, body in BLOCK.findall(USAGE) if lang == kind]


def _dedent(body: str) -> str:
    lines = body.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines) + "\n"


def _files() -> dict[str, str]:
    found = {}
    for body in _blocks("toml") + _blocks("python"):
        named = re.fullmatch(r"# (?:docs example: )?([\w.-]+\.(?:toml|py))", body.splitlines()[0])
        if named:
            found[named[1]] = body
    return found


def _examples() -> list[tuple[str, int, list[str]]]:
    """(command line, expected exit code, expected output lines) for each `$ resolver` line."""
    examples: list[tuple[str, int, list[str]]] = []
    current: list[str] | None = None
    for body in _blocks("console"):
        current = None
        for line in body.splitlines():
            if line.startswith("$ resolver "):
                command, _, comment = line[2:].partition("  # exit ")
                examples.append((command.strip(), int(comment or 0), []))
                current = examples[-1][2]
            elif line.startswith("$ "):
                current = None  # another program (cat ...): its test is the section's own
            elif line.strip() and current is not None:
                current.append(line)
    return examples


def _squeeze(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("usage")
    for name, text in _files().items():
        (where / name).write_text(text, encoding="utf-8")
    (where / "tests").mkdir()
    (where / "tests" / "golden").symlink_to(ROOT / "tests" / "golden")
    (where / "docs").symlink_to(ROOT / "docs")
    return where


def test_the_doc_has_the_examples_of_each_section():
    commands = " ".join(command for command, _, _ in _examples())
    for needed in ("--config train.toml", "-m json.tool --help", "show_args.py --help", "--strategy dpp", "run docs"):
        assert needed in commands, needed
    assert {"train.toml", "typo.toml", "show_args.py"} <= set(_files())


@pytest.mark.parametrize("command, code, expected", _examples(), ids=[e[0] for e in _examples()])
def test_console_example(folder, command, code, expected):
    words = shlex.split(command)
    assert words[0] == "resolver"
    result = run_resolver(*words[1:], cwd=folder, env={"PYTHONPATH": os.pathsep.join([str(ROOT)])})
    assert result.returncode == code, result.stdout + result.stderr
    printed = [_squeeze(line) for line in (result.stdout + result.stderr).splitlines()]
    for line in expected:
        assert any(_squeeze(line) in out for out in printed), f"{line!r} not in:\n{result.stdout}{result.stderr}"


def test_python_example(folder, monkeypatch):
    (code,) = [body for body in _blocks("python") if "config_file=" in body and not body.startswith("# ")]
    monkeypatch.chdir(folder)
    exec(compile(code, "docs/usage.md", "exec"), {})
