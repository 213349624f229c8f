"""Fully sharded data parallel on torch's ``fully_shard`` (FSDP2): each rank holds a shard of every
parameter, gradient and optimizer state; layers are all-gathered just in time for compute.

It runs wherever ``torch.distributed`` does: nccl on CUDA, and gloo on CPU (which PyTorch
Lightning refuses; see ``docs/behaviour.md``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs
import torch

from runtime.errors import RuntimeConfigError
from runtime.precision.sharded import EnginePrecision, fsdp_mixed_precision_policy
from runtime.strategies.base import Strategy
from runtime.strategies.fsdp_checkpoint import load_fsdp_checkpoint, save_fsdp_checkpoint
from runtime.strategies.options import StrategyOptions

__all__ = ["FSDPOptions", "FSDPStrategy"]


@attrs.frozen(kw_only=True)
class FSDPOptions(StrategyOptions):
    """How FSDP shards the module.

    - ``wrap_modules``: classes by import path (``"torch.nn.Linear"``, ``"mypackage.model.Block"``)
      or bare name (``"Block"``); every submodule of such a class (or a subclass) becomes its own
      unit (all-gathered and freed on its own).
    - ``min_num_params``: or by size: going bottom-up, a submodule whose parameters not yet in a
      unit number at least this many becomes a unit.
    - Neither: each direct child holding parameters is a unit. The root is always one.
    - ``cpu_offload``: keep sharded parameters, gradients and optimizer state in CPU memory
      (``fsdp_cpu_offload``); the optimizer step runs on the CPU.
    - ``reshard_after_forward``: free gathered parameters after the forward (``False`` keeps them
      until after the backward: more memory, one all-gather fewer).
    - ``state_dict_type``: ``"full"`` (one file on rank 0, loadable by a plain module) or
      ``"sharded"`` (a directory, each rank writing its shards; torch.distributed.checkpoint).
    """

    wrap_modules: tuple[str, ...] = ()
    min_num_params: int | None = attrs.field(default=None)
    cpu_offload: bool = False
    reshard_after_forward: bool = True
    state_dict_type: Literal["full", "sharded"] = "full"

    @min_num_params.validator
    def _positive(self, attribute: attrs.Attribute[int | None], value: int | None) -> None:
        if value is not None and value < 1:
            raise ValueError(f"min_num_params must be at least 1, got {value}")


class FSDPStrategy(Strategy):
    """Shards modules with ``torch.distributed.fsdp.fully_shard`` over all ranks.

    Create the optimizer *after* :meth:`setup_module`, from the parameters of the module it
    returns (they are sharded ``DTensor`` objects then).
    """

    Options = FSDPOptions
    replaces_parameters = "fully_shard replaces each parameter with a sharded DTensor"

    def __init__(self, config: Any, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        if self.options.wrap_modules and self.options.min_num_params is not None:
            raise RuntimeConfigError(
                "the fsdp strategy got both wrap_modules and min_num_params: they are two ways to choose the units",
                hint="pass one of them",
            )
        self._mp_policy = fsdp_mixed_precision_policy(self.precision)
        self._precision = EnginePrecision(self.precision) if self._mp_policy is not None else self.precision

    # -- modules ---------------------------------------------------------------------------------

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        device = self.root_device
        kwargs: dict[str, Any] = {
            "mesh": init_device_mesh(device.type, (self.world_size,)),
            "reshard_after_forward": self.options.reshard_after_forward,
        }
        if self._mp_policy is not None:
            kwargs["mp_policy"] = self._mp_policy
        if self.options.cpu_offload:
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=self.accelerator.pin_memory)
        self.fsdp_kwargs: dict[str, Any] = kwargs  # what fully_shard got, for inspection
        for unit in self.units(module):
            fully_shard(unit, **kwargs)
        fully_shard(module, **kwargs)
        return module

    def units(self, module: torch.nn.Module) -> list[torch.nn.Module]:
        """The submodules that become FSDP units of their own (children before parents)."""
        options = self.options
        if options.wrap_modules:
            matches = _matcher(options.wrap_modules)
            units = [m for m in module.modules() if m is not module and matches(m)]
            if not units:
                found = sorted({type(m).__qualname__ for m in module.modules()})
                raise RuntimeConfigError(
                    f"wrap_modules={list(options.wrap_modules)} matches no submodule; the model's classes are "
                    f"{', '.join(found)}",
                    hint="name one of them (or its module path, e.g. 'torch.nn.Linear')",
                )
            return _children_first(module, units)
        if options.min_num_params is not None:
            return _by_size(module, options.min_num_params)
        return [child for child in module.children() if any(True for _ in child.parameters())]

    # -- checkpoints -----------------------------------------------------------------------------

    def save_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
        """Save ``state``: modules and optimizers as full state dicts in one file written by rank 0
        (``state_dict_type="full"``), or as a directory of shards every rank writes ("sharded")."""
        save_fsdp_checkpoint(self, path, state, self.options.state_dict_type)

    def load_checkpoint(self, path: str | os.PathLike[str], state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Load a checkpoint of either kind (told apart by whether ``path`` is a directory) into the
        sharded modules and optimizers in ``state``; return its other entries too."""
        return load_fsdp_checkpoint(self, path, state or {})

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, Any]:
        """The module's full (unsharded) state dict on every rank, on the CPU."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=False))


def _matcher(names: tuple[str, ...]) -> Callable[[torch.nn.Module], bool]:
    """Whether a module is an instance of a class ``names`` gives: by import path
    (``"torch.nn.Linear"``, ``"mypackage.model.Block"``) or by bare class name (``"Block"``)."""
    classes: list[type] = []
    bare: set[str] = set()
    for name in names:
        if "." not in name:
            bare.add(name)
            continue
        module_name, _, class_name = name.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise RuntimeConfigError(
                f"wrap_modules: cannot import {name!r} ({exc})",
                hint="give the class's import path, or its bare name (matched against the model's classes)",
            ) from None
        classes.append(cls)

    def matches(module: torch.nn.Module) -> bool:
        mro = type(module).__mro__
        return any(c in mro for c in classes) or any(c.__qualname__ in bare for c in mro)

    return matches


def _children_first(root: torch.nn.Module, units: list[torch.nn.Module]) -> list[torch.nn.Module]:
    order = {id(m): i for i, m in enumerate(root.modules())}
    return sorted(units, key=lambda m: -order[id(m)])


def _by_size(root: torch.nn.Module, min_num_params: int) -> list[torch.nn.Module]:
    units: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> int:
        """Parameters under ``module`` not yet in a unit."""
        pending = sum(visit(child) for child in module.children())
        pending += sum(p.numel() for p in module.parameters(recurse=False))
        if module is not root and pending >= min_num_params:
            units.append(module)
            return 0
        return pending

    visit(root)
    return units
