"""The part of :class:`~runtime.strategies.base.Strategy` that saves and loads checkpoints, through its
:class:`~runtime.checkpoint.CheckpointIO`: rank 0 writes and every rank learns the outcome, every rank
reads, and the newest complete checkpoint of a folder is found.

``Strategy`` inherits it; a strategy that shards its state (FSDP, DeepSpeed) overrides these methods.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from runtime.checkpoint import CheckpointIO, latest_checkpoint
from runtime.preemption import recording_saves
from runtime.strategies.guard import guard_methods

if TYPE_CHECKING:
    from runtime.collectives.base import Collective

__all__ = ["Checkpoints"]


class Checkpoints:
    """Saving, loading and finding checkpoints."""

    #: How checkpoints are written and read (``TorchCheckpointIO`` unless the strategy was given another).
    checkpoint_io: CheckpointIO

    if TYPE_CHECKING:  # the strategy's identity and modules, which Strategy defines

        @property
        def collective(self) -> Collective: ...

        @property
        def global_rank(self) -> int: ...

        @property
        def is_global_zero(self) -> bool: ...

        @property
        def root_device(self) -> torch.device: ...

        def unwrap_module(self, module: torch.nn.Module) -> torch.nn.Module: ...

    def save_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
        """Global rank 0 writes ``state`` to ``path``; every rank then waits until it is written (and raises
        rank 0's error alike if the write failed: ``CheckpointNoSpaceError`` for a full disk).

        Modules and optimizers in ``state`` are saved as their ``state_dict()`` (modules
        unwrapped first, so the file loads into a plain module).
        """
        from runtime.strategies.checkpoint_saving import settle_save

        checkpoint = {key: self._saveable(value) for key, value in state.items()}
        failure: BaseException | None = None
        if self.is_global_zero:
            try:
                self.checkpoint_io.save(checkpoint, path)
            except Exception as exc:  # noqa: BLE001 (every rank raises it alike, in settle_save)
                failure = exc
        settle_save(self, path, failure, None, directory=False)  # the barrier: every rank learns the outcome

    def load_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Read the checkpoint on every rank (onto :attr:`root_device`) and return it.

        Modules and optimizers in ``state`` get their saved state loaded in place.
        """
        checkpoint = self.checkpoint_io.load(path, map_location=self.root_device)
        for key, target in (state or {}).items():
            if key not in checkpoint:
                raise KeyError(f"the checkpoint at {path} has no entry {key!r} (it has {sorted(checkpoint)})")
            if isinstance(target, torch.nn.Module):
                self.unwrap_module(target).load_state_dict(checkpoint[key])
            elif isinstance(target, torch.optim.Optimizer):
                target.load_state_dict(checkpoint[key])
        return checkpoint

    def latest_checkpoint(self, folder: str | os.PathLike[str]) -> Path | None:
        """The newest complete checkpoint saved into ``folder`` (one :meth:`save_checkpoint` path per
        entry: ``folder/epoch-3.ckpt``, or a directory for DeepSpeed and sharded FSDP), or ``None``.

        A save cut short (a rank killed while writing) is skipped: its file never got its name, or its
        directory never got the mark rank 0 adds once every rank has written; so is a damaged one (a file
        :attr:`checkpoint_io` does not verify, a directory whose files are not as the mark lists), and rank 0
        says on stderr which and why (:func:`runtime.checkpoint.latest_checkpoint`).
        """
        return latest_checkpoint(folder, self.checkpoint_io, report=self.global_rank == 0)

    def _saveable(self, value: Any) -> Any:
        if isinstance(value, torch.nn.Module):
            return self.unwrap_module(value).state_dict()
        if isinstance(value, torch.optim.Optimizer):
            return value.state_dict()
        return value


# a save after agreed pre-emption names the checkpoint; then the misuse checks, as on Strategy's own methods
Checkpoints.save_checkpoint = recording_saves(Checkpoints.save_checkpoint)  # type: ignore[method-assign]
guard_methods(Checkpoints)
