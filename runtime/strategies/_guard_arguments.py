"""What each argument of a :class:`~runtime.strategies.base.Strategy` method must be: one :class:`Arg` per
checked argument, which the table of :mod:`runtime.strategies.guard` names for each method, and what the
checks read of the strategy (:class:`GuardedStrategy`).

A check returns ``None`` for a value that is fine, else ``(what is wrong, the fix)``; the guard raises it as
a :class:`~runtime.errors.StrategyArgumentError` before the method runs.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Protocol

import attrs
import torch
from torch.utils.data import DataLoader

__all__ = [
    "CONFIG",
    "DATALOADER",
    "DATALOADER_USES",
    "FN",
    "FOLDER",
    "LOSS",
    "MAKE_OPTIMIZER",
    "MODULE",
    "OPTIMIZER",
    "OPTIONAL_STATE",
    "PATH",
    "STATE",
    "STEP",
    "USE",
    "Arg",
    "DataLoaderUse",
    "GuardedStrategy",
    "callable_arg",
    "describe",
    "of_type",
]

#: What ``process_dataloader``'s ``use`` says a loader is for (checked here, before the call runs).
DataLoaderUse = Literal["train", "val", "test", "predict"]
#: The values ``process_dataloader``'s ``use`` accepts.
DATALOADER_USES: tuple[str, ...] = ("train", "val", "test", "predict")


class GuardedStrategy(Protocol):
    """What the checks read and record on a strategy (``runtime.strategies.base.Strategy``, which imports
    this module through ``guard``: a protocol here rather than an import back)."""

    ranks_from_config: ClassVar[bool]
    usable_unset: ClassVar[bool]
    _lifecycle: str
    _set_up_optimizers: weakref.WeakSet[Any]
    _checked_optimizers: dict[int, weakref.ref[Any]]

    @property
    def global_rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_global_zero(self) -> bool: ...

    def _optimizer_problem(self, optimizer: Any) -> tuple[str, str] | None: ...


@attrs.frozen
class Arg:
    """One checked argument: ``problem(strategy, value)`` is ``None`` when the value is fine, else
    ``(what is wrong, the fix)``."""

    name: str
    problem: Callable[[GuardedStrategy, Any], tuple[str, str] | None]


def of_type(name: str, types: type | tuple[type, ...], expected: str, fix: str) -> Arg:
    """An argument that must be an instance of ``types`` (``expected`` says so in words)."""

    def problem(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
        return None if isinstance(value, types) else (f"{name} must be {expected}, got {describe(value)}", fix)

    return Arg(name, problem)


def callable_arg(name: str, expected: str, fix: str) -> Arg:
    """An argument that must be callable (``expected`` says what it should be)."""

    def problem(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
        return None if callable(value) else (f"{name} must be {expected}, got {describe(value)}", fix)

    return Arg(name, problem)


def describe(value: Any) -> str:
    """``value``'s type and a short repr of it, as the misuse errors show what was passed."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__module__}.{type(value).__qualname__} ({text})".removeprefix("builtins.")


def _loss(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
    if not isinstance(value, torch.Tensor):
        return f"loss must be a torch.Tensor, got {describe(value)}", "pass the loss tensor itself, not loss.item()"
    if not value.requires_grad:
        return (
            "loss does not require grad (it was computed under torch.no_grad(), detached, or from a module "
            "whose parameters do not require grad)",
            "compute the loss from the set-up module's output, outside torch.no_grad()",
        )
    return None


def _optimizer(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
    checked = strategy._checked_optimizers.get(id(value))
    if checked is not None and checked() is value:  # passed on an earlier step: every step after the first
        return None
    # DeepSpeed's optimizers are not torch.optim.Optimizer subclasses: accept what steps parameter groups
    if not isinstance(value, torch.optim.Optimizer) and not (
        hasattr(value, "param_groups") and callable(getattr(value, "step", None))
    ):
        return (
            f"optimizer must be an optimizer (torch.optim.Optimizer), got {describe(value)}",
            "pass the optimizer whose parameters the loss was back-propagated to",
        )
    return strategy._optimizer_problem(value)


def _use(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
    if value in DATALOADER_USES:
        return None
    return f"use must be one of {', '.join(DATALOADER_USES)}, got {value!r}", 'e.g. process_dataloader(loader, "train")'


def _optional_state(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
    return None if value is None else STATE.problem(strategy, value)


def _step(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return None
    return f"step must be the step number (an int) or None, got {describe(value)}", "pass the loop's step, e.g. step"


def _config(strategy: GuardedStrategy, value: Any) -> tuple[str, str] | None:
    from resolver import ResolvedConfig

    if isinstance(value, ResolvedConfig):
        return None
    return f"config must be a resolver.ResolvedConfig, got {describe(value)}", "pass resolver.resolve(...)'s result"


MODULE = of_type("module", torch.nn.Module, "a torch.nn.Module", "pass the model (a torch.nn.Module) itself")
PATH = of_type("path", (str, os.PathLike), "a str or os.PathLike", 'pass a file or directory path, e.g. "ckpt.pt"')
STATE = of_type("state", Mapping, "a mapping of names to modules, optimizers and values",
                'e.g. {"model": model, "optimizer": optimizer, "step": step}')  # fmt: skip
OPTIONAL_STATE = Arg("state", _optional_state)
FOLDER = of_type(
    "folder", (str, os.PathLike), "a str or os.PathLike", 'pass the checkpoints\' folder, e.g. "checkpoints"'
)
FN = callable_arg("fn", "a function", "pass the function itself, e.g. strategy.launch(train, epochs), not train(...)")
CONFIG = Arg("config", _config)
LOSS = Arg("loss", _loss)
OPTIMIZER = Arg("optimizer", _optimizer)
MAKE_OPTIMIZER = callable_arg(
    "make_optimizer",
    "a function of the parameters that returns the optimizer",
    "pass e.g. lambda params: torch.optim.SGD(params, lr=0.1), not an optimizer made beforehand (it would hold "
    "the parameters from before set-up)",
)
DATALOADER = of_type("dataloader", DataLoader, "a torch.utils.data.DataLoader", "pass the DataLoader, not the dataset")
USE = Arg("use", _use)
STEP = Arg("step", _step)
