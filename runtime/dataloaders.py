"""Giving each rank its shard of a DataLoader: rebuild it around a DistributedSampler that counts epochs."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from runtime.errors import DataLoaderError

__all__ = ["EpochDistributedSampler", "is_shuffled", "with_distributed_sampler"]

# Arguments of DataLoader that describe the sampling, replaced by the distributed sampler.
_SAMPLING_ARGUMENTS = frozenset({"self", "shuffle", "sampler", "batch_sampler"})


class EpochDistributedSampler(DistributedSampler):  # type: ignore[type-arg]
    """A ``DistributedSampler`` whose every pass over the data is the next epoch.

    A training loop need not call ``set_epoch``: pass ``n`` (from 0) is shuffled as epoch ``n``,
    as Lightning does for you. ``set_epoch(n)`` still works, the plain sampler's way: the next pass
    is epoch ``n`` (a loop that calls it every epoch gets what it asks for; a resumed run starts
    where it left off), and the passes after it go on from there.
    """

    def __iter__(self) -> Iterator[Any]:
        indices = super().__iter__()  # computed now, from the current epoch
        self.epoch += 1
        return indices


def is_shuffled(loader: DataLoader[Any]) -> bool:
    """Whether ``loader`` visits its dataset in random order."""
    sampler = loader.sampler
    if isinstance(sampler, DistributedSampler):
        return bool(sampler.shuffle)
    return isinstance(sampler, RandomSampler)


def _loader_arguments(loader: DataLoader[Any]) -> dict[str, Any]:
    """The constructor arguments of ``loader`` other than its sampling, read back from it."""
    arguments: dict[str, Any] = {}
    for name in inspect.signature(DataLoader.__init__).parameters:
        if name not in _SAMPLING_ARGUMENTS and hasattr(loader, name):
            arguments[name] = getattr(loader, name)
    if arguments.get("num_workers", 0) == 0:
        arguments.pop("prefetch_factor", None)  # only allowed with worker processes
        arguments["persistent_workers"] = False
    return arguments


def with_distributed_sampler(
    loader: DataLoader[Any], *, num_replicas: int, rank: int, shuffle: bool, seed: int = 0
) -> DataLoader[Any]:
    """A copy of ``loader`` that yields only rank ``rank``'s shard of the dataset.

    Everything else the loader was built with (batch size, workers, collate function,
    ``drop_last``, pinning, ...) is kept. Iterable datasets are returned unchanged: they must
    shard themselves. Each pass over the copy is a new epoch, reshuffled (:class:`EpochDistributedSampler`).
    """
    if isinstance(loader.dataset, IterableDataset):
        return loader
    if isinstance(loader.sampler, DistributedSampler):
        return loader
    if loader.batch_size is None:
        raise DataLoaderError(
            "this DataLoader was built with a custom batch_sampler, which the strategy cannot shard across ranks",
            hint="pass use_distributed_sampler=False to the strategy and shard the batches yourself (rank and world "
            "size are on the strategy)",
        )
    if not isinstance(loader.sampler, (SequentialSampler, RandomSampler)):
        raise DataLoaderError(
            f"this DataLoader uses a custom sampler ({type(loader.sampler).__name__}), which the "
            "strategy cannot shard across ranks",
            hint="pass use_distributed_sampler=False to the strategy and build a sampler that yields only this "
            "rank's indices",
        )
    sampler = EpochDistributedSampler(loader.dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
    arguments = _loader_arguments(loader)
    try:
        return type(loader)(sampler=sampler, **arguments)
    except TypeError as exc:
        raise DataLoaderError(
            f"cannot rebuild {type(loader).__name__} with a distributed sampler: its constructor does "
            f"not take DataLoader's arguments ({exc})",
            hint="pass use_distributed_sampler=False to the strategy and give the loader a DistributedSampler yourself",
        ) from exc
