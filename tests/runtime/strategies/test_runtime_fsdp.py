"""FSDP (torch's fully_shard) with 2 real gloo processes on CPU: training, options, checkpoints, memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from runtime_configs import ddp_config
from sharded_workers import (
    checkpoint_round_trip,
    shard_indices,
    sharded_memory,
    small_model,
    train_and_gather,
    wrapped_with,
)

import runtime
from runtime.strategies import FSDPStrategy

pytestmark = pytest.mark.timeout(240)


def fsdp(precision: str = "32-true", **options: Any) -> runtime.Strategy:
    return runtime.build(ddp_config(2, strategy="fsdp", precision=precision), timeout=120, **options)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true"])
def test_fsdp_trains_and_every_rank_gathers_the_same_parameters(precision: str) -> None:
    result = fsdp(precision).launch(train_and_gather)

    losses = result["losses"]
    assert losses[-1] < 0.1 * losses[0], losses
    assert result["identical"]
    assert result["parameter_type"] == "DTensor"  # sharded
    assert result["full_shapes"]["0.weight"] == (32, 8)  # gathered in full
    expected_dtype = "torch.bfloat16" if precision == "bf16-true" else "torch.float32"
    assert result["parameter_dtype"] == expected_dtype


def test_mixed_precision_goes_through_fsdps_policy_not_autocast() -> None:
    result = fsdp("bf16-mixed").launch(wrapped_with)
    assert result["policies"]["mp_policy"] == "MixedPrecisionPolicy"
    assert result["param_dtype"] == "torch.bfloat16"
    assert result["autocasts"] == "nullcontext"


def test_cpu_offload_from_the_fsdp_cpu_offload_alias() -> None:
    import resolver

    config = resolver.resolve(strategy="fsdp_cpu_offload", devices=2, accelerator="cpu")
    assert dict(config.strategy_options) == {"cpu_offload": True}
    import attrs

    result = runtime.build(attrs.evolve(config, launcher="fork"), timeout=120).launch(wrapped_with)
    assert result["policies"]["offload_policy"] == "CPUOffloadPolicy"
    assert result["losses"][-1] < result["losses"][0]


@pytest.mark.parametrize(
    ("options", "units"),
    [
        ({}, ["", "0", "2", "4"]),  # default: each child with parameters, and the root
        ({"wrap_modules": ["Linear"]}, ["", "0", "2", "4"]),
        ({"wrap_modules": ["torch.nn.Linear"]}, ["", "0", "2", "4"]),
        ({"wrap_modules": ["torch.nn.ReLU"]}, ["", "1", "3"]),
        ({"min_num_params": 1000}, ["", "2"]),  # only the 32x32 layer (1056 parameters) is that big
    ],
)
def test_the_wrap_policy_chooses_the_units(options: dict[str, Any], units: list[str]) -> None:
    assert fsdp(**options).launch(wrapped_with)["units"] == units


def test_wrap_policy_mistakes_are_precise_errors() -> None:
    with pytest.raises(runtime.RuntimeConfigError, match="both wrap_modules and min_num_params"):
        fsdp(wrap_modules=["Linear"], min_num_params=10)
    strategy = fsdp(wrap_modules=["Block"])
    assert isinstance(strategy, FSDPStrategy)
    with pytest.raises(runtime.RuntimeConfigError, match=r"wrap_modules=\['Block'\] matches no submodule.*Linear"):
        strategy.units(small_model())
    with pytest.raises(runtime.RuntimeConfigError, match="cannot import 'torch.nn.Blocks'"):
        fsdp(wrap_modules=["torch.nn.Blocks"]).units(small_model())
    with pytest.raises(runtime.RuntimeConfigError, match="wrap_modules"):
        fsdp(wrap_modules=[torch.nn.Linear])  # classes cannot travel to the ranks as data: names only


@pytest.mark.parametrize("momentum", [0.9, 0.0], ids=["sgd-momentum", "plain-sgd"])
@pytest.mark.parametrize("kind", ["full", "sharded"])
def test_checkpoints_round_trip_on_two_ranks(tmp_path: Path, kind: str, momentum: float) -> None:
    # Plain SGD keeps no tensors per parameter: torch's full-state loader cannot place such a
    # state ("Expected device to be set"), the runtime loads its settings itself.
    path = tmp_path / "checkpoint"
    result = fsdp(state_dict_type=kind).launch(checkpoint_round_trip, str(path), momentum)

    assert result["weights_restored"] and result["optimizer_restored"] and result["identical"]
    assert result["extras"] == {"step": 5, "note": "saved"}
    assert path.is_dir() == (kind == "sharded")


def test_a_full_checkpoint_loads_into_a_plain_single_process_model(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    result = fsdp(state_dict_type="full").launch(checkpoint_round_trip, str(path))

    plain = small_model(seed=3)
    plain.load_state_dict(torch.load(path, weights_only=False)["model"])  # strict: same names, full shapes
    for name, tensor in plain.state_dict().items():
        assert torch.equal(tensor, result["saved"][name])


def test_sharded_memory_per_rank_is_about_half_of_one_replica() -> None:
    figures = fsdp().launch(sharded_memory, 8, 256)
    ratio = figures["held"] / figures["unsharded"]
    print(
        f"FSDP, 2 ranks, 8 x Linear(256, 256) + Adam: {figures['held']} of {figures['unsharded']} bytes per rank "
        f"({ratio:.3f})"
    )
    assert 0.45 <= ratio <= 0.55


def test_dataloaders_are_sharded_as_with_ddp(tmp_path: Path) -> None:
    fsdp().launch(shard_indices, 10, tmp_path)
    seen = [json.loads((tmp_path / f"shards-{rank}.json").read_text()) for rank in (0, 1)]
    assert sorted(seen[0]["val"] + seen[1]["val"]) == list(range(10))
    assert not set(seen[0]["val"]) & set(seen[1]["val"])
