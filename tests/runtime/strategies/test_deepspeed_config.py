"""The DeepSpeed config a strategy's options make (pure: no DeepSpeed needed), and the missing-package error."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.strategies import DeepSpeedOptions
from runtime.strategies.deepspeed_config import deepspeed_config

#: CI's DeepSpeed phase runs these again with DeepSpeed installed (the absence test then hides a real one)
pytestmark = pytest.mark.deepspeed

BF16 = {"bf16": {"enabled": True}}


def config(precision: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    return deepspeed_config(DeepSpeedOptions(**options), precision or {}, pin_memory=False)


def test_the_default_is_zero_stage_2_with_the_users_optimizer_allowed() -> None:
    assert config() == {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0,  # DeepSpeed's own default would clip at 1.0: ddp and fsdp do not clip
        "zero_optimization": {"stage": 2},
        "zero_allow_untested_optimizer": True,
    }


def test_offload_options_and_precision_sections() -> None:
    made = config(BF16, stage=3, offload_optimizer=True, offload_parameters=True, remote_device="nvme", nvme_path="/x")
    offload = {"device": "nvme", "pin_memory": False, "nvme_path": "/x"}
    assert made["zero_optimization"] == {"stage": 3, "offload_optimizer": offload, "offload_param": offload}
    assert made["bf16"] == {"enabled": True}
    assert made["zero_force_ds_cpu_optimizer"] is False  # the user's optimizer, not DeepSpeedCPUAdam


def test_extra_config_is_merged_into_the_generated_one_key_by_key(tmp_path: Path) -> None:
    made = config(stage=3, extra_config={"zero_optimization": {"stage3_max_live_parameters": 10}, "steps_per_print": 5})
    assert made["zero_optimization"] == {"stage": 3, "stage3_max_live_parameters": 10}
    assert made["steps_per_print"] == 5
    path = tmp_path / "extra.json"
    path.write_text('{"gradient_clipping": 1.0}')
    assert config(extra_config=str(path))["gradient_clipping"] == 1.0


def test_config_replaces_the_generated_one() -> None:
    assert config(BF16, deepspeed_config={"zero_optimization": {"stage": 0}}) == {
        "zero_optimization": {"stage": 0},
        "train_micro_batch_size_per_gpu": 1,  # DeepSpeed refuses a config without a batch size
        "gradient_clipping": 0.0,  # as in the generated one, unless the config asks for clipping
    }
    assert config(deepspeed_config={"gradient_clipping": 0.5})["gradient_clipping"] == 0.5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deepspeed_config": {}, "stage": 3}, r"a whole config .* and also stage=3, which that config replaces"),
        ({"stage": 2, "offload_parameters": True}, "offload_parameters needs ZeRO stage 3"),
        (
            {"deepspeed_config": "/no/such/ds.json"},
            r"deepspeed_config='/no/such/ds.json': cannot read the DeepSpeed config file",
        ),
    ],
)
def test_mistakes_are_precise_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(runtime.RuntimeConfigError, match=message):
        config(**options)


def test_options_are_checked_when_structured() -> None:
    from runtime.strategies.options import structure_options

    with pytest.raises(runtime.RuntimeConfigError, match="'stage' must be in range"):
        structure_options("deepspeed", DeepSpeedOptions, {"stage": 4})
    with pytest.raises(runtime.RuntimeConfigError, match="extra_config"):
        structure_options("deepspeed", DeepSpeedOptions, {"extra_config": 3})


def test_without_deepspeed_build_names_the_install_command(tmp_path: Path) -> None:
    """Run in an interpreter whose site-packages is this one's minus DeepSpeed (a real absence)."""
    site = Path(sysconfig.get_paths()["purelib"])
    visible = tmp_path / "site"
    visible.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith("deepspeed"):
            (visible / entry.name).symlink_to(entry)
    root = Path(__file__).resolve().parents[3]
    code = (
        "import importlib.util, sys\n"
        "assert importlib.util.find_spec('deepspeed') is None\n"
        "sys.path.insert(0, 'tests/runtime')\n"
        "import runtime\n"
        "from runtime_configs import ddp_config\n"
        "try:\n"
        "    runtime.build(ddp_config(2, strategy='deepspeed'))\n"
        "except runtime.MissingDependencyError as error:\n"
        "    print(error)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{visible}"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "strategy 'deepspeed' needs deepspeed, which is not installed" in done.stdout
    assert "pip install 'training-flag-resolver[deepspeed]'" in done.stdout
    assert importlib.util.find_spec("runtime") is not None


def test_a_deepspeed_without_a_cpu_accelerator_is_refused_on_cpu_with_the_upgrade(tmp_path: Path) -> None:
    """An installed DeepSpeed from before its CPU accelerator (a package without accelerator/cpu_accelerator.py)."""
    old = tmp_path / "deepspeed"
    (old / "accelerator").mkdir(parents=True)
    (old / "__init__.py").write_text("__version__ = '0.9.0'\n")
    (old / "accelerator" / "__init__.py").write_text("")
    root = Path(__file__).resolve().parents[3]
    code = (
        "import sys\n"
        "sys.path.insert(0, 'tests/runtime')\n"
        "import runtime\n"
        "from runtime_configs import ddp_config\n"
        "try:\n"
        "    runtime.build(ddp_config(2, strategy='deepspeed'))\n"
        "except runtime.RuntimeConfigError as error:\n"
        "    print(error)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "the installed DeepSpeed cannot run on cpu (it has no CPU accelerator)" in done.stdout
    assert "pip install -U deepspeed" in done.stdout
