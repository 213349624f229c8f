"""`resolver explain`, `resolver golden` and `resolver rules` as a user runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from resolver.cli import main

ROOT = Path(__file__).resolve().parents[3]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "resolver", *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_explain_prints_every_field_with_its_reason(tmp_path):
    result = run_cli("explain", "--devices", "2", "--strategy", "ddp", "--simulate", "", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "rule accelerator.auto.cpu" in lines["accelerator"]
    assert lines["num_devices"].split()[1] == "2" and "flag devices=2" in lines["num_devices"]
    assert "flag strategy='ddp'" in lines["strategy"]
    assert "subprocess" in lines["launcher"] and "rule launcher.script" in lines["launcher"]
    for field in (
        "collective",
        "process_group_backend",
        "cluster_environment",
        "precision",
        "world_size",
        "global_rank",
        "local_rank",
        "node_rank",
        "strategy_options",
        "device_ids",
        "num_nodes",
    ):
        assert field in lines


def test_explain_on_a_simulated_slurm_node(capsys):
    assert main(["explain", "--devices", "8", "--simulate", "cuda=8,slurm"]) == 0
    out = capsys.readouterr().out
    assert "slurm" in out and "nccl" in out
    assert "variable SLURM_NTASKS=8" in out


def test_conflict_is_a_compiler_style_diagnostic_with_exit_1(capsys):
    assert main(["explain", "--devices", "4", "--simulate", "cuda=8,slurm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error[slurm.tasks_per_node_vs_devices]:")
    assert "--> var.SLURM_NTASKS_PER_NODE = '8'" in err
    assert "--> num_devices = 4" in err
    assert "from flag devices=4" in err
    assert "= help:" in err and "--ntasks-per-node=4" in err


def test_json_output_is_data(capsys):
    assert main(["explain", "--devices", "2", "--simulate", "cuda=2", "--format", "json", "--verbose"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    assert data["config"]["accelerator"] == "cuda"
    assert data["config"]["provenance"]["accelerator"]["rule"] == "accelerator.auto.cuda"
    assert any(d["slot"] == "flag.devices" for d in data["decisions"])


def test_json_error(capsys):
    assert main(["explain", "--strategy", "fsdp", "--simulate", "mps", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert data["error"]["kind"] == "ConflictError"
    assert data["error"]["rule"] == "strategy.fsdp.accelerator"
    assert [s["slot"] for s in data["error"]["sides"]] == ["strategy", "accelerator"]


def test_environment_file_for_simulate(tmp_path, capsys):
    env = tmp_path / "node.toml"
    env.write_text('cuda_device_count = 2\n[variables]\nCUDA_VISIBLE_DEVICES = "4,5"\n')
    assert main(["explain", "--simulate", f"{env},interactive", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "using 1 of 2 GPUs because this is an interactive session" in out
    assert "every decision" in out


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["explain", "--num-nodes", "two"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["explain", "--format", "yaml"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def test_bad_simulate_token_is_explained(capsys):
    assert main(["explain", "--simulate", "cuda=lots"]) == 1
    assert "needs a whole number" in capsys.readouterr().err
    assert main(["explain", "--simulate", "quantum"]) == 1
    assert "unknown token 'quantum'" in capsys.readouterr().err


def test_removed_flag_on_the_cli(capsys):
    assert main(["explain", "--gpus", "2"]) == 1
    err = capsys.readouterr().err
    assert "--gpus 2 was removed" in err
    assert "--accelerator gpu --devices 2" in err


def test_help_lists_every_flag():
    result = run_cli("explain", "--help")
    assert result.returncode == 0
    for flag in (
        "--accelerator",
        "--devices",
        "--strategy",
        "--precision",
        "--num-nodes",
        "--cluster-environment",
        "--rules",
        "--simulate",
        "--format",
        "exit codes",
    ):
        assert flag in result.stdout
    top = run_cli("--help")
    for command in ("explain", "run", "golden", "rules"):
        assert command in top.stdout


def test_extra_rules_on_the_cli(tmp_path, capsys):
    extra = tmp_path / "site.toml"
    extra.write_text(
        '[[rule]]\nid = "site.spawn"\nstage = "planned"\n'
        'when = { strategy = "ddp", "cluster.manages_processes" = false }\n'
        'set = { launcher = "spawn" }\npriority = 45\nwhy = "this site spawns"\n'
    )
    assert main(["explain", "--devices", "2", "--simulate", "", "--rules", str(extra)]) == 0
    assert "rule site.spawn: this site spawns" in capsys.readouterr().out


def test_broken_rule_file_on_the_cli(tmp_path, capsys):
    extra = tmp_path / "broken.toml"
    extra.write_text('[[rule]]\nid = "x"\nstage = "planned"\nwhen = { nope = 1 }\nset = { launcher = "spawn" }\n')
    assert main(["explain", "--simulate", "", "--rules", str(extra)]) == 1
    assert "broken.toml:2: rule 'x': unknown slot 'nope'" in capsys.readouterr().err


def test_rules_doc_is_current():
    """docs/rules.md is generated from the table; regenerate with `resolver rules --output docs/rules.md`."""
    assert main(["rules", "--output", str(ROOT / "docs" / "rules.md"), "--check"]) == 0


def test_rules_doc_check_catches_staleness(tmp_path, capsys):
    stale = tmp_path / "rules.md"
    stale.write_text("old\n")
    assert main(["rules", "--output", str(stale), "--check"]) == 1
    assert "is stale" in capsys.readouterr().err


def test_golden_command_reports_and_updates(tmp_path, capsys):
    scenario = tmp_path / "two.toml"
    scenario.write_text('description = "two CPU processes"\n[flags]\ndevices = 2\n[expect]\nstrategy = "fsdp"\n')
    assert main(["golden", str(tmp_path)]) == 1
    assert "0 passed, 1 failed" in capsys.readouterr().out
    assert main(["golden", "--update", str(tmp_path)]) == 0
    assert main(["golden", str(tmp_path)]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    assert 'strategy = "ddp"' in scenario.read_text()


RANK_SCRIPT = """
import sys, torch, torch.distributed as dist
import runtime

def work(strategy, bonus):
    value = torch.tensor([float(strategy.global_rank + 1)])
    strategy.collective.all_reduce(value, "sum")
    print(f"rank {strategy.global_rank}/{strategy.world_size} sum {value.item() + bonus}", flush=True)
    if "--fail" in sys.argv and strategy.global_rank == 1:
        raise RuntimeError("rank 1 gives up")

runtime.launch(work, float(sys.argv[1]))
"""


@pytest.mark.timeout(180)
def test_resolver_run_starts_the_script_once_per_device(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "job.py"
    script.write_text(RANK_SCRIPT)
    done = run_cli_long("run", "--devices", "2", "--strategy", "ddp", "--timeout", "120", str(script), "0.5")
    assert done.returncode == 0, done.stderr
    assert "resolver: accelerator=cpu devices=[0, 1]" in done.stderr and "launcher=subprocess" in done.stderr
    # the ranks share one stdout, so their lines may interleave
    assert sorted(re.findall(r"rank \d/\d sum [\d.]+", done.stdout)) == ["rank 0/2 sum 3.5", "rank 1/2 sum 3.5"]


@pytest.mark.timeout(180)
def test_resolver_run_reports_a_failing_rank(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "job.py"
    script.write_text(RANK_SCRIPT)
    done = run_cli_long("run", "--devices", "2", "--timeout", "120", str(script), "0", "--fail")
    assert done.returncode != 0
    assert "rank 1 gives up" in done.stderr


def test_resolver_run_conflict_starts_nothing(tmp_path, capsys):
    script = tmp_path / "job.py"
    script.write_text("raise SystemExit('must not run')\n")
    assert main(["run", "--strategy", "fsdp", "--devices", "2", "--precision", "64-true", str(script)]) == 1
    assert "error[precision.fsdp.limits]" in capsys.readouterr().err


def run_cli_long(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "resolver", *args], capture_output=True, text=True, timeout=170)
