"""``build(config)`` assembles the strategy hub and its components from a ResolvedConfig."""

from __future__ import annotations

import pytest
import torch
from runtime_configs import ddp_config, single_device_config

import runtime
from runtime.accelerators import CPUAccelerator, CUDAAccelerator
from runtime.cluster import LocalEnvironment
from runtime.collectives import SingleDeviceCollective, TorchCollective
from runtime.launchers import ForkLauncher, SpawnLauncher, SubprocessScriptLauncher
from runtime.precision import BFloat16MixedPrecision, FullPrecision
from runtime.strategies import DDPStrategy, SingleDeviceStrategy


def test_a_single_device_config_builds_a_single_device_strategy_with_its_components() -> None:
    strategy = runtime.build(single_device_config())

    assert isinstance(strategy, SingleDeviceStrategy)
    assert isinstance(strategy.accelerator, CPUAccelerator)
    assert isinstance(strategy.precision, FullPrecision)
    assert isinstance(strategy.collective, SingleDeviceCollective)
    assert isinstance(strategy.cluster_environment, LocalEnvironment)
    assert isinstance(strategy.checkpoint_io, runtime.TorchCheckpointIO)
    assert strategy.launcher is None
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size) == (0, 0, 0, 1)
    assert strategy.root_device == torch.device("cpu")


@pytest.mark.parametrize(
    ("launcher", "launcher_class"),
    [("subprocess", SubprocessScriptLauncher), ("spawn", SpawnLauncher), ("fork", ForkLauncher), (None, type(None))],
)
def test_one_ddp_strategy_whatever_launcher_starts_the_processes(launcher: str | None, launcher_class: type) -> None:
    strategy = runtime.build(ddp_config(launcher=launcher, precision="bf16-mixed"))

    assert type(strategy) is DDPStrategy
    assert type(strategy.launcher) is launcher_class
    assert isinstance(strategy.collective, TorchCollective)
    assert isinstance(strategy.precision, BFloat16MixedPrecision)


def test_ranks_come_from_the_config() -> None:
    config = ddp_config(devices=2, num_nodes=2, world_size=4, global_rank=3, local_rank=1, node_rank=1)
    strategy = runtime.build(config)
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size) == (3, 1, 1, 4)
    assert not strategy.is_global_zero


def test_the_accelerator_is_device_logic_only() -> None:
    accelerator = runtime.build(single_device_config()).accelerator
    assert accelerator.is_available() and accelerator.device_count() >= 1
    assert accelerator.root_device(1, (0, 1)) == torch.device("cpu")
    for hub_api in ("barrier", "broadcast", "all_reduce", "all_gather", "setup_module", "save_checkpoint"):
        assert not hasattr(accelerator, hub_api), f"accelerator passes {hub_api} through"


def test_the_accelerator_declares_the_device_facts_strategies_and_precisions_ask_for() -> None:
    # DDP's device_ids, pinned offload memory (FSDP, DeepSpeed) and float16 loss scaling: CUDA's, in one
    # place (this machine cannot run CUDA; tests/runtime/accelerators/test_cuda_runtime.py runs them).
    cpu, cuda = CPUAccelerator(), CUDAAccelerator()
    assert (cpu.ddp_device_ids(torch.device("cpu")), cpu.pin_memory, cpu.float16_needs_grad_scaler) == (
        None,
        False,
        False,
    )
    assert (cuda.ddp_device_ids(torch.device("cuda", 1)), cuda.pin_memory, cuda.float16_needs_grad_scaler) == (
        [1],
        True,
        True,
    )


def test_single_device_strategy_refuses_a_multi_process_config() -> None:
    with pytest.raises(runtime.RuntimeConfigError, match="world_size 2"):
        runtime.build(ddp_config(strategy="single_device"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_config_for_a_device_this_machine_lacks_is_refused() -> None:
    with pytest.raises(runtime.RuntimeConfigError, match="accelerator 'cuda', which this machine does not have"):
        runtime.build(single_device_config(accelerator="cuda"))


def test_single_device_launch_runs_the_function_in_this_process() -> None:
    import os

    strategy = runtime.build(single_device_config())
    pid, gathered = strategy.launch(lambda s: (os.getpid(), s.collective.all_gather(torch.ones(2))))
    assert pid == os.getpid()
    assert len(gathered) == 1 and torch.equal(gathered[0], torch.ones(2))


def test_the_module_is_moved_cast_and_left_unwrapped_on_one_device() -> None:
    strategy = runtime.build(single_device_config(precision="64-true"))
    module = strategy.setup_module(torch.nn.Linear(2, 2))
    assert strategy.unwrap_module(module) is module
    assert next(module.parameters()).dtype == torch.float64
    batch = strategy.to_device({"x": torch.ones(2), "label": torch.tensor([1])})
    assert batch["x"].dtype == torch.float64 and batch["label"].dtype == torch.int64


def test_the_strategy_has_a_readable_repr() -> None:
    assert repr(runtime.build(ddp_config(launcher="spawn"))) == (
        "DDPStrategy(rank 0/2, device=cpu, precision=32-true, launcher=spawn)"
    )


def _answer(strategy: runtime.Strategy) -> int:
    return strategy.world_size


def test_a_strategy_launches_ranks_that_build_their_own_of_its_classes_one_made_by_hand_too() -> None:
    built = runtime.build(ddp_config(launcher="fork"))
    assert built.launch(_answer) == 2  # each forked rank assembled its own strategy

    by_hand = DDPStrategy(
        built.config,
        accelerator=built.accelerator,
        precision=built.precision,
        collective=built.collective,
        launcher=built.launcher,
        cluster_environment=built.cluster_environment,
    )
    assert by_hand.launch(_answer) == 2
