"""Readable and scriptable output: per-command help, per-command usage errors, JSON, the table."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from resolver.cli.commands import COMMANDS, command_module
from resolver.cli.parser import _parser
from tests.support.cli_support import ROOT, run_resolver


def subcommands() -> list[str]:
    parser = _parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)


def test_every_command_module_has_its_help_options_and_code():
    assert sorted(COMMANDS) == subcommands()
    for name in COMMANDS:
        module = command_module(name)
        assert module.SUMMARY and module.EXAMPLES, name
        assert callable(module.add_options) and callable(module.run), name


@pytest.mark.parametrize("command", subcommands())
def test_help_has_a_description_and_examples(command):
    result = run_resolver(command, "--help")
    assert result.returncode == 0, result.stderr
    usage, description, *rest = result.stdout.split("\n\n")
    assert usage.startswith(f"usage: resolver {command}")
    assert len(description.split()) >= 8, f"`resolver {command} --help` has no description"
    examples = result.stdout.split("examples:\n", 1)[1].strip().splitlines()
    assert examples and all(line.strip().startswith(f"resolver {command}") for line in examples)


def parses(line: str) -> None:
    """A command line as a user types it parses (what follows a pipe or a redirection aside)."""
    words = shlex.split(re.split(r" [|>] ", line.split("  #")[0])[0])
    assert words[0] == "resolver", line
    try:
        _parser().parse_args(words[1:])
    except SystemExit as exc:
        raise AssertionError(f"`{line}` is not valid usage") from exc


@pytest.mark.parametrize("example", [e for name in COMMANDS for e in command_module(name).EXAMPLES])
def test_every_help_example_is_valid_usage(example):
    """A documented example is a test: each one parses."""
    parses(example)


def test_every_command_line_in_the_usage_doc_is_valid():
    text = (ROOT / "docs" / "usage.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    commands = [line for line in lines if line.startswith("resolver ") and "..." not in line]
    assert len(commands) >= 10
    for line in commands:
        parses(line)


def test_top_level_help_lists_every_command_and_version():
    result = run_resolver("--help")
    for command in subcommands():
        assert re.search(rf"^    {command}\b", result.stdout, re.M), command  # a long name: help on the next line
    assert "--version" in result.stdout
    examples = result.stdout.split("examples:\n", 1)[1].split("\n\n")[0].strip().splitlines()
    assert len(examples) >= len(subcommands())
    for line in examples:
        parses(line.strip())


@pytest.mark.parametrize(
    "args, command",
    [
        (["explain", "--bogus"], "explain"),
        (["explain", "--devices", "2", "--format", "yaml"], "explain"),
        (["env", "--verbose"], "env"),
        (["golden"], "golden"),
        (["rules", "--check", "--nope"], "rules"),
        (["run", "--num-nodes", "two", "train.py"], "run"),
    ],
)
def test_usage_errors_show_the_subcommands_usage(args, command):
    result = run_resolver(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: resolver {command} ")
    assert f"resolver {command}: error:" in result.stderr
    assert "usage: resolver [-h]" not in result.stderr


def test_unknown_command_shows_the_top_level_usage():
    result = run_resolver("explian")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: resolver [-h]")


def test_explain_json_has_schema_version_and_environment_and_no_decisions_by_default():
    result = run_resolver("explain", "--devices", "2", "--simulate", "cuda=2,hostname=node7", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert data["environment"]["cuda_device_count"] == 2
    assert data["environment"]["hostname"] == "node7"
    assert (data["environment"]["variables"], data["environment"]["files"]) == ({}, {})  # documented keys, even empty
    assert data["config"]["num_devices"] == 2
    assert "decisions" not in data


def test_explain_json_verbose_lists_every_decision():
    result = run_resolver("explain", "--devices", "2", "--simulate", "cuda=2", "--format", "json", "--verbose")
    data = json.loads(result.stdout)
    slots = [d["slot"] for d in data["decisions"]]
    assert "flag.devices" in slots and "accelerator" in slots
    assert slots.index("flag.devices") < slots.index("num_devices")  # in the order they were decided


def test_explain_json_on_error_has_the_snapshot_too():
    result = run_resolver("explain", "--devices", "4", "--simulate", "cuda=8,slurm", "--format", "json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and data["ok"] is False
    assert data["environment"]["variables"]["SLURM_NTASKS_PER_NODE"] == "8"
    assert data["error"]["rule"] == "slurm.tasks_per_node_vs_devices"


def _columns(line: str) -> list[int]:
    """Where each column starts: after a run of two or more spaces."""
    return [0] + [m.end() for m in re.finditer(r"  +", line)]


def test_explain_table_columns_fit_the_longest_value():
    # strategy_options shows as {find_unused_parameters=true}: 29 characters
    result = run_resolver(
        "explain", "--devices", "2", "--strategy", "ddp_find_unused_parameters_true", "--simulate", ""
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.strip()]
    options = next(line for line in rows if line.startswith("strategy_options"))
    assert "{find_unused_parameters=true}  rule " in options
    assert len({_columns(line)[1] for line in rows}) == 1, "every value starts in the same column"
    assert len({_columns(line)[2] for line in rows}) == 1, "every reason starts in the same column"


def test_explain_verbose_table_stays_aligned():
    result = run_resolver("explain", "--devices", "2", "--simulate", "cuda=2", "--verbose")
    rows = [line for line in result.stdout.splitlines() if line.strip() and not line.startswith("--")]
    rows = [line for line in rows if len(_columns(line)) >= 3 and not line.startswith(" ")]
    assert len({_columns(line)[2] for line in rows}) == 1


@pytest.mark.parametrize("args", [("explain", "--simulate", "", "--verbose"), ("env",), ("rules",)])
def test_a_reader_that_stops_early_gets_no_traceback(args):
    """`resolver explain | head -1`: the pipe closes before the output is written."""
    import subprocess

    from tests.support.cli_support import resolver_command

    process = subprocess.Popen(
        [str(resolver_command()), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # long before the command has started up
    stderr = process.stderr.read()
    process.wait(timeout=60)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_explain_json_of_a_removed_flag_still_has_the_snapshot():
    result = run_resolver("explain", "--gpus", "2", "--simulate", "cuda=2", "--format", "json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["error"]["rule"] == "removed.gpus"
    assert data["environment"]["cuda_device_count"] == 2


def test_explain_json_of_a_bad_simulate_has_no_snapshot():
    result = run_resolver("explain", "--simulate", "quantum", "--format", "json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and "environment" not in data
    assert "unknown token 'quantum'" in data["error"]["message"]
