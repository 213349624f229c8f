"""``Strategy.process_dataloader``: each rank gets its shard; everything else about the loader stays."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from runtime_configs import ddp_config, single_device_config
from runtime_workers import shard_indices
from torch.utils.data import DataLoader, Sampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

import runtime


def collate_pairs(batch: list[int]) -> list[int]:
    return batch


def rank_strategy(rank: int, **config_overrides: object) -> runtime.Strategy:
    return runtime.build(ddp_config(global_rank=rank, local_rank=rank, **config_overrides))


def test_a_distributed_loader_keeps_every_other_argument() -> None:
    original = DataLoader(
        list(range(20)),
        batch_size=4,
        shuffle=True,
        num_workers=1,
        collate_fn=collate_pairs,
        drop_last=True,
        pin_memory=False,
        timeout=5.0,
        prefetch_factor=3,
        persistent_workers=True,
    )

    loader = rank_strategy(1).process_dataloader(original, "train")

    assert isinstance(loader.sampler, DistributedSampler)
    assert (loader.sampler.num_replicas, loader.sampler.rank, loader.sampler.shuffle) == (2, 1, True)
    for name in (
        "dataset",
        "batch_size",
        "num_workers",
        "collate_fn",
        "drop_last",
        "pin_memory",
        "timeout",
        "prefetch_factor",
        "persistent_workers",
    ):
        assert getattr(loader, name) == getattr(original, name), name


@pytest.mark.parametrize("use", ["val", "test", "predict"])
def test_only_training_data_is_shuffled(use: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", runtime.DataLoaderWarning)
        loader = rank_strategy(0).process_dataloader(DataLoader(list(range(8)), shuffle=True), use)
    assert isinstance(loader.sampler, DistributedSampler) and loader.sampler.shuffle is False


def test_an_unshuffled_training_loader_stays_unshuffled() -> None:
    loader = rank_strategy(0).process_dataloader(DataLoader(list(range(8))), "train")
    assert loader.sampler.shuffle is False  # type: ignore[attr-defined]


def test_a_shuffled_evaluation_loader_is_pointed_out() -> None:
    with pytest.warns(runtime.DataLoaderWarning, match="val DataLoader shuffles"):
        rank_strategy(0).process_dataloader(DataLoader(list(range(8)), shuffle=True), "val")


def test_the_shards_of_all_ranks_are_disjoint_and_cover_the_dataset() -> None:
    shards = [
        list(rank_strategy(rank).process_dataloader(DataLoader(list(range(10)), batch_size=2), "val"))
        for rank in (0, 1)
    ]
    seen = [[int(i) for batch in shard for i in batch] for shard in shards]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(10))


def test_use_distributed_sampler_false_leaves_the_loader_alone() -> None:
    original = DataLoader(list(range(8)), batch_size=2)
    strategy = runtime.build(ddp_config(), use_distributed_sampler=False)
    assert strategy.process_dataloader(original, "train") is original


def test_one_process_leaves_the_loader_alone() -> None:
    original = DataLoader(list(range(8)), batch_size=2, shuffle=True)
    assert runtime.build(single_device_config()).process_dataloader(original, "train") is original


def test_spawned_ranks_with_worker_processes_are_warned() -> None:
    loader = DataLoader(list(range(8)), num_workers=2)
    with pytest.warns(runtime.DataLoaderWarning, match="persistent_workers=True.*strategy='ddp'"):
        rank_strategy(0, launcher="spawn").process_dataloader(loader, "train")


def test_no_worker_warning_for_persistent_workers_or_other_launchers() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", runtime.DataLoaderWarning)
        rank_strategy(0, launcher="spawn").process_dataloader(
            DataLoader(list(range(8)), num_workers=2, persistent_workers=True), "train"
        )
        rank_strategy(0, launcher="subprocess").process_dataloader(DataLoader(list(range(8)), num_workers=2), "train")


def test_a_custom_sampler_cannot_be_sharded_silently() -> None:
    class EveryOther(Sampler[int]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(range(0, 8, 2))

        def __len__(self) -> int:
            return 4

    with pytest.raises(ValueError, match="(?s)custom sampler.*use_distributed_sampler=False"):
        rank_strategy(0).process_dataloader(DataLoader(list(range(8)), sampler=EveryOther()), "train")
    with pytest.raises(ValueError, match="custom batch_sampler"):
        batches = DataLoader(list(range(8)), batch_sampler=[[0, 1], [2, 3]])
        rank_strategy(0).process_dataloader(batches, "train")


def test_an_unknown_use_is_rejected() -> None:
    with pytest.raises(ValueError, match="process_dataloader.*use must be one of train, val, test, predict, got 'tra"):
        rank_strategy(0).process_dataloader(DataLoader([1]), "training")  # type: ignore[arg-type]


def test_an_already_distributed_loader_is_kept() -> None:
    dataset = list(range(8))
    loader = DataLoader(dataset, sampler=DistributedSampler(dataset, num_replicas=2, rank=0))
    assert rank_strategy(0).process_dataloader(loader, "train") is loader
    assert isinstance(DataLoader(dataset).sampler, SequentialSampler)


@pytest.mark.timeout(120)
def test_two_ranks_iterate_disjoint_shards_that_cover_the_dataset(tmp_path: Path) -> None:
    runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(shard_indices, 10, tmp_path)

    seen = [json.loads((tmp_path / f"shards-{rank}.json").read_text()) for rank in (0, 1)]
    for use in ("train", "val"):
        rank0, rank1 = seen[0][use], seen[1][use]
        assert len(rank0) == len(rank1) == 5
        assert not set(rank0) & set(rank1)
        assert sorted(rank0 + rank1) == list(range(10))
    assert seen[0]["val"] == [0, 2, 4, 6, 8]  # evaluation order is not shuffled


def passes(loader: DataLoader, count: int) -> list[list[int]]:
    return [[int(i) for batch in loader for i in batch] for _ in range(count)]


def plain_sampler_orders(epochs: list[int], rank: int = 1) -> list[list[int]]:
    """What torch's own DistributedSampler yields for these epochs (set by hand)."""
    sampler = DistributedSampler(list(range(16)), num_replicas=2, rank=rank, shuffle=True)
    orders = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


def test_each_pass_over_a_sharded_training_loader_is_the_next_epoch_without_set_epoch() -> None:
    loader = rank_strategy(1).process_dataloader(DataLoader(list(range(16)), batch_size=4, shuffle=True), "train")

    orders = passes(loader, 3)

    assert orders == plain_sampler_orders([0, 1, 2])
    assert orders[0] != orders[1]  # reshuffled


def test_set_epoch_still_chooses_the_epoch_of_the_next_pass_and_the_passes_go_on_from_there() -> None:
    loader = rank_strategy(1).process_dataloader(DataLoader(list(range(16)), batch_size=4, shuffle=True), "train")
    every_epoch = []
    for epoch in range(2):  # a loop written for torch's sampler, which calls set_epoch itself
        loader.sampler.set_epoch(epoch)
        every_epoch += passes(loader, 1)
    loader.sampler.set_epoch(7)  # resuming at epoch 7

    assert every_epoch == plain_sampler_orders([0, 1])
    assert passes(loader, 2) == plain_sampler_orders([7, 8])
