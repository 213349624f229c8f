"""The end of a save that several ranks wrote: every rank learns whether any failed, and all raise alike.

A rank whose write failed (a full disk) does not leave the others waiting at a barrier: each rank
passes its outcome to an all-gather; if any failed, rank 0 removes what the save wrote and every rank
raises the same :class:`~runtime.errors.CheckpointError` (``CheckpointNoSpaceError`` for a full disk).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from runtime.checkpoint import discard_save, no_space
from runtime.errors import CheckpointError, CheckpointNoSpaceError

if TYPE_CHECKING:
    from runtime.collectives.base import Collective

__all__ = ["SavingStrategy", "settle_save"]


class SavingStrategy(Protocol):
    """What a save's end asks of the strategy (``runtime.strategies.base.Strategy``, which imports this
    module: a protocol here rather than an import back)."""

    @property
    def collective(self) -> Collective: ...

    @property
    def is_global_zero(self) -> bool: ...


def _outcome(failure: BaseException | None) -> tuple[bool, str] | None:
    if failure is None:
        return None
    cause = no_space(failure)
    if cause is not None:
        return True, cause
    if isinstance(failure, CheckpointError):
        return False, str(failure).splitlines()[0]
    return False, f"{type(failure).__name__}: {(str(failure).splitlines() or [''])[0]}"


def settle_save(
    strategy: SavingStrategy,
    path: str | os.PathLike[str],
    failure: BaseException | None,
    before: list[str] | None,
    *,
    directory: bool = True,
) -> None:
    """Every rank: exchange whether this rank's part of the save at ``path`` failed (``failure``); on a
    failure anywhere, rank 0 removes what the save wrote into the ``directory`` (``before``: its entries
    before, ``None`` when the save made it; a single file's writer removed its partial file itself) and
    every rank raises the same error."""
    outcomes = strategy.collective.all_gather_object(_outcome(failure))
    failed = [(rank, outcome) for rank, outcome in enumerate(outcomes) if outcome is not None]
    if not failed:
        return
    if not directory:
        removed = "the partial file is removed"
    else:
        removed = discard_save(path, before) if strategy.is_global_zero else ""
        removed = strategy.collective.broadcast_object(removed)
    spaceless = [(rank, outcome) for rank, outcome in failed if outcome[0]]
    rank, (_, detail) = (spaceless or failed)[0]
    if not spaceless and failure is not None:
        raise failure  # the failing rank keeps its own error (the others get a CheckpointError naming it)
    error: CheckpointError
    if spaceless:
        error = CheckpointNoSpaceError(os.fspath(path), rank, detail, removed)
    else:
        error = CheckpointError(
            os.fspath(path), f"saving the checkpoint at {os.fspath(path)} failed on rank {rank}: {detail}; {removed}"
        )
    raise error from failure
