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


REMOVED = {  # flag: (a value, the words of the replacement the CLI shows for it)
    "gpus": ("2", "--accelerator gpu --devices 2"),
    "tpu_cores": ("8", "--accelerator tpu --devices 8"),
    "ipus": ("2", "--accelerator cpu --devices 2"),
    "num_processes": ("4", "--accelerator cpu --devices 4"),
    "distributed_backend": ("ddp", "--strategy ddp"),
    "auto_select_gpus": ("true", "--accelerator gpu --devices auto"),
}


@pytest.mark.parametrize("with_value", [True, False], ids=["value", "alone"])
@pytest.mark.parametrize("dashes", [True, False], ids=["dash", "underscore"])
@pytest.mark.parametrize("flag", sorted(REMOVED))
def test_a_removed_flag_gets_its_migration_text_in_any_spelling(capsys, flag: str, dashes: bool, with_value: bool):
    """`--num_processes 4` used to suggest --num-nodes, `--tpu_cores` was "unrecognized", and
    `--auto-select-gpus` asked for a value: each now says why it went and what to write."""
    from resolver import Environment, ResolutionError, resolve

    option = "--" + (flag.replace("_", "-") if dashes else flag)
    value, replacement = REMOVED[flag]
    code, text = run(capsys, "explain", option, *([value] if with_value else []), "--simulate", "cuda=2")
    with pytest.raises(ResolutionError) as python:  # the same reason resolve() gives for it
        resolve(environment=Environment(), **{flag: value})
    assert code == 1
    assert (
        f"error[removed.{flag}]: {option}" in text and f"was removed: {python.value.message.split(': ', 1)[1]}" in text
    )
    if with_value:
        assert f"use {replacement}" in text
    else:  # the value's place is named (`--devices N`), or not needed (`--devices auto`)
        assert "use " + replacement.replace(value, {"distributed_backend": "NAME"}.get(flag, "N")) in text


def test_a_removed_flag_is_reported_before_the_script_it_may_have_taken(capsys, tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    code, text = run(capsys, "run", "--auto-select-gpus", str(script))
    assert code == 1 and "--auto-select-gpus was removed" in text and "never run" not in text
    code, text = run(capsys, "run", "--num_processes", "2", str(script))
    assert code == 1 and "use --accelerator cpu --devices 2" in text
