"""Resuming on another number of ranks, and mid-epoch: the weights and the data position carry over.

Real gloo processes on the CPU. A checkpoint that 2 ranks saved loads on 1 and on 3 ranks under
``ddp`` and ``fsdp`` (full and sharded state dicts) with exactly the saved weights; the data
position saved with it (``consumed``, through ``runtime.dataloaders.ResumableBatchSampler``) makes
the resumed run see every sample of the epoch exactly once; and a run whose rank fails once,
restarted by ``max_restarts``, ends with exactly the weights of a run without the fault.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from resume_workers import save_then_load, train
from runtime_configs import ddp_config
from torch.utils.data import DataLoader

import resolver
import runtime
from runtime.dataloaders import ResumableBatchSampler

pytestmark = pytest.mark.timeout(240)

SAMPLES = 36  # one epoch: 12 samples on 2 ranks, then 24 on 1 rank or on 3 (batches of 2)
SAVED_AT = 12  # samples: 3 steps of 2 ranks with batches of 2


def equal(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def copy_of(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination)
    return destination


def fsdp(devices: int, **options: Any) -> runtime.Strategy:
    """``fsdp`` on ``devices`` forked CPU ranks (a test cannot be re-run by the subprocess launcher)."""
    config = resolver.resolve(strategy="fsdp", devices=devices, accelerator="cpu")
    return runtime.build(attrs.evolve(config, launcher="fork"), timeout=120, **options)


def test_a_ddp_checkpoint_of_2_ranks_resumes_on_1_and_on_3_with_its_weights_and_every_sample_seen_once(
    tmp_path: Path,
) -> None:
    flags: dict[str, Any] = {"strategy": "ddp_fork", "accelerator": "cpu", "timeout": 120}
    saved = runtime.launch(
        train, str(tmp_path / "two"), samples=SAMPLES, until=SAVED_AT, save_every_step=False, devices=2, **flags
    )
    assert saved["seen"] == sorted(set(saved["seen"])) and len(saved["seen"]) == SAVED_AT

    for devices in (1, 3):
        folder = copy_of(tmp_path / "two", tmp_path / f"on-{devices}")
        resumed = runtime.launch(train, str(folder), samples=SAMPLES, until=SAMPLES, devices=devices, **flags)

        assert equal(resumed["loaded"], saved["final"]), devices
        assert sorted(saved["seen"] + resumed["seen"]) == list(range(SAMPLES)), devices  # none twice, none missed


def test_fsdp_checkpoints_of_2_ranks_full_and_sharded_load_on_1_and_on_3_with_their_weights(tmp_path: Path) -> None:
    saved = {}
    for kind in ("full", "sharded"):
        result = fsdp(2, state_dict_type=kind).launch(
            train, str(tmp_path / kind), samples=SAMPLES, until=SAVED_AT, save_every_step=False
        )
        saved[kind] = result["final"]
    checkpoints = {kind: str(tmp_path / kind / f"at-{SAVED_AT:04d}") for kind in saved}
    assert Path(checkpoints["full"]).is_file() and Path(checkpoints["sharded"]).is_dir()

    for devices in (1, 3):
        loaded = fsdp(devices).launch(save_then_load, checkpoints)

        for kind in saved:
            assert loaded[kind]["consumed"] == SAVED_AT
            assert equal(loaded[kind]["weights"], saved[kind]), (kind, devices)


def test_a_run_whose_rank_fails_mid_epoch_once_ends_with_the_weights_of_the_run_without_the_fault(
    tmp_path: Path,
) -> None:
    # 33 samples, 4 a step: the ninth step takes the last sample of epoch 0 and the first 3 of epoch 1.
    flags: dict[str, Any] = {"devices": 2, "strategy": "ddp_fork", "accelerator": "cpu", "timeout": 120}
    clean = runtime.launch(train, str(tmp_path / "clean"), samples=33, until=66, **flags)
    faulty = runtime.launch(train, str(tmp_path / "faulty"), samples=33, until=66, fault_at=16, max_restarts=1, **flags)

    assert (clean["restart_count"], faulty["restart_count"]) == (0, 1)
    assert faulty["loaded"] is not None  # the second attempt resumed from a checkpoint, mid-epoch
    assert equal(faulty["final"], clean["final"])  # bit for bit


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_the_ranks_batches_step_by_step_are_the_stream_of_epoch_orders_from_the_position_on(ranks: int) -> None:
    samplers = [
        ResumableBatchSampler(33, batch_size=2, num_replicas=ranks, rank=rank, consumed=12) for rank in range(ranks)
    ]
    steps = [list(sampler) for sampler in samplers]

    assert {len(batches) for batches in steps} == {len(samplers[0])}  # every rank, every step, a full batch
    taken = [i for step in zip(*steps, strict=True) for batch in step for i in batch]
    stream = samplers[0].order(0) + samplers[0].order(1)
    assert taken == stream[12 : samplers[0].consumed_after(len(samplers[0]))]
    assert sorted(stream[:33]) == list(range(33)) and stream[:33] != list(range(33))  # shuffled, each once


def test_process_dataloader_keeps_a_loader_that_already_takes_this_ranks_batches() -> None:
    strategy = runtime.build(ddp_config(2, global_rank=1, local_rank=1))
    sampler = ResumableBatchSampler(10, batch_size=2, num_replicas=2, rank=1, consumed=4)
    loader = DataLoader(list(range(10)), batch_sampler=sampler)

    assert strategy.process_dataloader(loader, "train") is loader  # a custom batch_sampler is refused otherwise
