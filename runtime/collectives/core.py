"""What every collective shares beneath its operations: set-up state, groups, the argument exchange,
and the primitives an engine implements (the ``_``-prefixed methods).

The public operations live in :mod:`runtime.collectives.base` (tensors, barriers),
:mod:`runtime.collectives.point_to_point` and :mod:`runtime.collectives.objects`; each checks its
arguments (:mod:`runtime.collectives.arguments`), lets the ranks compare them
(:meth:`CollectiveCore._agree`, :mod:`runtime.collectives.checks`), then calls a primitive.
"""

from __future__ import annotations

import functools
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import attrs
import torch

from runtime._protocol.progress import collective_entered, collective_left
from runtime.collectives.arguments import as_rank, bool_problem, type_name
from runtime.collectives.checks import Call, Pairing, verdict
from runtime.collectives.errors import (
    CollectiveArgumentTypeError,
    CollectiveMisuseError,
    CollectiveNotSetUpError,
    CollectiveNotSupportedError,
)
from runtime.collectives.handles import CollectiveHandle
from runtime.collectives.rendezvous import Rendezvous

__all__ = ["CHECK_VARIABLE", "OPERATIONS", "CollectiveCore", "CollectiveGroup", "check_every_call", "noted"]

#: Every operation of the API, by name (what ``unsupported_operations`` may list).
OPERATIONS: tuple[str, ...] = (
    "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
    "all_to_all", "all_to_all_single", "send", "recv", "recv_any", "isend", "irecv", "barrier",
    "monitored_barrier", "broadcast_object", "all_gather_object", "gather_object", "scatter_object_list",
    "new_group",
)  # fmt: skip

T = TypeVar("T")


@attrs.frozen
class CollectiveGroup:
    """Some of the run's processes, by global rank (sorted); made by :meth:`Collective.new_group`.

    Operations on a group take and give *global* ranks for ``src``/``dst``; lists they return
    (``all_gather``, ``gather``, ``all_to_all``) are ordered as :attr:`ranks`.
    """

    ranks: tuple[int, ...]
    handle: Any = attrs.field(default=None, eq=False, repr=False)  # the engine's own group object

    @property
    def size(self) -> int:
        return len(self.ranks)

    def __contains__(self, rank: object) -> bool:
        return rank in self.ranks


class CollectiveCore(ABC):
    """The state and machinery under every operation (see :class:`runtime.collectives.base.Collective`)."""

    #: Operation name -> why this engine cannot do it.
    unsupported_operations: ClassVar[Mapping[str, str]] = {}
    #: Reduce op name (from ``REDUCE_OPS``) -> why this engine cannot reduce with it.
    unsupported_reduce_ops: ClassVar[Mapping[str, str]] = {}
    #: The name the collective is registered under (for messages).
    name: ClassVar[str] = "collective"
    #: The engine's name in sentences (``"Horovod"``); by default :attr:`name`.
    title: ClassVar[str | None] = None
    #: Why timing one call does not measure the link (an engine that records its operations lazily);
    #: ``None``: a call's time is the link's, as ``resolver check``'s speed step takes it.
    untimed: ClassVar[str | None] = None
    #: How to set the engine up, said when it is used before :meth:`setup` or after :meth:`teardown`.
    setup_hint: ClassVar[str] = (
        "run the work through strategy.launch(fn) / runtime.launch(fn), or call strategy.setup_environment() "
        "(or collective.setup(...)) first"
    )

    def __init__(self) -> None:
        self._rank = 0
        self._world_size = 1
        self.check_across_ranks = True
        #: Compare every call (``RUNTIME_CHECK_COLLECTIVES=every``), not only each new one.
        self.check_every_call = check_every_call()
        self._agreed: set[tuple[Any, ...]] = set()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "teardown" in cls.__dict__:  # an engine's own teardown, a plugin's too, drops the run's state
            cls.teardown = _forgetting_run(cls.__dict__["teardown"])  # type: ignore[method-assign,assignment]

    def _forget_run(self) -> None:
        """Drop what this collective learned during the run it leaves (called after :meth:`teardown`), so that
        the next run it joins (a restarted attempt, a second launch) starts as a new collective would: a call
        agreed with the last run's peers is compared again with the next run's."""
        self._agreed.clear()

    @property
    def display_name(self) -> str:
        """The engine's name in messages: :attr:`title`, else :attr:`name`."""
        return self.title or self.name

    def lacks_point_to_point(self) -> str | None:
        """Why this engine has no ``send``/``recv`` (from :attr:`unsupported_operations`); ``None``: it has them."""
        return self.unsupported_operations.get("send") or self.unsupported_operations.get("recv")

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self._rank

    @property
    def world_size(self) -> int:
        """How many processes take part."""
        return self._world_size

    @property
    def device(self) -> torch.device:
        """The device this process's tensors live on (create tensors for operations there)."""
        return self._device()

    @property
    def world(self) -> CollectiveGroup:
        """The group of all ranks (what ``group=None`` means)."""
        return CollectiveGroup(tuple(range(self._world_size)))

    @property
    @abstractmethod
    def is_initialized(self) -> bool:
        """Whether :meth:`setup` has run (and :meth:`teardown` has not)."""

    @abstractmethod
    def setup(self, rendezvous: Rendezvous) -> None:
        """Join the group as :class:`~runtime.collectives.rendezvous.Rendezvous` says: ``rank`` of
        ``world_size`` processes meeting at ``master_addr:master_port``, within its timeouts."""

    @abstractmethod
    def teardown(self) -> None:
        """Leave the group (no-op when not set up)."""

    # -- groups -----------------------------------------------------------------------------------

    def new_group(self, ranks: Sequence[int]) -> CollectiveGroup:
        """A group of the given global ranks (ints, or any integers with ``__index__``). Every rank of
        the run calls it, members or not, in the same order as other ``new_group`` calls; only members
        use the group afterwards."""
        self._supported("new_group")
        self._require_setup("new_group")
        if isinstance(ranks, (str, bytes, torch.Tensor)) or not hasattr(ranks, "__iter__"):
            raise CollectiveArgumentTypeError(
                f"new_group: ranks must be a sequence of global ranks, got {type_name(ranks)} {ranks!r}",
                hint="pass a list, e.g. [0, 1] or range(0, collective.world_size, 2)",
            )
        given = list(ranks)
        members = [as_rank(r) for r in given]
        bad = [r for r, m in zip(given, members, strict=True) if m is None or not 0 <= m < self._world_size]
        if not given or bad or len(set(members)) != len(members):
            problem = (
                "it is empty" if not given
                else f"{', '.join(map(repr, bad))} {'is' if len(bad) == 1 else 'are'} not a rank" if bad
                else "a rank repeats"
            )  # fmt: skip
            raise CollectiveMisuseError(
                f"new_group needs distinct ranks between 0 and {self._world_size - 1}, got {given!r} ({problem})",
                hint="pass each global rank of the group once, as an integer",
            )
        ordered = tuple(sorted(int(m) for m in members if m is not None))
        return CollectiveGroup(ordered, self._new_group(ordered))

    # -- what an engine implements ----------------------------------------------------------------

    def _device(self) -> torch.device:
        """Where this process's tensors (and the argument checks' vectors) live."""
        return torch.device("cpu")

    def _new_group(self, ranks: tuple[int, ...]) -> Any:
        return None

    @abstractmethod
    def _broadcast(self, tensor: torch.Tensor, src: int, group: CollectiveGroup) -> torch.Tensor: ...

    @abstractmethod
    def _all_reduce(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor: ...

    @abstractmethod
    def _all_gather(self, tensor: torch.Tensor, group: CollectiveGroup) -> list[torch.Tensor]: ...

    @abstractmethod
    def _barrier(self, group: CollectiveGroup) -> None: ...

    @abstractmethod
    def _broadcast_object(self, obj: T, src: int, group: CollectiveGroup) -> T: ...

    @abstractmethod
    def _all_gather_object(self, obj: Any, group: CollectiveGroup) -> list[Any]: ...

    def _reduce(self, tensor: torch.Tensor, dst: int, op: str, group: CollectiveGroup) -> torch.Tensor:
        raise self._missing("reduce")

    def _gather(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup) -> list[torch.Tensor] | None:
        raise self._missing("gather")

    def _scatter(
        self, tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None, src: int, group: CollectiveGroup
    ) -> torch.Tensor:
        raise self._missing("scatter")

    def _reduce_scatter(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        raise self._missing("reduce_scatter")

    def _all_to_all(self, tensors: list[torch.Tensor], group: CollectiveGroup) -> list[torch.Tensor]:
        raise self._missing("all_to_all")

    def _all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002
        output_splits: list[int],
        input_splits: list[int],
        group: CollectiveGroup,
    ) -> torch.Tensor:
        raise self._missing("all_to_all_single")

    def _splits_unsupported(self, output_splits: list[int], input_splits: list[int]) -> str | None:
        """Why the engine cannot exchange rows with these split sizes (None: it can)."""
        return None

    def _send(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup, tag: int) -> None:
        raise self._missing("send")

    def _recv(self, tensor: torch.Tensor, src: int | None, group: CollectiveGroup, tag: int) -> int:
        """Receive into ``tensor`` (in place) from ``src`` (None: any rank); return the sender's global rank."""
        raise self._missing("recv")

    def _isend(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup, tag: int) -> CollectiveHandle[None]:
        raise self._missing("isend")

    def _irecv(
        self, tensor: torch.Tensor, src: int, group: CollectiveGroup, tag: int
    ) -> CollectiveHandle[torch.Tensor]:
        raise self._missing("irecv")

    def _monitored_barrier(self, group: CollectiveGroup, timeout: float | None, wait_all_ranks: bool) -> None:
        raise self._missing("monitored_barrier")

    def _gather_object(self, obj: Any, dst: int, group: CollectiveGroup) -> list[Any] | None:
        gathered = self._all_gather_object(obj, group)  # engines with a rooted gather override this
        return gathered if self._rank == dst else None

    def _scatter_object(self, objects: list[Any] | None, src: int, group: CollectiveGroup) -> Any:
        every = self._broadcast_object(objects, src, group)  # engines with a rooted scatter override this
        assert every is not None
        return every[group.ranks.index(self._rank)]

    def _start(self, operation: str, *args: Any) -> CollectiveHandle[Any]:
        """Start ``operation``'s primitive asynchronously. An engine without asynchronous operations
        runs it now and returns a completed handle (what this default does)."""
        return CollectiveHandle.completed(operation, getattr(self, f"_{operation}")(*args))

    # -- shared machinery ------------------------------------------------------------------------

    def _run(self, operation: str, async_op: bool, *args: Any) -> Any:
        """The primitive of ``operation``, run now or started (``async_op``: returns a handle)."""
        if async_op:
            return self._start(operation, *args)
        return getattr(self, f"_{operation}")(*args)

    def _require_setup(self, operation: str) -> None:
        """Raise a clear error when the collective is used before :meth:`setup` or after :meth:`teardown`."""
        if not self.is_initialized:
            raise CollectiveNotSetUpError(self.name, operation, self.setup_hint)

    def _missing(self, operation: str) -> CollectiveNotSupportedError:
        reason = self.unsupported_operations.get(operation, "it does not implement this operation")
        return CollectiveNotSupportedError(self.name, operation, reason)

    def _supported(self, operation: str) -> None:
        if operation in self.unsupported_operations:
            raise self._missing(operation)

    def _reduce_op_unsupported(self, op: str) -> str | None:
        """Why this engine cannot reduce with ``op`` (a canonical name), or None."""
        return self.unsupported_reduce_ops.get(op)

    def _op_support_problem(self, operation: str, name: str | None) -> CollectiveMisuseError | None:
        """Why this engine cannot reduce with ``name`` (a canonical reduce op name, or None: unknown)."""
        reason = None if name is None else self._reduce_op_unsupported(name)
        if reason is None:
            return None
        return CollectiveNotSupportedError(
            self.name, operation, f"no {name!r} reduction ({reason})", hint="reduce with an op this engine has"
        )

    def _group(self, operation: str, group: CollectiveGroup | None, async_op: object = False) -> CollectiveGroup:
        self._supported(operation)
        self._require_setup(operation)  # the state first: it is what to fix before any argument
        problem = bool_problem(operation, "async_op", async_op)
        if problem is not None:
            raise problem
        g = self.world if group is None else group
        if not isinstance(g, CollectiveGroup):
            raise CollectiveArgumentTypeError(
                f"{operation}: group must be a CollectiveGroup from collective.new_group(ranks) (or None for all "
                f"ranks), got {type_name(g)} {g!r}",
                hint="make the group once with group = collective.new_group(ranks) on every rank, then pass it",
            )
        if self._rank not in g.ranks:
            raise CollectiveMisuseError(
                f"{operation}: rank {self._rank} is not a member of the group of ranks "
                f"{', '.join(map(str, g.ranks))}; only members call its operations",
                hint="call it only where collective.rank in group, or pass group=None for every rank",
            )
        return g

    def _agree(self, operation: str, group: CollectiveGroup, call: Call, pairing: Pairing = "same") -> None:
        """Exchange ``call`` with the group and raise the same error on every rank if they do not fit."""
        if call.problem is not None and (group.size == 1 or not self.check_across_ranks):
            raise call.problem
        if not self.check_across_ranks or (group.size == 1 and pairing == "same"):
            return  # nobody to disagree with
        key = None
        if group.size == 1:
            calls = [(False, call)]
        else:
            if call.problem is None and not self.check_every_call:
                key = (operation, group.ranks, pairing, call.key())
                if key in self._agreed:
                    _SKIPPED.checked = False  # trusted: the same call agreed before
                    return
            _SKIPPED.checked = True
            mine = call.encode(self._device())
            vectors = self._all_gather(mine, group)
            if call.problem is None and pairing == "same" and all(torch.equal(v, mine) for v in vectors):
                if key is not None:
                    if len(self._agreed) >= _MAX_AGREED:
                        self._agreed.clear()
                    self._agreed.add(key)
                return  # the common case: every rank passed the same description, without complaint
            calls = [Call.decode(v) for v in vectors]
        error = verdict(operation, group.ranks, calls, call, pairing=pairing)
        if error is not None:
            raise error


#: How many distinct calls a collective remembers as agreed (then it starts over).
_MAX_AGREED = 4096
#: Where a rank's last operation skipped the comparison (per thread), for the note on its failure.
_SKIPPED = threading.local()
#: Names the comparison of every call (otherwise each distinct call is compared once).
CHECK_VARIABLE = "RUNTIME_CHECK_COLLECTIVES"


def check_every_call() -> bool:
    """Whether ``RUNTIME_CHECK_COLLECTIVES=every`` asks to compare every call across ranks."""
    return os.environ.get(CHECK_VARIABLE, "").strip().lower() == "every"


def noted(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, whose failure after a skipped comparison says how to compare every call."""

    @functools.wraps(method)
    def _noted_call(self: CollectiveCore, *args: Any, **kwargs: Any) -> T:  # "_": stack readers skip it
        _SKIPPED.checked = True
        collective_entered(name)  # numbered for the progress watchdog (runtime._protocol.progress)
        try:
            return method(self, *args, **kwargs)
        except CollectiveMisuseError:
            raise
        except Exception as exc:
            if not getattr(_SKIPPED, "checked", True):
                exc.add_note(
                    f"note: this {method.__name__} was not compared across ranks first (each distinct call is "
                    f"compared once, then trusted); if ranks passed different arguments, run with "
                    f"{CHECK_VARIABLE}=every to compare every call and get a CollectiveMisuseError instead"
                )
            raise
        finally:
            collective_left()

    name = method.__name__
    return _noted_call


def _forgetting_run(teardown: Callable[[CollectiveCore], None]) -> Callable[[CollectiveCore], None]:
    """``teardown``, then :meth:`CollectiveCore._forget_run` (even when ``teardown`` raised)."""

    @functools.wraps(teardown)
    def _teardown(self: CollectiveCore) -> None:
        try:
            teardown(self)
        finally:
            self._forget_run()

    return _teardown


def first(*problems: CollectiveMisuseError | None) -> CollectiveMisuseError | None:
    """The first of ``problems`` that is not None."""
    return next((p for p in problems if p is not None), None)
