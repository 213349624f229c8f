"""Giving each rank its shard of a DataLoader: rebuild it around a DistributedSampler that counts epochs;
or, for a run that resumes mid-epoch on any number of ranks, a batch sampler that starts at the run's data position."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Sampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from runtime.errors import DataLoaderError

__all__ = ["EpochDistributedSampler", "ResumableBatchSampler", "is_shuffled", "with_distributed_sampler"]

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


class ResumableBatchSampler(Sampler[list[int]]):
    """This rank's batches, from the run's data position on, for any number of ranks.

    The run reads one stream of samples: epoch 0's order of the dataset, then epoch 1's, and so on,
    each order fixed by ``seed`` and the epoch alone (``shuffle=False``: the dataset's order), never
    by the number of ranks. ``consumed`` is the run's position in that stream: the samples all ranks
    together have taken so far (0 at the start; :meth:`consumed_after` gives the next value, to save
    with each checkpoint). Each step takes the next ``batch_size * num_replicas`` samples and rank
    ``r`` takes the ``r``-th ``batch_size`` of them, so every rank has a full batch at every step. A
    run resumed from a checkpoint's ``consumed``, on the same or on another number of ranks, takes
    every sample of every epoch exactly once: none repeated, none skipped.

    One pass yields the steps up to the one that takes the last sample of the epoch ``consumed`` is in
    (:attr:`epoch`); that last step may take the first samples of the next epoch, and the next pass
    (a sampler built from :meth:`consumed_after`) goes on from there. Give it to a ``DataLoader`` as
    ``batch_sampler=``; ``Strategy.process_dataloader`` returns such a loader unchanged.
    """

    def __init__(
        self,
        dataset: Sized | int,
        *,
        batch_size: int,
        num_replicas: int,
        rank: int,
        consumed: int = 0,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        size = dataset if isinstance(dataset, int) else len(dataset)
        if size < 1 or batch_size < 1 or num_replicas < 1:
            raise ValueError(
                f"ResumableBatchSampler needs a dataset, batch_size and num_replicas of at least 1 (got {size}, "
                f"{batch_size}, {num_replicas})"
            )
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not one of the {num_replicas} replicas (0 to {num_replicas - 1})")
        if consumed < 0:
            raise ValueError(f"consumed counts the samples taken so far, so it cannot be negative (got {consumed})")
        self.size, self.batch_size, self.num_replicas, self.rank = size, batch_size, num_replicas, rank
        self.consumed, self.shuffle, self.seed = consumed, shuffle, seed
        #: The epoch the first batch is taken from.
        self.epoch = consumed // size

    def order(self, epoch: int) -> list[int]:
        """Epoch ``epoch``'s order of the dataset's indices: the same on every rank and for any number of
        ranks (shuffled as ``DistributedSampler`` shuffles that epoch with this seed)."""
        if not self.shuffle:
            return list(range(self.size))
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()

    def __len__(self) -> int:
        """The steps of one pass: the same on every rank."""
        step = self.batch_size * self.num_replicas
        return -(-((self.epoch + 1) * self.size - self.consumed) // step)

    def __iter__(self) -> Iterator[list[int]]:
        orders: dict[int, list[int]] = {}
        for step in range(len(self)):
            first = self.consumed + step * self.batch_size * self.num_replicas + self.rank * self.batch_size
            batch = []
            for position in range(first, first + self.batch_size):
                epoch, offset = divmod(position, self.size)
                if epoch not in orders:
                    orders[epoch] = self.order(epoch)
                batch.append(orders[epoch][offset])
            yield batch

    def consumed_after(self, steps: int) -> int:
        """The run's position once every rank has taken ``steps`` batches of this sampler."""
        return self.consumed + steps * self.batch_size * self.num_replicas


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
    if isinstance(loader.sampler, DistributedSampler) or isinstance(loader.batch_sampler, ResumableBatchSampler):
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
