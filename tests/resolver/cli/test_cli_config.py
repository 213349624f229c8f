"""`resolver explain/run --config FILE`: flags from a TOML file, the command line wins, explain says which."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.support.cli_support import ROOT, run_resolver

GOLDEN = ROOT / "tests" / "golden"


def write(tmp_path: Path, text: str, name: str = "train.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def rows(stdout: str) -> dict[str, str]:
    """explain's text table as {field: the rest of the line}."""
    found = {}
    for line in stdout.splitlines():
        name, _, rest = line.partition(" ")
        if name and rest:
            found[name] = " ".join(rest.split())
    return found


def test_explain_reads_the_file_and_the_command_line_wins(tmp_path):
    path = write(tmp_path, '[flags]\nstrategy = "ddp"\ndevices = 2\nprecision = "bf16-mixed"\n')
    result = run_resolver("explain", "--config", str(path), "--devices", "4", "--simulate", "cuda=8")
    assert result.returncode == 0, result.stderr
    table = rows(result.stdout)
    assert table["num_devices"].startswith("4 flag devices=4")
    assert table["strategy"].startswith(f"ddp flags file {path}: strategy='ddp'")
    assert table["precision"].startswith(f"bf16-mixed flags file {path}: precision='bf16-mixed'")


def test_a_flag_given_at_its_default_still_wins_over_the_file(tmp_path):
    path = write(tmp_path, 'strategy = "ddp"\n')  # a bare table
    result = run_resolver("explain", "--config", str(path), "--strategy", "auto", "--simulate", "cuda=1")
    assert result.returncode == 0, result.stderr
    assert rows(result.stdout)["strategy"].startswith("single_device rule ")


def test_json_carries_the_flags_file_provenance(tmp_path):
    path = write(tmp_path, '[flags]\nstrategy = "ddp"\n')
    result = run_resolver("explain", "--config", str(path), "--simulate", "cuda=2", "--format", "json")
    data = json.loads(result.stdout)
    provenance = data["config"]["provenance"]["strategy"]
    assert provenance["kind"] == "flags_file" and provenance["source"] == f"{path}: strategy='ddp'"


def test_a_golden_scenario_runs_with_its_own_environment():
    scenario = GOLDEN / "strategy-unknown-typo.toml"
    result = run_resolver("explain", "--config", str(scenario), "--simulate", str(scenario))
    assert result.returncode == 1
    assert "error[flag.strategy.unknown]: unknown strategy 'dpp' (did you mean 'ddp'?)" in result.stderr
    assert f"from flags file {scenario}: strategy='dpp'" in result.stderr


def test_a_mistake_in_the_file_is_a_diagnostic_not_a_traceback(tmp_path):
    path = write(tmp_path, '[flags]\nstrategy = "ddp"\nnum_node = 2\n')
    result = run_resolver("explain", "--config", str(path))
    assert result.returncode == 1
    assert f"error: {path}:3: unknown flag 'flags.num_node'; did you mean 'num_nodes'?" in result.stderr
    assert "Traceback" not in result.stderr
    missing = run_resolver("explain", "--config", str(tmp_path / "nope.toml"), "--format", "json")
    assert missing.returncode == 1
    assert "cannot read flags file" in json.loads(missing.stdout)["error"]["message"]


def test_run_reads_the_file(tmp_path):
    path = write(tmp_path, '[flags]\naccelerator = "cpu"\ndevices = 2\n')
    script = write(
        tmp_path,
        "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n",
        "show.py",
    )
    result = run_resolver("run", "--config", str(path), str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "world_size=2" in result.stderr
    assert "0 of 2" in result.stdout and "1 of 2" in result.stdout
    one = run_resolver("run", "--config", str(path), "--devices", "1", str(script), cwd=tmp_path)
    assert one.returncode == 0 and "world_size=1" in one.stderr
