"""The CLI's error paths: a clean message and exit 1, never a Python traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from resolver.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text
    return code, text


def test_golden_on_a_missing_folder(capsys, tmp_path: Path):
    code, text = run(capsys, "golden", str(tmp_path / "missing"))
    assert code == 1
    assert f"{tmp_path / 'missing'}: no such file or folder" in text


def test_golden_on_a_folder_without_scenarios_fails(capsys, tmp_path: Path):
    code, text = run(capsys, "golden", str(tmp_path))
    assert code == 1
    assert "no scenarios (*.toml)" in text and "0 passed" not in text


def test_golden_on_a_scenario_that_is_not_utf8(capsys, tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"description = '\xff'\n")
    code, text = run(capsys, "golden", str(bad))
    assert code == 1
    assert "not UTF-8" in text


def test_rules_output_in_a_missing_folder(capsys, tmp_path: Path):
    target = tmp_path / "missing" / "x.md"
    code, text = run(capsys, "rules", "--output", str(target))
    assert code == 1
    assert f"cannot write {target}: No such file or directory" in text


def test_rules_check_of_a_missing_file(capsys, tmp_path: Path):
    code, text = run(capsys, "rules", "--output", str(tmp_path / "x.md"), "--check")
    assert code == 1
    assert "does not exist" in text


def test_rule_file_that_is_not_utf8(capsys, tmp_path: Path):
    bad = tmp_path / "site.toml"
    bad.write_bytes(b"# caf\xe9\n")
    code, text = run(capsys, "explain", "--rules", str(bad))
    assert code == 1
    assert f"{bad}:1: not UTF-8 text" in text


def test_environment_file_that_is_not_utf8(capsys, tmp_path: Path):
    bad = tmp_path / "node.toml"
    bad.write_bytes(b"hostname = '\xff'\n")
    code, text = run(capsys, "explain", "--simulate", str(bad))
    assert code == 1
    assert "not UTF-8" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--devices", "²"], "devices='²' is not a device count"),
        (["--devices=--2"], "devices='--2' is not a device count"),
        (["--devices", "100000000"], "at most 4096 devices per node"),
        (["--devices", "1" * 4301], "is not a device count"),
        (["--num-nodes", "0"], "num_nodes=0 is not a number of machines"),
        (["--simulate", "cuda=①"], "'cuda=①' needs a whole number"),
    ],
)
def test_explain_bad_input_is_an_error_message(capsys, argv: list[str], message: str):
    code, text = run(capsys, "explain", *argv)
    assert code == 1
    assert message in text
