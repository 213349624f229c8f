"""Did you mean, from the real `resolver` command: options, flag values, --simulate tokens, rule files."""

from __future__ import annotations

import pytest

from tests.support.cli_support import run_resolver


@pytest.mark.parametrize(
    "args, command, suggestion",
    [
        (["explain", "--stratgy", "ddp"], "explain", "--stratgy: did you mean --strategy?"),
        (["explain", "--num_ndoes", "2"], "explain", "--num_ndoes: did you mean --num-nodes?"),
        (["explain", "--devcies=2"], "explain", "--devcies: did you mean --devices?"),
        (["run", "--timout", "5", "x.py"], "run", "--timout: did you mean --timeout?"),
        (["golden", "--updaet", "tests/golden"], "golden", "--updaet: did you mean --update?"),
    ],
)
def test_an_unknown_option_names_the_closest_options(args, command, suggestion):
    result = run_resolver(*args)
    assert result.returncode == 2
    assert f"resolver {command}: error: unrecognized arguments" in result.stderr
    assert f"= help: {suggestion}" in result.stderr
    assert result.stderr.startswith(f"usage: resolver {command}")


def test_an_unknown_command_names_the_closest():
    result = run_resolver("explian", "--devices", "2")
    assert result.returncode == 2
    assert "resolver: error: unknown command 'explian'; did you mean 'explain'?" in result.stderr
    assert "choose from explain, run, check, config, env, golden, rules, completion" in result.stderr


def test_an_option_close_to_nothing_gets_no_suggestion():
    result = run_resolver("explain", "--qqqqqqqq")
    assert result.returncode == 2 and "did you mean" not in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--strategy", "dpp"], "unknown strategy 'dpp' (did you mean 'ddp'?)"),
        (["--accelerator", "gpuu"], "unknown accelerator 'gpuu' (did you mean 'gpu'?)"),
        (["--precision", "16-mixd"], "unknown precision '16-mixd' (did you mean '16-mixed'"),
        (["--cluster-environment", "slrum"], "unknown cluster environment 'slrum' (did you mean 'slurm'?)"),
        (["--plugin", "torchelastik"], "unknown plugin 'torchelastik' (did you mean 'torchelastic'?)"),
        (["--simulate", "cdua=2"], "--simulate: unknown token 'cdua=2'; did you mean 'cuda'?"),
    ],
)
def test_an_unknown_value_names_the_closest(args, message):
    result = run_resolver("explain", *args)
    assert result.returncode == 1
    assert message in result.stderr


def test_a_typo_in_a_rule_file_names_the_closest_slot_and_key(tmp_path):
    rules = tmp_path / "site.toml"
    rules.write_text('[[rule]]\nid = "site.ddp"\nstage = "normalized"\nwhen = { stratgy = "ddp" }\nnote = "x"\n')
    result = run_resolver("explain", "--rules", str(rules))
    assert result.returncode == 1
    assert f"{rules}:2: rule 'site.ddp': unknown slot 'stratgy'; did you mean 'strategy'" in result.stderr
    rules.write_text('[[rule]]\nid = "site.ddp"\nstage = "normalized"\nwehn = { strategy = "ddp" }\n')
    result = run_resolver("explain", "--rules", str(rules))
    assert "unknown key(s) wehn (wehn: did you mean 'when'?)" in result.stderr
