"""The open machine snapshot: every variable and file the rules read is probed, facts come from probes.

The probing tests run ``resolver explain`` (or a short script) in a child process whose real
environment holds the variables: ``Environment.probe()`` reads them as it would on a cluster node.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import resolver
from resolver import Environment, ResolutionError, load_rules, resolve

PBS_RULES = """
[[rule]]
id = "site.pbs.not_launched"
stage = "clustered"
when = { "var.PBS_JOBID" = { set = true }, cluster_environment = "local", "var.PBS_TASKNUM" = { set = false } }
between = ["var.PBS_JOBID", "cluster_environment"]
conflict = "this is PBS job {var.PBS_JOBID}, but no PBS launcher started this process"
hint = "start the script with pbsdsh, or unset PBS_JOBID to train outside the job"
"""


def _run(args: list[str], env_extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PBS_", "LSB_", "JSM_", "SLURM_"))}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_site_rule_reading_a_new_variable_fires_on_a_probed_machine(tmp_path):
    site = tmp_path / "pbs.toml"
    site.write_text(PBS_RULES)
    args = ["-m", "resolver", "explain", "--rules", str(site), "--format", "json"]

    on_pbs = _run(args, {"PBS_JOBID": "4242.pbs01"}, tmp_path)
    assert on_pbs.returncode == 1, on_pbs.stderr
    error = json.loads(on_pbs.stdout)["error"]
    assert error["rule"] == "site.pbs.not_launched"
    assert "this is PBS job 4242.pbs01" in error["message"]
    assert error["sides"][0]["provenance"]["source"] == "PBS_JOBID=4242.pbs01"

    elsewhere = _run(args, {}, tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr
    launched = _run(args, {"PBS_JOBID": "4242.pbs01", "PBS_TASKNUM": "1"}, tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr


def test_probe_keeps_the_variables_the_loaded_table_reads(tmp_path):
    site = tmp_path / "pbs.toml"
    site.write_text(PBS_RULES)
    environ = {"PBS_JOBID": "1.pbs", "PBS_TASKNUM": "3", "HOME": "/root", "SLURM_NTASKS": "2"}
    with_site = Environment.probe(environ, table=load_rules([site]))
    assert dict(with_site.variables) == {"PBS_JOBID": "1.pbs", "PBS_TASKNUM": "3", "SLURM_NTASKS": "2"}
    builtin_only = Environment.probe(environ)
    assert dict(builtin_only.variables) == {"SLURM_NTASKS": "2"}


def test_resolve_without_an_environment_probes_for_the_given_rules(tmp_path):
    site = tmp_path / "pbs.toml"
    site.write_text(PBS_RULES)
    script = textwrap.dedent(
        f"""
        import resolver
        try:
            resolver.resolve(rules=[{str(site)!r}])
        except resolver.ConflictError as exc:
            print("conflict", exc.rule)
        """
    )
    done = _run(["-c", script], {"PBS_JOBID": "7"}, tmp_path)
    assert done.stdout.strip() == "conflict site.pbs.not_launched", done.stderr


def test_lsf_node_rank_comes_from_the_rank_file_the_probe_reads(tmp_path):
    """Without LSB_MCPU_HOSTS, jsrun's rank file gives the node rank, as PyTorch Lightning resolves it."""
    host = socket.gethostname()
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("launch01\n" + "other01\n" * 2 + f"{host}\n" * 2)
    variables = {
        "LSB_JOBID": "99",
        "LSB_DJOB_RANKFILE": str(rankfile),
        "JSM_NAMESPACE_SIZE": "4",
        "JSM_NAMESPACE_RANK": "3",
        "JSM_NAMESPACE_LOCAL_RANK": "1",
    }
    args = ["-m", "resolver", "explain", "--devices", "2", "--num-nodes", "2", "--format", "json"]
    done = _run(args, variables, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    config = json.loads(done.stdout)["config"]
    assert (config["cluster_environment"], config["node_rank"], config["global_rank"]) == ("lsf", 1, 3)
    assert config["provenance"]["node_rank"]["rule"] == "world.lsf.rankfile"

    rankfile.unlink()  # unreadable: the rules see no file, and say which variables leave the rank unknown
    done = _run(args, variables, tmp_path)
    assert done.returncode == 1
    assert "node_rank unknown" in done.stdout


def test_probe_reads_named_files_into_the_snapshot(tmp_path):
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("launch\nnode-a\n")
    env = Environment.probe({"LSB_DJOB_RANKFILE": str(rankfile), "LSB_JOBID": "1"})
    assert env.files["LSB_DJOB_RANKFILE"] == "launch\nnode-a\n"
    assert env.variables["LSB_DJOB_RANKFILE"] == str(rankfile)
    missing = Environment.probe({"LSB_DJOB_RANKFILE": str(tmp_path / "gone")})
    assert "LSB_DJOB_RANKFILE" not in missing.files


NPU_RULES = """
[slot."env.npu_device_count"]
stage = "input"
type = "int"

[[rule]]
id = "site.npu.noted"
stage = "placed"
when = { "env.npu_device_count" = { gt = 0 } }
note = "{env.npu_device_count} NPU(s) found; this table does not train on them yet"
"""


def test_a_new_machine_fact_is_one_registered_probe(tmp_path):
    site = tmp_path / "npu.toml"
    site.write_text(NPU_RULES)
    script = textwrap.dedent(
        f"""
        import os, resolver

        @resolver.register_probe("npu_device_count", default=0)
        def npu_device_count(environ):
            visible = environ.get("ASCEND_VISIBLE_DEVICES")
            return len(visible.split(",")) if visible else 0

        config = resolver.resolve(rules=[{str(site)!r}])
        print(config.notes)
        print(resolver.Environment(npu_device_count=2).npu_device_count)
        """
    )
    done = _run(["-c", script], {"ASCEND_VISIBLE_DEVICES": "0,1,2"}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "('3 NPU(s) found; this table does not train on them yet',)",
        "2",
    ]


def test_a_fact_without_a_probe_is_a_clear_error(tmp_path):
    site = tmp_path / "npu.toml"
    site.write_text(NPU_RULES.replace("npu_device_count", "gaudi_device_count"))
    with pytest.raises(ResolutionError) as info:
        resolve(environment=Environment(), rules=[site])
    assert "reads 'env.gaudi_device_count', a machine fact no probe provides" in info.value.message
    assert "register_probe('gaudi_device_count'" in info.value.hint
    with pytest.raises(ResolutionError, match="unknown environment field\\(s\\) gaudi_device_count"):
        Environment(gaudi_device_count=2)


def test_environment_keeps_its_keyword_construction_and_is_a_frozen_value():
    env = Environment(cuda_device_count=8, hostname="gpu01", variables={"SLURM_NTASKS": 8})
    assert (env.cuda_device_count, env.hostname, env.variables["SLURM_NTASKS"], env.mps_available) == (
        8,
        "gpu01",
        "8",
        False,
    )
    assert env == Environment(hostname="gpu01", cuda_device_count=8, variables={"SLURM_NTASKS": "8"})
    assert hash(env) == hash(Environment(hostname="gpu01", cuda_device_count=8, variables={"SLURM_NTASKS": "8"}))
    assert env.replace(cuda_device_count=2).cuda_device_count == 2
    with pytest.raises(AttributeError, match="frozen"):
        env.cuda_device_count = 2  # type: ignore[misc]
    with pytest.raises(ResolutionError, match="mps_available must be true or false"):
        Environment(mps_available="yes")
    assert resolver.Environment.from_dict(env.to_dict()) == env


def test_a_registered_fact_can_be_simulated_by_name(tmp_path):
    site = tmp_path / "npu.toml"
    site.write_text(NPU_RULES)
    script = textwrap.dedent(
        f"""
        import resolver
        from resolver.cli.simulate import simulate

        resolver.register_probe("npu_device_count", default=0)(lambda environ: 0)
        env = simulate("npu_device_count=4,cuda_device_count=2")
        print(env.npu_device_count, env.cuda_device_count)
        print(resolver.resolve(environment=env, rules=[{str(site)!r}]).notes)
        """
    )
    done = _run(["-c", script], {}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["4 2", "('4 NPU(s) found; this table does not train on them yet',)"]
