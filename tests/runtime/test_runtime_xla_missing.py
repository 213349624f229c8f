"""Without torch_xla (the main environment): the XLA rules resolve, building says what to install,
and nothing imports torch_xla. The XLA runtime itself is tested by the tests marked ``xla`` (XLA environment)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import resolver
import runtime
from resolver import Environment

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed here: the xla tests cover it"
)

# A TPU host as the resolver sees it: 8 XLA devices, torch_xla importable there.
TPU_HOST = Environment(xla_device_count=8, torch_xla_available=True, hostname="tpu-vm")


def test_the_xla_rules_resolve_for_a_simulated_tpu_host() -> None:
    config = resolver.resolve(accelerator="tpu", environment=TPU_HOST)

    assert (config.accelerator, config.num_devices, config.strategy) == ("xla", 8, "xla")
    assert (config.launcher, config.collective, config.cluster_environment) == ("xla", "xla", "xla")
    assert config.world_size == 8

    single = resolver.resolve(accelerator="xla", devices=1, precision="bf16-true", environment=TPU_HOST)
    assert (single.strategy, single.launcher, single.precision) == ("single_xla", None, "bf16-true")


@pytest.mark.parametrize("devices", [8, 1])
def test_building_an_xla_config_says_what_to_install(devices: int) -> None:
    config = resolver.resolve(accelerator="tpu", devices=devices, environment=TPU_HOST)

    with pytest.raises(runtime.MissingDependencyError) as error:
        runtime.build(config)

    message = str(error.value)
    assert message.startswith("accelerator 'xla' needs torch_xla, which is not installed\n  hint: ")
    assert "torch_xla X.Y.Z needs torch X.Y.Z exactly" in message
    assert "pip install torch==2.9.0 torch_xla==2.9.0" in message
    assert "PJRT_DEVICE=CPU" in message
    assert error.value.package == "torch_xla"


def test_no_run_imports_torch_xla_unless_it_uses_xla() -> None:
    code = (
        "import sys, resolver, runtime\n"
        "runtime.build(resolver.resolve(accelerator='cpu', devices=2, strategy='ddp'))\n"
        "runtime.build(resolver.resolve(accelerator='cpu', devices=1))\n"
        "tpu = resolver.Environment(xla_device_count=8, torch_xla_available=True)\n"
        "resolver.resolve(accelerator='tpu', environment=tpu)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch_xla'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
