"""FSDP checkpoints: full (one file, plain state dicts) or sharded (torch.distributed.checkpoint).

A checkpoint holds the entries of the ``state`` mapping the user passes: modules and optimizers
are saved as their state dicts (gathered or sharded), every other entry as it is.

- **full**: rank 0 writes one file with :attr:`Strategy.checkpoint_io`; module entries are plain
  ``state_dict()`` mappings with the module's own parameter names, so
  ``torch.nn.Module.load_state_dict`` of an unsharded model reads them. Optimizer entries are in
  torch.distributed.checkpoint's form (keyed by parameter name).
- **sharded**: a directory; every rank writes its shards (``torch.distributed.checkpoint``), and
  rank 0 writes the other entries to ``entries.pt`` beside them. It loads on any number of ranks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from runtime.checkpoint import (
    check_directory,
    entries_before_save,
    load_torch_file,
    mark_complete,
    mark_incomplete,
)
from runtime.errors import RuntimeConfigError

if TYPE_CHECKING:
    from runtime.strategies.base import Strategy

__all__ = ["load_fsdp_checkpoint", "save_fsdp_checkpoint"]

_ENTRIES = "entries.pt"


def _owner(optimizer: torch.optim.Optimizer, modules: Mapping[str, torch.nn.Module]) -> torch.nn.Module:
    """The module whose parameters ``optimizer`` updates (state dicts of optimizers are keyed by them)."""
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for module in modules.values():
        if params & {id(p) for p in module.parameters()}:
            return module
    raise RuntimeConfigError(
        "an optimizer in the checkpoint state updates none of the modules in it; FSDP saves an optimizer "
        "by the names of its module's parameters",
        hint="put the module in the same state mapping",
    )


def _split(
    state: Mapping[str, Any],
) -> tuple[dict[str, torch.nn.Module], dict[str, torch.optim.Optimizer], dict[str, Any]]:
    modules = {k: v for k, v in state.items() if isinstance(v, torch.nn.Module)}
    optimizers = {k: v for k, v in state.items() if isinstance(v, torch.optim.Optimizer)}
    extras = {k: v for k, v in state.items() if k not in modules and k not in optimizers}
    return modules, optimizers, extras


def _state_dicts(
    modules: Mapping[str, torch.nn.Module], optimizers: Mapping[str, torch.optim.Optimizer], options: Any
) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    result: dict[str, Any] = {key: get_model_state_dict(m, options=options) for key, m in modules.items()}
    for key, optimizer in optimizers.items():
        result[key] = get_optimizer_state_dict(_owner(optimizer, modules), optimizer, options=options)
    return result


def save_fsdp_checkpoint(strategy: Strategy, path: str | os.PathLike[str], state: Mapping[str, Any], kind: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    modules, optimizers, extras = _split(state)
    if kind == "full":
        # cpu_offload: the full tensors are gathered onto rank 0 only, in CPU memory
        full = _state_dicts(modules, optimizers, StateDictOptions(full_state_dict=True, cpu_offload=True))
        if strategy.is_global_zero:
            strategy.checkpoint_io.save({**full, **extras}, path)
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        from runtime.checkpoint.dcp import rank_failures
        from runtime.strategies.checkpoint_saving import settle_save

        before = entries_before_save(path) if strategy.is_global_zero else None
        if strategy.is_global_zero:
            mark_incomplete(path)  # before any rank writes into it (the barrier)
        strategy.collective.barrier()
        failure: BaseException | None = None
        try:
            dcp.save(_state_dicts(modules, optimizers, StateDictOptions()), checkpoint_id=os.fspath(path))
            if strategy.is_global_zero:
                torch.save({"extras": extras, "sharded": sorted([*modules, *optimizers])}, Path(path) / _ENTRIES)
        except CheckpointException as exc:  # a BaseException: every rank gets every rank's failure
            failure = next(iter(rank_failures(exc).values()))
        except Exception as exc:  # noqa: BLE001 (told to every rank by settle_save, then raised)
            failure = exc
        settle_save(strategy, path, failure, before)  # every rank raises alike if any failed
        if strategy.is_global_zero:
            mark_complete(path)  # every rank's shards are written
    strategy.collective.barrier()


def load_fsdp_checkpoint(strategy: Strategy, path: str | os.PathLike[str], state: Mapping[str, Any]) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    modules, optimizers, _ = _split(state)
    if Path(path).is_dir():
        from runtime.checkpoint.dcp import load_dcp

        # as safely as the strategy's checkpoint_io loads a file (weights_only unless the user opted out)
        weights_only = strategy.checkpoint_io.weights_only
        directory = Path(path)
        check_directory(directory)  # every file as the .complete mark lists it
        entries = load_torch_file(
            directory / _ENTRIES, weights_only=weights_only, map_location="cpu", checkpoint=directory
        )
        _require(path, [*modules, *optimizers], entries["sharded"])
        loaded = _state_dicts(modules, optimizers, StateDictOptions())
        load_dcp(loaded, directory, weights_only=weights_only)
        checkpoint = {**entries["extras"], **loaded}
        options = StateDictOptions()
    else:
        checkpoint = strategy.checkpoint_io.load(path, map_location=torch.device("cpu"))
        _require(path, [*modules, *optimizers], list(checkpoint))
        options = StateDictOptions(full_state_dict=True)
    for key, module in modules.items():
        set_model_state_dict(module, checkpoint[key], options=options)
    for key, optimizer in optimizers.items():
        if options.full_state_dict and not _holds_tensors(checkpoint[key]):
            _load_hyperparameters(optimizer, checkpoint[key])
        else:
            set_optimizer_state_dict(_owner(optimizer, modules), optimizer, checkpoint[key], options=options)
    return checkpoint


def _holds_tensors(optimizer_state: Mapping[str, Any]) -> bool:
    """Whether a saved optimizer has per-parameter tensors (Adam's moments; plain SGD has none)."""
    return any(
        isinstance(value, torch.Tensor) and value.dim() > 0
        for entry in optimizer_state.get("state", {}).values()
        for value in (entry.values() if isinstance(entry, Mapping) else ())
    )


def _load_hyperparameters(optimizer: torch.optim.Optimizer, optimizer_state: Mapping[str, Any]) -> None:
    """Load an optimizer saved with no per-parameter tensors: its groups' settings (``lr``, ...) are
    all there is. torch's full-state loader cannot place such a state (it takes the device from the
    tensors and stops with "Expected device to be set"), so the groups are set here."""
    saved = optimizer_state.get("param_groups", [])
    if len(saved) != len(optimizer.param_groups):
        raise RuntimeConfigError(
            f"the checkpoint's optimizer has {len(saved)} parameter group(s), this optimizer "
            f"{len(optimizer.param_groups)}",
            hint="build the optimizer as it was built when the checkpoint was saved",
        )
    for group, saved_group in zip(optimizer.param_groups, saved, strict=True):
        group.update({name: value for name, value in saved_group.items() if name != "params"})


def _require(path: str | os.PathLike[str], wanted: list[str], present: list[str]) -> None:
    missing = [key for key in wanted if key not in present]
    if missing:
        raise KeyError(f"the checkpoint at {path} has no entry {missing[0]!r} (it has {sorted(present)})")
