"""`resolver env` and `resolver --version`, run as the installed command in a subprocess."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from resolver.cli.env import DISTRIBUTION, is_secret_name, mask_variables
from tests.support.cli_support import python_without_torch, run_resolver

SECRETS = {
    "RESOLVER_API_KEY": "sk-live-4242",
    "KUBERNETES_SERVICE_TOKEN": "eyJhbGciOiJSUzI1NiJ9.token",
    "SLURM_DB_PASSWORD": "hunter2-hunter2",
    "NCCL_SOCKET_SECRET": "nccl-secret-value",
}
PLAIN = {"SLURM_JOB_ID": "4711", "NCCL_DEBUG": "INFO", "MASTER_PORT": "29512", "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return python_without_torch(tmp_path_factory.mktemp("no-torch") / "venv")


def test_version_flag_prints_the_installed_version():
    result = run_resolver("--version")
    assert result.returncode == 0, result.stderr
    from importlib.metadata import version

    assert result.stdout.strip() == f"resolver {version(DISTRIBUTION)}"


def test_env_text_report_has_every_section():
    result = run_resolver("env", env={**PLAIN, **SECRETS})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    fields = dict(line[2:].split(":", 1) for line in out.splitlines() if line.startswith("- ") and ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    from importlib.metadata import version

    assert fields["resolver"] == version(DISTRIBUTION)
    assert fields["Python"].startswith(".".join(map(str, sys.version_info[:3])))
    assert fields["OS"]
    import torch

    assert fields["torch"] == torch.__version__
    assert "  - CUDA:" in out and "  - cuDNN:" in out and "  - NCCL:" in out
    assert "  - distributed backends:" in out and "gloo" in out
    for engine in ("torch_xla", "horovod", "deepspeed"):
        assert fields[engine]  # a version or "not installed"
    assert fields["CUDA devices seen"] == "0"
    assert fields["CPUs"] == str(os.cpu_count())
    assert fields["cluster detected"].startswith("local (rule ")  # SLURM_JOB_ID alone is not an srun step
    assert "  - SLURM_JOB_ID=4711" in out and "  - NCCL_DEBUG=INFO" in out and "  - MASTER_PORT=29512" in out


def test_env_masks_secret_like_values_in_text_and_json():
    for fmt in ("text", "json"):
        result = run_resolver("env", "--format", fmt, env={**PLAIN, **SECRETS})
        assert result.returncode == 0, result.stderr
        for name, value in SECRETS.items():
            assert name in result.stdout  # the variable is reported as set...
            assert value not in result.stdout  # ...but never its value


def test_env_reports_the_cluster_it_detects():
    slurm = {
        "SLURM_NTASKS": "2",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "0",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_ID": "7",
    }
    data = json.loads(run_resolver("env", "--format", "json", env=slurm).stdout)
    assert data["cluster_environment"] == "slurm"
    assert "SLURM" in data["cluster_source"]
    assert data["variables"]["SLURM_PROCID"] == "1"


def test_env_json_is_versioned_data():
    result = run_resolver("env", "--format", "json", env=PLAIN)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert set(data["packages"]) == {"torch", "torch_xla", "horovod", "deepspeed"}
    torch_info = data["packages"]["torch"]
    assert torch_info["version"] and {"cuda", "cudnn", "nccl", "cuda_available", "cuda_device_count"} <= set(
        torch_info["details"]
    )
    assert data["devices"]["cuda_device_count"] == 0
    assert Path(data["python_executable"]).parent == Path(sys.executable).parent
    assert data["variables"]["SLURM_JOB_ID"] == "4711"


def test_env_without_torch_says_not_installed(bare_python):
    text = run_resolver("env", python=bare_python, env=PLAIN)
    assert text.returncode == 0, text.stderr
    assert "- torch:" in text.stdout and "not installed" in text.stdout.split("- torch:")[1].splitlines()[0]
    data = json.loads(run_resolver("env", "--format", "json", python=bare_python).stdout)
    assert data["packages"]["torch"] == {"version": None, "details": {}, "problem": None}
    assert data["python_executable"] == str(bare_python)


def test_without_torch_explain_and_version_still_work(bare_python):
    assert run_resolver("--version", python=bare_python).returncode == 0
    result = run_resolver("explain", "--devices", "2", "--simulate", "", python=bare_python)
    assert result.returncode == 0, result.stderr
    assert "launcher" in result.stdout


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "GITHUB_PAT", "MY_APIKEY", "SSH_AUTH_SOCK"],
)
def test_secret_like_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["SLURM_JOB_ID", "MASTER_ADDR", "NCCL_DEBUG", "PATH", "LOCAL_RANK", "OMP_NUM_THREADS"])
def test_ordinary_names_are_shown(name):
    assert not is_secret_name(name)


def test_passwords_inside_urls_are_masked():
    masked = mask_variables({"MASTER_ADDR": "https://alice:pa55@store.example:443/x", "SLURM_JOB_ID": "1"})
    assert masked == {"MASTER_ADDR": "https://alice:<masked>@store.example:443/x", "SLURM_JOB_ID": "1"}


def test_env_still_reports_when_this_machine_does_not_resolve():
    """People run `resolver env` when something is wrong: a bad override variable is reported, not fatal."""
    result = run_resolver("env", env={"RESOLVER_STRATEGY": "dpp"})
    assert result.returncode == 0, result.stderr
    cluster = next(line for line in result.stdout.splitlines() if line.startswith("- cluster detected:"))
    assert "resolving with default flags fails here: unknown strategy 'dpp'" in cluster
    assert "  - RESOLVER_STRATEGY=dpp" in result.stdout


def test_env_shows_a_torch_that_fails_to_import(bare_python, tmp_path):
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("libcudart.so.12: cannot open shared object file")\n')
    result = run_resolver("env", python=bare_python, env={"PYTHONPATH": str(broken.parent)})
    assert result.returncode == 0, result.stderr
    torch_line = next(line for line in result.stdout.splitlines() if line.startswith("- torch:"))
    assert "fails to import: ImportError: libcudart.so.12: cannot open shared object file" in torch_line
