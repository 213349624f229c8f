"""When each public :class:`~runtime.strategies.base.Strategy` method may be called, and what its
arguments must be: one table (:data:`RULES`), applied to ``Strategy`` and every subclass.

A strategy lives through three states in a process: *built* (``runtime.build`` made it), *set up*
(``setup_environment`` selected the device and joined the process group: inside ``launch(fn)``'s
``fn``) and *torn down*. Most methods work only while it is set up; a call at the wrong time,
through a strategy object of another rank (the one ``runtime.build`` returned in the launching
process, captured by the function a rank runs), or with an argument of the wrong type raises a
:class:`~runtime.errors.StrategyMisuseError` naming the method, the argument and the fix, before
any engine sees the call.

Subclasses get the checks without doing anything: ``Strategy.__init_subclass__`` wraps every
method named in :data:`RULES` that the subclass defines (overrides included). What each argument must
be (the checks the table names) is in :mod:`runtime.strategies._guard_arguments`.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal

import attrs

from runtime._protocol.progress import long_operation
from runtime._protocol.progress import step as record_step
from runtime.errors import PeerStoppedAnsweringError, StrategyArgumentError, StrategyMisuseError
from runtime.strategies._guard_arguments import (
    CONFIG,
    DATALOADER,
    DATALOADER_USES,
    FN,
    FOLDER,
    LOSS,
    MAKE_OPTIMIZER,
    MODULE,
    OPTIMIZER,
    OPTIONAL_STATE,
    PATH,
    STATE,
    STEP,
    USE,
    Arg,
    DataLoaderUse,
    GuardedStrategy,
    describe,
)

__all__ = [
    "DATALOADER_USES",
    "RULES",
    "Arg",
    "DataLoaderUse",
    "GuardedStrategy",
    "MethodRule",
    "guard_methods",
    "running_strategy",
]

BUILT, SET_UP, TORN_DOWN = "built", "set up", "torn down"
#: ``any``: callable in every state; ``set_up``: only between setup_environment and teardown;
#: ``idle``: only where this process runs no rank yet (launch, run, setup_environment); ``ranked``:
#: needs only this process's ranks (known from the config before set-up, unless the class sets
#: ``ranks_from_config = False``), never through another rank's strategy object.
When = Literal["any", "set_up", "idle", "ranked"]


_MISSING = object()
# The strategy set up in this thread, if any. Per thread: torch_xla's launcher runs XLA:CPU replicas
# as threads of one process, each with its own strategy.
_local = threading.local()


def running_strategy() -> GuardedStrategy | None:
    """The strategy set up in this thread (between its ``setup_environment`` and ``teardown``)."""
    ref: weakref.ref[GuardedStrategy] | None = getattr(_local, "running", None)
    return ref() if ref is not None else None


@attrs.frozen
class MethodRule:
    """When a method may be called, which arguments are checked, and what happens after it returns."""

    when: When
    args: tuple[Arg, ...] = ()
    #: Why the method has no wrong time (``when="any"`` only; the sweep test requires a reason).
    why_any: str = ""
    after: Callable[[GuardedStrategy, Any], None] | None = None
    #: Run ``after`` (with ``None``) even when the method raised (teardown: the group is left either way).
    after_on_error: bool = False
    #: Every rank must call it (it communicates): a collective failing inside it, in a run of several
    #: ranks, is reported as a misuse when a peer returned without calling it, or as the peer that
    #: stopped answering when its connection ended before it finished (the rendezvous store tells).
    every_rank: bool = False
    #: It may take longer than steps do (checkpoint IO): the progress watchdog does not judge it.
    long: bool = False


def _entered(strategy: GuardedStrategy, result: Any) -> None:
    strategy._lifecycle = SET_UP
    _local.running = weakref.ref(strategy)


def _left(strategy: GuardedStrategy, result: Any) -> None:
    strategy._lifecycle = TORN_DOWN
    if running_strategy() is strategy:
        _local.running = None


def _stepped(strategy: GuardedStrategy, result: Any) -> None:
    record_step()  # the progress watchdog's count (runtime._protocol.progress): a store into shared memory


def _adopt_optimizer(strategy: GuardedStrategy, result: Any) -> None:
    module, optimizer = result
    if not hasattr(optimizer, "param_groups"):
        raise StrategyArgumentError(
            "setup_module_and_optimizer",
            f"make_optimizer returned {describe(optimizer)}, not an optimizer",
            "make_optimizer(parameters) must return the optimizer, e.g. lambda params: torch.optim.SGD(params, lr=0.1)",
            argument="make_optimizer",
        )
    strategy._set_up_optimizers.add(optimizer)


#: Every public method of the built-in strategies, by name. The sweep test
#: (tests/runtime/strategies/test_strategy_misuse.py) fails for a public method missing here.
RULES: dict[str, MethodRule] = {
    "structure_options": MethodRule("any", (CONFIG,), why_any="a classmethod used by runtime.build"),
    "assemble": MethodRule(
        "any", (CONFIG,), why_any="a classmethod used by runtime.build and by each rank a launch starts"
    ),
    "launch": MethodRule("idle", (FN,)),
    "run": MethodRule("idle", (FN,)),
    "setup_environment": MethodRule("idle", after=_entered),
    "teardown": MethodRule(
        "any",
        after=_left,
        after_on_error=True,
        why_any="idempotent: run() calls it after fn even when fn or the set-up failed",
    ),
    "setup_module": MethodRule("set_up", (MODULE,), every_rank=True),
    "setup_module_and_optimizer": MethodRule(
        "set_up", (MODULE, MAKE_OPTIMIZER), after=_adopt_optimizer, every_rank=True
    ),
    "wrap_module": MethodRule("set_up", (MODULE,)),
    "full_state_dict": MethodRule("set_up", (MODULE,), every_rank=True),
    "unwrap_module": MethodRule("any", (MODULE,), why_any="looks inside a wrapper; no device or process group"),
    "units": MethodRule("any", (MODULE,), why_any="lists a module's FSDP units; no device or process group"),
    "to_device": MethodRule("set_up"),
    "backward": MethodRule("set_up", (LOSS,), every_rank=True),
    "optimizer_step": MethodRule("set_up", (OPTIMIZER,), after=_stepped, every_rank=True),
    "heartbeat": MethodRule("set_up"),
    "process_dataloader": MethodRule("ranked", (DATALOADER, USE)),
    "save_checkpoint": MethodRule("set_up", (PATH, STATE), every_rank=True, long=True),
    "load_checkpoint": MethodRule("set_up", (PATH, OPTIONAL_STATE), every_rank=True, long=True),
    "latest_checkpoint": MethodRule(
        "any", (FOLDER,), why_any="lists a folder's files, to pick a checkpoint before or after set-up; no collective"
    ),
    "preempted": MethodRule("set_up", (STEP,), every_rank=True),
    "sync": MethodRule("set_up"),
}


def _time_problem(strategy: GuardedStrategy, method: str, when: When) -> tuple[str, str] | None:
    state = getattr(strategy, "_lifecycle", BUILT)
    running = running_strategy()
    mine = running is None or running is strategy  # not another rank's strategy object
    if when == "ranked":
        if state == SET_UP or (type(strategy).ranks_from_config and mine):
            return None
        when = "set_up"
    if when == "set_up" and type(strategy).usable_unset and mine:
        return None
    if when == "set_up" and state != SET_UP:
        if running is not None and running is not strategy:
            return (
                f"this strategy object is not set up in this process, which runs rank {running.global_rank} through "
                f"another one (this one is probably what runtime.build returned in the launching process, captured "
                f"by your function: every rank would act as rank {strategy.global_rank})",
                "use the strategy your function receives: def train(strategy, ...): ...; strategy.launch(train, ...)",
            )
        if state == TORN_DOWN:
            return (
                "called after strategy.teardown(): the run this strategy belonged to has ended",
                f"call strategy.{method}() inside the function given to strategy.launch(fn), before it returns",
            )
        return (
            "called before the strategy is set up in this process (no device selected, no process group joined)",
            f"call strategy.{method}() inside fn, through the strategy fn receives: strategy.launch(fn) (or "
            "strategy.run(fn)) sets it up first",
        )
    if when == "idle" and running is not None:
        return (
            f"this process already runs rank {running.global_rank} of a launch; a rank cannot start or join another",
            "launch from the main script only (under `if __name__ == '__main__':`); inside fn, use the strategy fn "
            "receives",
        )
    return None


def _guarded(name: str, function: Callable[..., Any], rule: MethodRule) -> Callable[..., Any]:
    parameters = list(inspect.signature(function).parameters)[1:]  # after self/cls
    checks = [(parameters.index(arg.name), arg.name, arg.problem) for arg in rule.args if arg.name in parameters]
    # Every training step calls backward and optimizer_step, in the state they need (set up): there a
    # method allowed while set up needs no further look (see _time_problem), so that is one attribute
    # read, and the rule's fields are read here once. Python run between a step's device work finds
    # the processor's caches cold, so each operation costs several times what a loop of its own shows
    # (tests/benchmarks/README.md, XLA): the checks keep to the few a call needs.
    when = rule.when
    timed = when != "any"
    fine_when_set_up = when in ("set_up", "ranked")
    after, after_on_error, every_rank = rule.after, rule.after_on_error, rule.every_rank
    plain = after is None and not every_rank
    if rule.long:
        function = _not_judged(function)

    @functools.wraps(function)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            timed
            and not (fine_when_set_up and getattr(self, "_lifecycle", BUILT) == SET_UP)
            and (problem := _time_problem(self, name, when)) is not None
        ):
            raise StrategyMisuseError(name, *problem)
        for index, arg_name, problem_of in checks:
            value = args[index] if index < len(args) else kwargs.get(arg_name, _MISSING)
            if value is not _MISSING and (problem := problem_of(self, value)) is not None:
                raise StrategyArgumentError(name, *problem, argument=arg_name)
        if plain:
            return function(self, *args, **kwargs)
        try:
            result = function(self, *args, **kwargs)
        except BaseException as exc:
            if after_on_error and after is not None:
                after(self, None)
            if every_rank:
                _raise_if_a_peer_did_not_come(self, name, exc)
            raise
        if after is not None:
            after(self, result)
        return result

    guarded.__strategy_guard__ = rule  # type: ignore[attr-defined]
    return guarded


def _not_judged(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, run as a long operation of the progress watchdog's (it is not judged while inside)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        with long_operation():
            return function(*args, **kwargs)

    return run


def _raise_if_a_peer_did_not_come(strategy: GuardedStrategy, name: str, exc: BaseException) -> None:
    """A collective failed inside ``name``, which every rank must call: say so, and how to call it.

    It is marked as an echo of a peer's fault, so a launcher still blames a rank that crashed; when
    no rank crashed, the launcher blames the rank that returned without calling ``name`` and quotes
    this message's first line.
    """
    from runtime._protocol.peers import peers_that_finished_or_went
    from runtime._protocol.rank_files import is_communication_error, mark_as_echo

    if isinstance(exc, StrategyMisuseError) and getattr(exc, "peer_missing", False) and exc.method != name:
        exc = exc.__cause__ or exc  # raised by a method this one called: name the one the user called
    elif (
        isinstance(exc, (StrategyMisuseError, PeerStoppedAnsweringError))
        or not isinstance(exc, Exception)
        or not is_communication_error(exc)
    ):
        return
    if getattr(strategy, "_lifecycle", BUILT) != SET_UP or strategy.world_size < 2:
        return
    cause = (str(exc).splitlines() or [type(exc).__name__])[0]
    cause = re.sub(r"^\[[^\]]*\]\s*", "", cause)[:120]  # gloo prefixes its source location: "[.../pair.cc:537] "
    finished, gone = peers_that_finished_or_went(strategy.global_rank, strategy.world_size, name, str(exc), cause)
    misuse = StrategyMisuseError(
        name,
        f"every rank must call it, and {finished or 'a peer'} never did (the collective in it failed: {cause})",
        f"call strategy.{name}() on every rank, not under `if strategy.is_global_zero:` (for checkpoints, rank 0 "
        "alone writes the file anyway); if a peer crashed instead, its own error comes first",
    )
    misuse.peer_missing = True  # type: ignore[attr-defined]
    mark_as_echo(misuse)
    if gone is not None:
        mark_as_echo(gone)  # a launcher still blames the rank that crashed, by its exit
        raise gone from None  # gloo's words are in the message; its frames would bury it
    raise misuse from exc


def guard_methods(cls: type) -> None:
    """Wrap each method of :data:`RULES` that ``cls`` itself defines (classmethods included)."""
    for name, rule in RULES.items():
        member = cls.__dict__.get(name)
        if isinstance(member, classmethod):
            if not hasattr(member.__func__, "__strategy_guard__"):
                setattr(cls, name, classmethod(_guarded(name, member.__func__, rule)))
        elif inspect.isfunction(member) and not hasattr(member, "__strategy_guard__"):
            setattr(cls, name, _guarded(name, member, rule))
