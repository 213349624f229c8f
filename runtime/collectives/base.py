"""Collective: every distributed communication the runtime makes goes through one of these.

The public operations mirror ``torch.distributed`` (broadcast, all_reduce, reduce, all_gather,
gather, scatter, reduce_scatter, all_to_all, send/recv, barrier, object operations, subgroups).
They check their arguments here, once for every engine (see :mod:`runtime.collectives.checks`),
then call the engine's primitive: a subclass implements the ``_``-prefixed methods. The shared
contract test suite (``tests/contract/collective_cases.py``) states what each operation does.
"""

from __future__ import annotations

import functools
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar, Literal, TypeVar

import attrs
import torch

from runtime.collectives.checks import REDUCE_OPS, Call, Signature, reduce_op_problem, root_problem, verdict
from runtime.collectives.errors import CollectiveMisuseError, CollectiveNotSupportedError

__all__ = ["CHECK_VARIABLE", "OPERATIONS", "REDUCE_OPS", "Collective", "CollectiveGroup", "ReduceOp", "check_every_call"]

ReduceOp = Literal["sum", "mean", "max", "min"]

#: Every operation of the API, by name (what ``unsupported_operations`` may list).
OPERATIONS: tuple[str, ...] = (
    "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
    "all_to_all", "send", "recv", "barrier", "broadcast_object", "all_gather_object", "new_group",
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


class Collective(ABC):
    """Communication among the ``world_size`` processes of a run.

    Tensor operations work in place where the engine does and return the result, so
    ``x = collective.all_reduce(x)`` is always right. Between :meth:`setup` and
    :meth:`teardown`, :attr:`rank` and :attr:`world_size` describe this process.

    Every operation takes an optional ``group`` (from :meth:`new_group`; default: all ranks).
    Before running, ranks compare their arguments (one small all-gather) so that tensors of
    different shapes or dtypes, or disagreeing roots or ops, raise a
    :class:`~runtime.collectives.errors.CollectiveMisuseError` on every rank instead of hanging
    the engine. By default each distinct call (operation, group, op, root and tensor shapes and
    dtypes) is compared the first time this rank makes it, then trusted: a training loop pays
    for the comparison once. ``RUNTIME_CHECK_COLLECTIVES=every`` compares every call;
    ``check_across_ranks = False`` skips the exchange (misuse is then undefined). An operation
    that fails after its comparison was skipped carries a note saying how to compare every call.

    An engine that lacks an operation lists it in :attr:`unsupported_operations` with the reason;
    calling it raises :class:`~runtime.collectives.errors.CollectiveNotSupportedError`.
    """

    #: Operation name -> why this engine cannot do it.
    unsupported_operations: ClassVar[Mapping[str, str]] = {}
    #: The name the collective is registered under (for messages).
    name: ClassVar[str] = "collective"

    def __init__(self) -> None:
        self._rank = 0
        self._world_size = 1
        self.check_across_ranks = True
        #: Compare every call (``RUNTIME_CHECK_COLLECTIVES=every``), not only each new one.
        self.check_every_call = check_every_call()
        self._agreed: set[tuple[Any, ...]] = set()

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
    def setup(
        self,
        rank: int,
        world_size: int,
        backend: str | None = None,
        master_addr: str = "127.0.0.1",
        master_port: int | None = None,
        timeout: timedelta | float | None = None,
        *,
        device: torch.device | None = None,
        rendezvous_timeout: float | None = None,
    ) -> None:
        """Join the group: ``rank`` of ``world_size`` processes meeting at ``master_addr:master_port``.

        ``timeout`` (seconds or a timedelta) bounds every operation; ``rendezvous_timeout``
        (seconds) bounds the wait for every rank to join (default: ``RUNTIME_RENDEZVOUS_TIMEOUT``, else
        300; a collective without a rendezvous of its own ignores it); ``device`` is the device this process's tensors
        live on (some backends need it).
        """

    @abstractmethod
    def teardown(self) -> None:
        """Leave the group (no-op when not set up)."""

    # -- groups -----------------------------------------------------------------------------------

    def new_group(self, ranks: Sequence[int]) -> CollectiveGroup:
        """A group of the given global ranks. Every rank of the run calls it, members or not,
        in the same order as other ``new_group`` calls; only members use the group afterwards."""
        self._supported("new_group")
        self._require_setup()
        members = list(ranks)
        bad = [r for r in members if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self._world_size]
        if not members or bad or len(set(members)) != len(members):
            raise CollectiveMisuseError(
                f"new_group needs distinct ranks between 0 and {self._world_size - 1}, got {members!r}"
            )
        ordered = tuple(sorted(members))
        return CollectiveGroup(ordered, self._new_group(ordered))

    # -- tensor operations ------------------------------------------------------------------------

    def broadcast(self, tensor: torch.Tensor, src: int = 0, group: CollectiveGroup | None = None) -> torch.Tensor:
        """Every rank's ``tensor`` becomes rank ``src``'s."""
        g = self._group("broadcast", group)
        self._agree("broadcast", g, Call(root=_int(src), signatures=(Signature.of(tensor),),
                                         problem=root_problem("src", src, g.ranks)))  # fmt: skip
        return self._broadcast(tensor, src, g)

    def all_reduce(
        self, tensor: torch.Tensor, op: ReduceOp = "sum", group: CollectiveGroup | None = None
    ) -> torch.Tensor:
        """Every rank's ``tensor`` becomes the element-wise reduction over the group's ranks."""
        g = self._group("all_reduce", group)
        self._agree("all_reduce", g, _reduction(op, tensor))
        return self._all_reduce(tensor, op, g)

    def reduce(
        self, tensor: torch.Tensor, dst: int = 0, op: ReduceOp = "sum", group: CollectiveGroup | None = None
    ) -> torch.Tensor:
        """Rank ``dst``'s ``tensor`` becomes the reduction; on the other ranks ``tensor`` is
        returned with contents left unspecified (engines use it as scratch space)."""
        g = self._group("reduce", group)
        call = _reduction(op, tensor)
        call = attrs.evolve(call, root=_int(dst), problem=call.problem or root_problem("dst", dst, g.ranks))
        self._agree("reduce", g, call)
        return self._reduce(tensor, dst, op, g)

    def all_gather(self, tensor: torch.Tensor, group: CollectiveGroup | None = None) -> list[torch.Tensor]:
        """Every rank's ``tensor`` (same shape and dtype on all ranks), ordered by rank."""
        g = self._group("all_gather", group)
        self._agree("all_gather", g, Call(signatures=(Signature.of(tensor),)))
        return self._all_gather(tensor, g)

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, group: CollectiveGroup | None = None
    ) -> list[torch.Tensor] | None:
        """On rank ``dst``, every rank's ``tensor`` ordered by rank; ``None`` on the other ranks."""
        g = self._group("gather", group)
        self._agree("gather", g, Call(root=_int(dst), signatures=(Signature.of(tensor),),
                                      problem=root_problem("dst", dst, g.ranks)))  # fmt: skip
        return self._gather(tensor, dst, g)

    def scatter(
        self,
        tensor: torch.Tensor,
        scatter_list: Sequence[torch.Tensor] | None = None,
        src: int = 0,
        group: CollectiveGroup | None = None,
    ) -> torch.Tensor:
        """Rank ``i`` of the group gets ``scatter_list[i]`` from rank ``src``, written into ``tensor``
        (its output buffer, of that chunk's shape and dtype). Only ``src`` passes a list."""
        g = self._group("scatter", group)
        problem = root_problem("src", src, g.ranks)
        chunks: list[Signature] = [Signature(None, ())] * g.size
        if self._rank == src:
            if scatter_list is None or len(scatter_list) != g.size:
                count = "none" if scatter_list is None else len(scatter_list)
                problem = problem or CollectiveMisuseError(
                    f"scatter: the source rank passes one tensor per rank of the group ({g.size}) as "
                    f"scatter_list, got {count}"
                )
            else:
                chunks = [Signature.of(t) for t in scatter_list]
        elif scatter_list is not None:
            problem = problem or CollectiveMisuseError(
                f"scatter: only the source rank (src={src}) passes scatter_list; rank {self._rank} passed one "
                "(pass None on the other ranks)"
            )
        self._agree(
            "scatter", g, Call(root=_int(src), signatures=(Signature.of(tensor), *chunks), problem=problem), "scatter"
        )
        return self._scatter(tensor, list(scatter_list) if scatter_list is not None else None, src, g)

    def reduce_scatter(
        self, tensor: torch.Tensor, op: ReduceOp = "sum", group: CollectiveGroup | None = None
    ) -> torch.Tensor:
        """Reduce ``tensor`` over the group, then give its ``i``-th rank the ``i``-th of ``size``
        equal chunks along dimension 0 (whose length must divide by the group's size)."""
        g = self._group("reduce_scatter", group)
        call = _reduction(op, tensor)
        if call.problem is None and (tensor.dim() == 0 or tensor.shape[0] % g.size):
            call = attrs.evolve(call, problem=CollectiveMisuseError(
                f"reduce_scatter splits dimension 0 into {g.size} equal chunks, but the tensor has shape "
                f"{tuple(tensor.shape)}"
            ))  # fmt: skip
        self._agree("reduce_scatter", g, call)
        return self._reduce_scatter(tensor, op, g)

    def all_to_all(self, tensors: Sequence[torch.Tensor], group: CollectiveGroup | None = None) -> list[torch.Tensor]:
        """Rank ``i`` sends ``tensors[j]`` to rank ``j``; returns what each rank sent here, by rank.
        Every tensor on every rank has the same shape and dtype."""
        g = self._group("all_to_all", group)
        tensors = list(tensors)
        problem: CollectiveMisuseError | None = None
        signatures = {Signature.of(t) for t in tensors}
        if len(tensors) != g.size:
            problem = CollectiveMisuseError(
                f"all_to_all takes one tensor per rank of the group ({g.size}), got {len(tensors)}"
            )
        elif len(signatures) > 1:
            problem = CollectiveMisuseError(
                "all_to_all needs tensors of one shape and dtype, got "
                + ", ".join(Signature.of(t).describe() for t in tensors)
            )
        signature = Signature.of(tensors[0]) if tensors else Signature(None, ())
        self._agree("all_to_all", g, Call(count=len(tensors), signatures=(signature,), problem=problem))
        return self._all_to_all(tensors, g)

    def send(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup | None = None) -> None:
        """Send ``tensor`` to rank ``dst``, which calls :meth:`recv` with a tensor of the same shape
        and dtype. Both raise if they do not match."""
        g = self._group("send", group)
        problem = _peer_problem("dst", dst, g, self._rank)
        if problem is not None:
            raise problem
        if self.check_across_ranks:
            offer = Call(signatures=(Signature.of(tensor),)).encode(self._device())
            self._send(offer, dst, g)
            mismatch, peer = Call.decode(self._recv(torch.empty_like(offer), dst, g))
            if mismatch:
                raise CollectiveMisuseError(
                    f"send to rank {dst}: it expects {peer.signatures[0].describe()}, but this rank sends "
                    f"{Signature.of(tensor).describe()}; nothing was sent"
                )
        self._send(tensor, dst, g)

    def recv(self, tensor: torch.Tensor, src: int, group: CollectiveGroup | None = None) -> torch.Tensor:
        """Receive into ``tensor`` what rank ``src`` sends with :meth:`send`, and return it."""
        g = self._group("recv", group)
        problem = _peer_problem("src", src, g, self._rank)
        if problem is not None:
            raise problem
        if self.check_across_ranks:
            mine = Signature.of(tensor)
            _, offer = Call.decode(self._recv(Call(signatures=(mine,)).encode(self._device()), src, g))
            sent = offer.signatures[0]
            # The flag slot of the answer says "mismatch" to the sender (see Call.encode).
            mismatch = CollectiveMisuseError("mismatch") if sent != mine else None
            self._send(Call(signatures=(mine,), problem=mismatch).encode(self._device()), src, g)
            if mismatch is not None:
                raise CollectiveMisuseError(
                    f"recv from rank {src}: it sends {sent.describe()}, but the receiving tensor has "
                    f"{mine.describe()}; nothing was received"
                )
        return self._recv(tensor, src, g)

    def barrier(self, group: CollectiveGroup | None = None) -> None:
        """Wait until every rank of the group has arrived."""
        self._barrier(self._group("barrier", group))

    # -- objects ----------------------------------------------------------------------------------

    def broadcast_object(self, obj: T, src: int = 0, group: CollectiveGroup | None = None) -> T:
        """Rank ``src``'s picklable ``obj``, on every rank of the group."""
        g = self._group("broadcast_object", group)
        self._agree("broadcast_object", g, Call(root=_int(src), problem=root_problem("src", src, g.ranks)))
        return self._broadcast_object(obj, src, g)

    def all_gather_object(self, obj: Any, group: CollectiveGroup | None = None) -> list[Any]:
        """Every rank's picklable ``obj``, ordered by rank."""
        return self._all_gather_object(obj, self._group("all_gather_object", group))

    def reduce_boolean_decision(
        self,
        decision: bool,
        all: bool = True,  # noqa: A002
        group: CollectiveGroup | None = None,
    ) -> bool:
        """Agree on a decision: ``all=True`` is true only if every rank says so, else if any does."""
        vote = torch.tensor(int(bool(decision)), dtype=torch.int32, device=self._device())
        count = int(self.all_reduce(vote, "sum", group).item())
        size = (group or self.world).size
        return count == size if all else count > 0

    # -- what an engine implements ----------------------------------------------------------------

    #: How to set the engine up, said when it is used before :meth:`setup` (``None``: it needs none).
    setup_hint: ClassVar[str | None] = None

    def _require_setup(self) -> None:
        """Raise a clear error when the collective is used before :meth:`setup`."""
        if self.setup_hint is not None and not self.is_initialized:
            raise RuntimeError(f"the {self.name} collective is not set up: {self.setup_hint}")

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

    def _send(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup) -> None:
        raise self._missing("send")

    def _recv(self, tensor: torch.Tensor, src: int, group: CollectiveGroup) -> torch.Tensor:
        raise self._missing("recv")

    # -- shared machinery ------------------------------------------------------------------------

    def _missing(self, operation: str) -> CollectiveNotSupportedError:
        reason = self.unsupported_operations.get(operation, "it does not implement this operation")
        return CollectiveNotSupportedError(self.name, operation, reason)

    def _supported(self, operation: str) -> None:
        if operation in self.unsupported_operations:
            raise self._missing(operation)

    def _group(self, operation: str, group: CollectiveGroup | None) -> CollectiveGroup:
        self._supported(operation)
        self._require_setup()
        g = self.world if group is None else group
        if not isinstance(g, CollectiveGroup):
            raise CollectiveMisuseError(f"{operation}: group must come from collective.new_group(ranks), got {g!r}")
        if self._rank not in g.ranks:
            raise CollectiveMisuseError(
                f"{operation}: rank {self._rank} is not a member of the group of ranks "
                f"{', '.join(map(str, g.ranks))}; only members call its operations"
            )
        return g

    def _agree(self, operation: str, group: CollectiveGroup, call: Call, pairing: str = "same") -> None:
        """Exchange ``call`` with the group and raise the same error on every rank if they do not fit."""
        if call.problem is not None and (group.size == 1 or not self.check_across_ranks):
            raise call.problem
        if not self.check_across_ranks:
            return
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


def _noted(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, whose failure after a skipped comparison says how to compare every call."""

    @functools.wraps(method)
    def _noted_call(self: Collective, *args: Any, **kwargs: Any) -> T:  # "_": stack readers skip it
        _SKIPPED.checked = True
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

    return _noted_call


for _name in ("broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
              "all_to_all", "send", "recv", "barrier", "broadcast_object", "all_gather_object"):  # fmt: skip
    setattr(Collective, _name, _noted(getattr(Collective, _name)))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else -1


def _reduction(op: object, tensor: torch.Tensor) -> Call:
    code = REDUCE_OPS.index(op) if op in REDUCE_OPS else -1  # type: ignore[arg-type]
    return Call(op=code, signatures=(Signature.of(tensor),), problem=reduce_op_problem(op, tensor))


def _peer_problem(name: str, peer: object, group: CollectiveGroup, rank: int) -> CollectiveMisuseError | None:
    problem = root_problem(name, peer, group.ranks)
    if problem is None and peer == rank:
        problem = CollectiveMisuseError(f"{name}={peer} is this rank itself; send/recv need another rank of the group")
    return problem
