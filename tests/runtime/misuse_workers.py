"""Misusing every public Strategy method, in the test process and inside real ranks (module level,
picklable): each call's outcome is reported as data for the test to judge.

The calls come from :data:`runtime.strategies.guard.RULES` and :data:`VALID`, so a public method
without a rule, or a rule without valid arguments here, fails the sweep.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

import runtime
from resolver._domain.config import ResolvedConfig
from runtime import Strategy
from runtime.errors import StrategyArgumentError, StrategyMisuseError
from runtime.strategies.guard import RULES

WRONG = object()  # no check accepts it: not a module, tensor, optimizer, path, mapping, use or function


def _nothing(strategy: Strategy) -> None:
    return None


def _loss() -> torch.Tensor:
    return nn.Linear(2, 1)(torch.ones(1, 2)).sum()


#: Arguments each method accepts (given the strategy and a scratch directory), by method name.
VALID: dict[str, Callable[[Strategy, Path], tuple[Any, ...]]] = {
    "structure_options": lambda s, d: (s.config,),
    "assemble": lambda s, d: (
        s.config,
        type(s.accelerator),
        type(s.precision),
        type(s.collective),
        type(s.cluster_environment),
        None,
    ),
    "launch": lambda s, d: (_nothing,),
    "run": lambda s, d: (_nothing,),
    "setup_environment": lambda s, d: (),
    "teardown": lambda s, d: (),
    "setup_module": lambda s, d: (nn.Linear(2, 2),),
    "setup_module_and_optimizer": lambda s, d: (nn.Linear(2, 2), lambda p: torch.optim.SGD(p, lr=0.1)),
    "wrap_module": lambda s, d: (nn.Linear(2, 2),),
    "full_state_dict": lambda s, d: (nn.Linear(2, 2),),
    "unwrap_module": lambda s, d: (nn.Linear(2, 2),),
    "units": lambda s, d: (nn.Sequential(nn.Linear(2, 2)),),
    "to_device": lambda s, d: (torch.ones(2),),
    "backward": lambda s, d: (_loss(),),
    "optimizer_step": lambda s, d: (torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1),),
    "process_dataloader": lambda s, d: (DataLoader([1, 2, 3, 4]), "train"),
    "save_checkpoint": lambda s, d: (str(d / "checkpoint"), {"step": 1}),
    "latest_checkpoint": lambda s, d: (str(d),),
    "load_checkpoint": lambda s, d: (str(d / "checkpoint"), None),
    "preempted": lambda s, d: (3,),
    "sync": lambda s, d: (),
    "heartbeat": lambda s, d: (),
}


def public_methods(cls: type) -> list[str]:
    """The names of ``cls``'s public methods (classmethods included, properties not)."""
    return sorted(
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (inspect.isfunction(member) or inspect.ismethod(member))
    )


def outcome(call: Callable[[], Any]) -> dict[str, Any]:
    """What a call did: returned, or raised (the class, its bases of note, the message)."""
    try:
        call()
    except Exception as exc:  # the report says which: the test judges
        return {
            "raised": type(exc).__name__,
            "misuse": isinstance(exc, StrategyMisuseError),
            "argument_error": isinstance(exc, StrategyArgumentError),
            "method": getattr(exc, "method", None),
            "argument": getattr(exc, "argument", None),
            "message": str(exc),
        }
    return {"raised": None}


def wrong_types(strategy: Strategy, when: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Every checked argument of every method whose rule's ``when`` is in ``when``, called with a
    wrong value and the other arguments valid: ``{"method(argument)": outcome}``."""
    report: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in public_methods(type(strategy)):
            rule = RULES[name]
            if rule.when not in when:
                continue
            method = getattr(strategy, name)
            parameters = list(inspect.signature(method).parameters)
            for arg in rule.args:
                args = list(VALID[name](strategy, Path(scratch)))
                args[parameters.index(arg.name)] = WRONG
                report[f"{name}({arg.name})"] = outcome(lambda method=method, args=args: method(*args))
    return report


def at_this_time(strategy: Strategy, names: list[str]) -> dict[str, dict[str, Any]]:
    """Each of ``names`` called on ``strategy`` with valid arguments: ``{method: outcome}``."""
    with tempfile.TemporaryDirectory() as scratch:
        return {
            name: outcome(lambda name=name: getattr(strategy, name)(*VALID[name](strategy, Path(scratch))))
            for name in names
        }


def sweep_in_rank(strategy: Strategy, launching_config: ResolvedConfig) -> dict[str, Any]:
    """Inside a rank: wrong types (set up), the launching process's strategy object (built from
    ``launching_config``, as a function that captured it sees it), launching again, then every
    method after teardown."""
    names = public_methods(type(strategy))
    timed = [n for n in names if RULES[n].when != "any"]
    report: dict[str, Any] = {"wrong_types": wrong_types(strategy, ("set_up", "ranked", "any"))}
    outer = runtime.build(launching_config)
    report["other_strategy"] = at_this_time(outer, timed)
    report["while_running"] = at_this_time(strategy, [n for n in timed if RULES[n].when == "idle"])
    strategy.collective.barrier()  # every rank is done with the group before it is left
    strategy.teardown()
    report["after_teardown"] = at_this_time(strategy, [n for n in timed if RULES[n].when != "idle"])
    return report


def deepspeed_misuse(strategy: Strategy, launching_config: ResolvedConfig) -> dict[str, Any]:
    """The DDP habit under DeepSpeed (setup_module, then an optimizer of one's own), then the sweep."""
    from sharded_workers import batch, sgd, small_model

    report: dict[str, Any] = {"setup_module": outcome(lambda: strategy.setup_module(small_model()))}
    model, optimizer = strategy.setup_module_and_optimizer(small_model(), sgd)
    x, y = strategy.to_device(batch(strategy.global_rank))
    strategy.backward(nn.functional.mse_loss(model(x).float(), y.float()))
    report["a torch optimizer of one's own"] = outcome(lambda: strategy.optimizer_step(sgd(model.parameters())))
    report["the optimizer setup returned"] = outcome(lambda: strategy.optimizer_step(optimizer))
    report["sweep"] = sweep_in_rank(strategy, launching_config)
    return report


def checkpoint_on_rank_zero_only(strategy: Strategy, path: str) -> str:
    """The classic: save_checkpoint under ``if strategy.is_global_zero:`` (rank 0 then waits for the others)."""
    model = strategy.setup_module(nn.Linear(2, 2))
    if strategy.is_global_zero:
        strategy.save_checkpoint(path, {"model": model})
    return "done"
