"""How a checked point-to-point message travels, so that any sending call pairs with any receiving one.

Every checked message carries two small signature vectors beside the data, each on a tag of its own
(derived from the user's tag, see :func:`offer_tag` / :func:`expectation_tag`):

- the sender posts, without waiting: its tensor's signature (the *offer*), a receive for the
  receiver's signature (the *expectation*), and the data itself;
- the receiver posts, without waiting: a receive for the offer and its buffer's signature. Once the
  offer arrived it receives the data into the buffer when the signatures agree, or into a scratch
  tensor of the offered shape when they do not, so that the engine never sees a size it did not
  expect. For ``irecv`` a poster thread waits for the offer (see :class:`PendingReceives`), so the
  data moves before the caller's ``wait()``, as with the engine's own ``irecv``.

Both ends then hold both signatures and reach the same verdict: the data arrived, or both raise a
:class:`~runtime.collectives.errors.CollectiveMisuseError` naming both shapes. ``send`` is a posted
send waited on, ``recv`` a posted receive waited on, so ``send``/``recv``/``isend``/``irecv`` pair in
any combination. The data of several messages between the same two ranks with the same tag is
received in the order their receives were posted, as the engine matches unchecked messages. Each
end posts in the order its peer's matching operations come (offer, expectation, data), so that an
engine that ignores tags (torch's nccl) still matches one message at a time between two ranks.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import torch

from runtime.collectives.checks import Call, Signature
from runtime.collectives.core import CollectiveCore, CollectiveGroup
from runtime.collectives.errors import CollectiveMisuseError
from runtime.collectives.handles import CollectiveHandle

__all__ = ["TAG_LIMIT", "PendingReceives", "expectation_tag", "offer_tag", "post_checked_receive", "post_checked_send"]

#: User tags are below this; the signatures travel on tags above it.
TAG_LIMIT = 1 << 29

_HINT = (
    "send and receive tensors of one shape and dtype; when the shape varies, send it first "
    "(a small int64 tensor of a fixed length), then the data"
)


def offer_tag(tag: int) -> int:
    """The tag of the sender's signature for a message with ``tag``."""
    return tag + TAG_LIMIT


def expectation_tag(tag: int) -> int:
    """The tag of the receiver's signature for a message with ``tag``."""
    return tag + 2 * TAG_LIMIT


def _signature_vector(collective: CollectiveCore, signature: Signature) -> torch.Tensor:
    return Call(signatures=(signature,)).encode(collective.device)


def _decoded(vector: torch.Tensor) -> Signature:
    _, call = Call.decode(vector)
    return call.signatures[0]


def post_checked_send(
    collective: CollectiveCore, operation: str, tensor: torch.Tensor, dst: int, group: CollectiveGroup, tag: int
) -> CollectiveHandle[None]:
    """Post the offer, the receive for the expectation and the data; ``wait()`` raises on a mismatch."""
    mine = Signature.of(tensor)
    offer = _signature_vector(collective, mine)
    expected = torch.empty_like(offer)
    works: list[CollectiveHandle[Any]] = [
        collective._isend(offer, dst, group, offer_tag(tag)),
        collective._irecv(expected, dst, group, expectation_tag(tag)),
        collective._isend(tensor, dst, group, tag),
    ]

    def finish() -> None:
        theirs = _decoded(expected)
        if theirs != mine:
            raise CollectiveMisuseError(
                f"{operation} to rank {dst}: it expects {theirs.describe()}, but this rank sends "
                f"{mine.describe()}; the receiver discarded the data",
                hint=_HINT,
            )

    return CollectiveHandle(
        operation, finish, wait=lambda: [w.wait() for w in works], poll=lambda: all(w.is_completed() for w in works)
    )


class _Receipt:
    """One checked receive: its signature exchange, then (once the offer is known) its data."""

    def __init__(self, collective: CollectiveCore, tensor: torch.Tensor, group: CollectiveGroup, tag: int) -> None:
        self.collective, self.tensor, self.group, self.tag = collective, tensor, group, tag
        self.mine = Signature.of(tensor)
        self.offer = _signature_vector(collective, self.mine)  # overwritten by the sender's
        self.offered: CollectiveHandle[torch.Tensor] | None = None  # None: the offer is already here
        self.before: threading.Event | None = None  # the previous receive from the same sender and tag
        self.src = -1
        self.sent: Signature | None = None
        self.answer: CollectiveHandle[None] | None = None
        self.data: CollectiveHandle[torch.Tensor] | None = None
        self.error: BaseException | None = None
        self.posted = threading.Event()
        self._claim = threading.Lock()

    def answer_to(self, src: int) -> None:
        self.src = src
        self.answer = self.collective._isend(
            _signature_vector(self.collective, self.mine), src, self.group, expectation_tag(self.tag)
        )

    def post_data(self) -> None:
        """Wait for the offer (and the data receive posted before this one), then post the data receive.
        Whichever comes first does it: a poster thread, or the caller's ``wait()``."""
        if not self._claim.acquire(blocking=False):
            return
        try:
            if self.offered is not None:
                self.offered.wait()
            if self.before is not None:
                self.before.wait()
            self.sent = sent = _decoded(self.offer)
            target = self.tensor
            if sent != self.mine:  # received and discarded: the engine must get the size the sender sends
                assert sent.dtype is not None  # a sender always offers a tensor
                target = torch.empty(sent.shape, dtype=sent.dtype, device=self.collective.device)
            self.data = self.collective._irecv(target, self.src, self.group, self.tag)
        except BaseException as exc:  # noqa: BLE001  (raised on the caller's wait, not in a poster thread)
            self.error = exc
        finally:
            self.posted.set()

    def is_completed(self) -> bool:
        if not self.posted.is_set() or self.error is not None:
            return self.posted.is_set()
        assert self.data is not None and self.answer is not None
        return self.data.is_completed() and self.answer.is_completed()

    def finish(self, operation: str) -> torch.Tensor:
        self.post_data()
        self.posted.wait()
        if self.error is not None:
            raise self.error
        assert self.data is not None and self.answer is not None and self.sent is not None
        self.data.wait()
        self.answer.wait()
        if self.sent != self.mine:
            raise CollectiveMisuseError(
                f"{operation} from rank {self.src}: it sends {self.sent.describe()}, but the receiving tensor has "
                f"{self.mine.describe()}; the tensor was left unchanged",
                hint=_HINT,
            )
        return self.tensor


class PendingReceives:
    """A collective's checked receives under way: the last one per group, sender and tag (the next waits
    for its data receive to be posted), and the threads that post data receives once offers arrive.

    A poster thread that finished waits for the next receive; one more starts whenever every thread
    is busy, so a receive whose offer is late never holds up another.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[Any, ...], threading.Event] = {}
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._pid = os.getpid()

    def enter(self, group: CollectiveGroup, src: int, tag: int, posted: threading.Event) -> threading.Event | None:
        key = (group.ranks, id(group.handle), src, tag)
        with self._lock:
            before = self._last.get(key)
            self._last[key] = posted
            return None if before is None or before.is_set() else before  # one entry per key: the table stays small

    def forget(self) -> None:
        """Forget the receives of a run that ended: none is the predecessor of the next run's (whose first
        receive from a sender would otherwise wait for one that never completes). The threads stay."""
        with self._lock:
            self._last.clear()

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._pid != os.getpid():  # a forked child has none of its parent's threads
                self._pid, self._idle, self._tasks = os.getpid(), 0, queue.SimpleQueue()
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that thread takes this task
            tasks = self._tasks
        tasks.put(task)
        if start:
            threading.Thread(target=self._post, args=(tasks,), name="runtime-irecv", daemon=True).start()

    def _post(self, tasks: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            tasks.get()()
            with self._lock:
                self._idle += 1


def post_checked_receive(
    collective: CollectiveCore,
    pending: PendingReceives,
    operation: str,
    tensor: torch.Tensor,
    src: int | None,
    group: CollectiveGroup,
    tag: int,
    *,
    background: bool,
) -> tuple[CollectiveHandle[torch.Tensor], int]:
    """Post a checked receive; return its handle (``wait()`` raises on a mismatch) and the sender.

    ``src=None`` (``recv_any``) waits here for the first offer, which names the sender.
    ``background``: a poster thread posts the data receive once the offer arrived (``irecv``), unless
    ``wait()`` comes first; otherwise ``wait()`` does (``recv``, ``recv_any``).
    """
    receipt = _Receipt(collective, tensor, group, tag)
    if src is None:
        src = collective._recv(receipt.offer, None, group, offer_tag(tag))
    else:
        receipt.offered = collective._irecv(receipt.offer, src, group, offer_tag(tag))
    receipt.answer_to(src)
    receipt.before = pending.enter(group, src, tag, receipt.posted)
    if background:
        pending.submit(receipt.post_data)
    return CollectiveHandle(operation, lambda: receipt.finish(operation), poll=receipt.is_completed), src
