"""Plugins from outside the repository: a package declaring the entry point ``resolver.plugins``,
pip-installed into a fresh virtual environment beside this project, is found by ``resolve()``,
``resolver explain``, ``resolver env`` and ``runtime.launch`` with no import in the user's script.

The package is ``tests/plugin_example`` (only its files: a made-up accelerator ``npu``, whose
tensors are host tensors, and a made-up cluster ``pbs``). The environment is built once for the
session (``tests/support/plugin_venv.py``) and shared with ``test_plugin_parity.py``: ``python -m
venv``, then pip installs torch (the pinned CPU build), this project's wheel and the plugin's wheel.
Broken plugins are installed with ``pip --target`` into folders of their own that a test puts on
``PYTHONPATH``, so they never reach the other tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.plugin_venv import (
    INSTALL_TIMEOUT_S,
    RUN_TIMEOUT_S,
    environ,
    free_port_from_job_id,
    pip,
    python,
    run,
)

pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 4 * RUN_TIMEOUT_S)


def test_resolve_finds_the_plugins_accelerator_and_cluster(venv):
    code = """
        import sys

        import resolver

        assert "npu_pbs_plugin" not in sys.modules  # the script imports nothing of the plugin
        named = resolver.resolve(accelerator="npu", devices=2, environment=resolver.Environment(npu_device_count=2))
        print("named", named.accelerator, named.device_ids, named.strategy, named.process_group_backend)
        auto = resolver.resolve()  # probes this machine: the plugin's probe reads NPU_VISIBLE_DEVICES
        print("auto", auto.accelerator, auto.num_devices, auto.provenance["accelerator"].rule)
        pbs = resolver.resolve(accelerator="npu", devices=2, environment=resolver.Environment(
            npu_device_count=2, variables={"PBS_JOBID": "17.server", "PBS_RANK": "1", "PBS_LOCAL_RANK": "1",
                                           "PBS_NODE_RANK": "0", "PBS_WORLD_SIZE": "2", "PBS_MAIN_ADDR": "node7"}))
        print("pbs", pbs.cluster_environment, pbs.launcher, pbs.global_rank, pbs.main_address, pbs.main_port)
    """
    result = python(venv, code, NPU_VISIBLE_DEVICES="0,1,2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        "named npu (0, 1) ddp gloo",
        "auto npu 3 accelerator.auto.npu",
        "pbs pbs None 1 node7 15017",
    ]
    without = python(venv, "import resolver; print(resolver.resolve().accelerator)")  # no NPU visible
    assert without.returncode == 0, without.stderr
    assert without.stdout.strip() == "cpu"


TRAIN = """
import runtime


def work(strategy):
    import torch

    total = strategy.collective.all_reduce(torch.tensor([strategy.global_rank + 1.0]), "sum").item()
    return (type(strategy.accelerator).__name__, type(strategy.cluster_environment).__name__,
            strategy.global_rank, strategy.world_size, total)


if __name__ == "__main__":
    print("returned", *runtime.launch(work, accelerator="npu", devices=2, timeout=120), flush=True)
"""


def test_launch_runs_two_ranks_on_the_npu(venv, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    result = run(venv, str(venv["python"]), "train.py", cwd=tmp_path, NPU_VISIBLE_DEVICES="0,1")
    assert result.returncode == 0, result.stdout + result.stderr
    returned = sorted(line for line in result.stdout.splitlines() if line.startswith("returned"))
    # the launcher re-runs the script for rank 1, whose launch() returns too; gloo summed 1 + 2
    assert returned == [
        "returned NPUAccelerator LocalEnvironment 0 2 3.0",
        "returned NPUAccelerator LocalEnvironment 1 2 3.0",
    ]


def test_pbs_started_ranks_meet_through_the_plugins_cluster(venv, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    job, _ = free_port_from_job_id()
    ranks = []
    for rank in (0, 1):
        variables = {
            "PBS_JOBID": job, "PBS_RANK": str(rank), "PBS_LOCAL_RANK": str(rank), "PBS_NODE_RANK": "0",
            "PBS_WORLD_SIZE": "2", "PBS_MAIN_ADDR": "127.0.0.1", "NPU_VISIBLE_DEVICES": "0,1",
        }  # fmt: skip
        ranks.append(
            subprocess.Popen(
                [str(venv["python"]), "train.py"],
                cwd=tmp_path,
                env=environ(venv, **variables),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )
    outputs = []
    try:
        for process in ranks:
            out, err = process.communicate(timeout=RUN_TIMEOUT_S)
            assert process.returncode == 0, out + err
            outputs.append(out)
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert [line for out in outputs for line in out.splitlines() if line.startswith("returned")] == [
        "returned NPUAccelerator PBSEnvironment 0 2 3.0",
        "returned NPUAccelerator PBSEnvironment 1 2 3.0",
    ]


def test_explain_and_env_see_the_plugin(venv):
    explain = run(venv, str(venv["bin"] / "resolver"), "explain", "--accelerator", "npu", NPU_VISIBLE_DEVICES="0,1")
    assert explain.returncode == 0, explain.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in explain.stdout.splitlines() if line.strip()}
    assert rows["accelerator"].startswith("npu ") and rows["device_ids"].startswith("[0, 1] ")
    assert rows["process_group_backend"].startswith("gloo ")
    missing = run(venv, str(venv["bin"] / "resolver"), "explain", "--accelerator", "npu")
    assert missing.returncode == 1 and "error[accelerator.npu.unavailable]" in missing.stderr

    text = run(venv, str(venv["bin"] / "resolver"), "env")
    assert text.returncode == 0, text.stderr
    assert "- plugins:" in text.stdout and "  - npu_pbs:" in text.stdout
    line = next(line for line in text.stdout.splitlines() if line.startswith("  - npu_pbs:"))
    assert "npu-pbs-plugin 0.1.0 (npu_pbs_plugin)" in line
    assert "probes npu_device_count; accelerator npu; cluster environment pbs" in line
    data = json.loads(run(venv, str(venv["bin"] / "resolver"), "env", "--format", "json").stdout)
    (plugin,) = data["plugins"]
    assert plugin["distribution"] == "npu-pbs-plugin" and plugin["version"] == "0.1.0"
    assert plugin["probes"] == ["npu_device_count"] and plugin["problem"] is None
    assert plugin["components"] == {
        "accelerator": {"npu": "npu_pbs_plugin.npu:NPUAccelerator"},
        "cluster_environment": {"pbs": "npu_pbs_plugin.pbs:PBSEnvironment"},
    }
    assert [Path(path).name for path in plugin["rules"]] == ["rules"]


def test_the_disable_variable_turns_plugins_off(venv):
    off = {"RESOLVER_DISABLE_PLUGINS": "1", "NPU_VISIBLE_DEVICES": "0,1"}
    explain = run(venv, str(venv["bin"] / "resolver"), "explain", "--accelerator", "npu", **off)
    assert explain.returncode != 0 and "npu" in explain.stderr and "Traceback" not in explain.stderr
    resolved = python(venv, "import resolver; print(resolver.resolve().accelerator)", **off)
    assert resolved.stdout.strip() == "cpu", resolved.stderr  # the NPU probe is not there to see them
    env = run(venv, str(venv["bin"] / "resolver"), "env", **off)
    assert "- plugins:" in env.stdout and "none (not looked for: RESOLVER_DISABLE_PLUGINS is set)" in env.stdout


BROKEN = {
    "bad-rules-plugin": {
        "bad_rules_plugin/__init__.py": 'RULES = "rules"\n',
        "bad_rules_plugin/rules/site.toml": '[[rule]]\nid = "site.typo"\nstage = "placed"\nwehn = {}\n',
    },
    "failing-plugin": {
        "failing_plugin/__init__.py": 'import os\n\nraise ImportError("the NPU driver library is missing")\n',
    },
    "missing-folder-plugin": {"missing_folder_plugin/__init__.py": 'RULES = ["rules"]\n'},
}


def _broken(venv: dict[str, Path], tmp_path: Path, name: str) -> Path:
    """``name`` built from its few files and pip-installed into a folder of its own (for PYTHONPATH)."""
    return _package(tmp_path, name, BROKEN[name], tmp_path / f"{name}-site")


def _package(tmp_path: Path, name: str, files: dict[str, str], target: Path) -> Path:
    """A package of ``files`` declaring its module as a plugin, pip-installed into ``target``."""
    source = tmp_path / name
    module = name.replace("-", "_")
    for path, text in files.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(text)
    (source / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"
            [project]
            name = "{name}"
            version = "0.2.0"
            [project.entry-points."resolver.plugins"]
            {module} = "{module}"
            [tool.hatch.build.targets.wheel]
            packages = ["{module}"]
        """)
    )
    pip(sys.executable, "install", "--no-deps", "--no-build-isolation", "--target", str(target), str(source))
    return target


def test_installing_or_removing_a_plugin_is_seen_at_once(venv, tmp_path):
    """The list of plugins and the compiled table are cached on disk; neither outlives an install or removal."""
    site = tmp_path / "site"
    site.mkdir()
    notes = "import resolver; print(resolver.resolve(environment=resolver.Environment()).notes)"
    assert python(venv, notes, PYTHONPATH=str(site)).stdout.strip() == "()"  # caches the list and the table
    files = {
        "hello_plugin/__init__.py": 'RULES = "hello.toml"\n',
        "hello_plugin/hello.toml": '[[rule]]\nid = "site.hello"\nstage = "placed"\nnote = "hello from a plugin"\n',
    }
    _package(tmp_path, "hello-plugin", files, site)
    assert python(venv, notes, PYTHONPATH=str(site)).stdout.strip() == "('hello from a plugin',)"
    for installed in site.iterdir():  # what pip uninstall does: the module and its metadata go
        shutil.rmtree(installed)
    assert python(venv, notes, PYTHONPATH=str(site)).stdout.strip() == "()"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("bad-rules-plugin", ["bad_rules_plugin/rules/site.toml:2: rule 'site.typo': unknown key(s) wehn"]),
        ("failing-plugin", ["failing_plugin/__init__.py:3: ImportError: the NPU driver library is missing"]),
        ("missing-folder-plugin", ["missing_folder_plugin/rules, which does not exist"]),
    ],
)
def test_a_broken_plugin_is_an_error_naming_the_package_and_the_file(venv, tmp_path, name, says):
    site = _broken(venv, tmp_path, name)
    explain = run(venv, str(venv["bin"] / "resolver"), "explain", PYTHONPATH=str(site))
    assert explain.returncode == 1, explain.stdout + explain.stderr
    assert "Traceback" not in explain.stderr
    assert explain.stderr.startswith("error: ") and f"plugin {name} 0.2.0" in explain.stderr
    for words in says:
        assert words in explain.stderr
    assert "pip uninstall " + name in explain.stderr and "RESOLVER_DISABLE_PLUGINS=1" in explain.stderr
    code = """
        import resolver
        try:
            resolver.resolve()
        except (resolver.ResolutionError, resolver.RuleTableError) as error:
            print(type(error).__name__, error)
    """
    resolved = python(venv, code, PYTHONPATH=str(site))
    assert resolved.returncode == 0, resolved.stderr
    assert f"plugin {name} 0.2.0" in resolved.stdout
    off = run(venv, str(venv["bin"] / "resolver"), "explain", PYTHONPATH=str(site), RESOLVER_DISABLE_PLUGINS="1")
    assert off.returncode == 0, off.stderr
