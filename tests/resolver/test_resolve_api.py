"""The public Python API: resolve(), ResolvedConfig, Environment, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import attrs
import pytest

import resolver
from resolver import ConflictError, Environment, RecordingReporter, ResolutionError, ResolvedConfig, resolve


def test_import_does_not_import_torch():
    code = (
        "import sys, resolver; resolver.resolve(devices=2, environment=resolver.Environment()); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_probe_does_not_import_torch_here():
    code = (
        "import sys, resolver; env = resolver.Environment.probe(); print('torch' in sys.modules, env.cuda_device_count)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "0"]


def test_everyday_resolution(laptop):
    config = resolve(devices=2, strategy="ddp", environment=laptop)
    assert (config.accelerator, config.num_devices, config.device_ids) == ("cpu", 2, (0, 1))
    assert (config.strategy, config.launcher, config.collective) == ("ddp", "subprocess", "torch")
    assert (config.process_group_backend, config.cluster_environment, config.precision) == ("gloo", "local", "32-true")
    assert (config.world_size, config.global_rank, config.local_rank, config.node_rank) == (2, 0, 0, 0)


def test_config_is_frozen_and_round_trips_through_json(gpu_box):
    config = resolve(devices=[1, 3], strategy="ddp_spawn", precision="bf16-mixed", environment=gpu_box)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.strategy = "fsdp"  # type: ignore[misc]
    again = ResolvedConfig.from_json(config.to_json())
    assert again == config
    assert again.provenance == config.provenance
    assert (again.strategy, again.launcher, again.device_ids) == ("ddp", "spawn", (1, 3))


def test_every_field_has_provenance(gpu_box):
    config = resolve(devices=2, environment=gpu_box)
    fields = [a.name for a in attrs.fields(ResolvedConfig) if a.name not in ("provenance", "notes", "flags")]
    assert sorted(config.provenance) == sorted(fields)
    assert config.provenance["num_devices"].kind == "flag"
    assert config.provenance["num_devices"].source == "devices=2"
    assert config.provenance["accelerator"].rule == "accelerator.auto.cuda"


def test_conflict_error_names_both_sides_and_a_fix() -> None:
    mac = Environment(mps_available=True)
    with pytest.raises(ConflictError) as info:
        resolve(strategy="fsdp", environment=mac)
    error = info.value
    assert isinstance(error, ValueError)
    assert error.rule == "strategy.fsdp.accelerator"
    assert [s.slot for s in error.sides] == ["strategy", "accelerator"]
    assert [s.value for s in error.sides] == ["fsdp", "mps"]
    assert error.sides[0].provenance.kind == "flag"
    assert error.sides[1].provenance.rule == "accelerator.auto.mps"
    assert error.rule_ids == ("strategy.fsdp.accelerator", "strategy.explicit", "accelerator.auto.mps")
    assert "accelerator='cuda'" in error.hint
    assert "strategy='fsdp'" in str(error) or "strategy = 'fsdp'" in str(error)


def test_environment_none_probes_the_machine():
    config = resolve()
    assert config.accelerator == "cpu"


def test_stages_are_typed_frozen_values(laptop):
    trace = RecordingReporter()
    resolve(devices=2, environment=laptop, reporter=trace)
    assert list(trace.stages) == ["input", "normalized", "placed", "clustered", "planned", "resolved"]
    placed = trace.stages["placed"]
    assert type(placed).__name__ == "PlacedStage"
    assert (placed.accelerator, placed.num_devices) == ("cpu", 2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        placed.accelerator = "cuda"


@pytest.mark.parametrize(
    ("flag", "value", "replacement"),
    [
        ("gpus", 2, "accelerator='gpu', devices=2"),
        ("tpu_cores", 8, "accelerator='tpu', devices=8"),
        ("num_processes", 4, "accelerator='cpu', devices=4"),
        ("distributed_backend", "ddp", "strategy='ddp'"),
        ("auto_select_gpus", True, "devices='auto'"),
        ("ipus", 2, "IPUs are no longer supported"),
    ],
)
def test_removed_flags_spell_out_the_replacement(laptop, flag, value, replacement):
    with pytest.raises(ResolutionError) as info:
        resolve(environment=laptop, **{flag: value})
    assert f"{flag}={value!r} was removed" in str(info.value)
    assert replacement in info.value.hint


def test_unknown_keyword_is_a_type_error(laptop):
    with pytest.raises(TypeError, match="devcies"):
        resolve(devcies=2, environment=laptop)


def test_environment_from_toml_and_unknown_fields(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text(
        textwrap.dedent(
            """
        cuda_device_count = 4
        hostname = "node7"
        [variables]
        SLURM_NTASKS = "4"
        """
        )
    )
    env = Environment.from_toml(path)
    assert (env.cuda_device_count, env.hostname, env.variables["SLURM_NTASKS"]) == (4, "node7", "4")
    path.write_text("gpu_count = 4\n")
    with pytest.raises(ResolutionError, match="unknown environment field\\(s\\) gpu_count"):
        Environment.from_toml(path)


def test_environment_rejects_negative_counts():
    with pytest.raises(ResolutionError, match="cuda_device_count must be an int >= 0"):
        Environment(cuda_device_count=-1)


def test_probe_keeps_only_relevant_variables():
    env = Environment.probe({"SLURM_NTASKS": "2", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "", "RESOLVER_DEVICES": "2"})
    assert dict(env.variables) == {"SLURM_NTASKS": "2", "CUDA_VISIBLE_DEVICES": "", "RESOLVER_DEVICES": "2"}


def test_public_names():
    assert {"resolve", "ResolvedConfig", "Environment", "ConflictError", "ResolutionError"} <= set(resolver.__all__)


def test_explicit_environment_never_probes_the_machine(monkeypatch, gpu_box):
    import resolver._snapshot.probes as probing

    def forbidden(*args, **kwargs):
        raise AssertionError("the real machine was probed")

    for name in (
        "cuda_device_count",
        "mps_available",
        "xla_device_count",
        "module_available",
        "is_interactive",
        "fork_available",
    ):
        monkeypatch.setattr(probing, name, forbidden)
    assert resolve(devices=8, environment=gpu_box).num_devices == 8
    with pytest.raises(AssertionError, match="probed"):
        Environment.probe()


def test_invalid_variable_error_names_the_variable():
    env = Environment(variables={"SLURM_NTASKS": "abc"})
    with pytest.raises(ResolutionError) as info:
        resolve(environment=env)
    assert info.value.message == "SLURM_NTASKS: 'abc' is not an integer"
    assert info.value.sides[0].provenance.describe() == "variable SLURM_NTASKS=abc"


def test_lists_are_shown_as_the_user_wrote_them(laptop):
    with pytest.raises(ResolutionError) as info:
        resolve(accelerator="cpu", devices=[0, 0], environment=laptop)
    assert "devices=[0, 0] names device 0 twice" in str(info.value)
    assert info.value.sides[0].provenance.source == "devices=[0, 0]"


def test_booleans_are_not_numbers(laptop):
    with pytest.raises(ResolutionError, match="num_nodes: True is not an integer"):
        resolve(num_nodes=True, environment=laptop)


def test_two_plugins_of_one_kind_are_an_error(laptop):
    with pytest.raises(ResolutionError, match="plugins name 2 of the same kind"):
        resolve(plugins=["slurm", "lsf"], environment=laptop)


def test_unset_variables_read_as_unset_in_messages():
    env = Environment(variables={"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_NODEID": "0"})
    with pytest.raises(ResolutionError) as info:
        resolve(environment=env)
    assert "SLURM_LOCALID=unset" in info.value.message
