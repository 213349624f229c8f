"""How a checked point-to-point message travels, so that any sending call pairs with any receiving one.

Every checked message carries two small signature vectors beside the data, each on a tag of its own
(derived from the user's tag, see :func:`offer_tag` / :func:`expectation_tag`):

- the sender posts, without waiting: its tensor's signature (the *offer*), a receive for the
  receiver's signature (the *expectation*), and the data itself;
- the receiver posts, without waiting: its buffer's signature and a receive for the offer. Once the
  offer arrived (a thread waits for it when the receiving call is asynchronous), it receives the
  data into the buffer when the signatures agree, or into a scratch tensor of the offered shape
  when they do not, so that the engine never sees a size it did not expect.

Both ends then hold both signatures and reach the same verdict: the data arrived, or both raise a
:class:`~runtime.collectives.errors.CollectiveMisuseError` naming both shapes. ``send`` is a posted
send waited on, ``recv`` a posted receive waited on, so ``send``/``recv``/``isend``/``irecv`` pair in
any combination. The data of several messages between the same two ranks with the same tag is
received in the order their receives were posted, as the engine matches unchecked messages.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from runtime.collectives.checks import Call, Signature
from runtime.collectives.core import CollectiveCore, CollectiveGroup
from runtime.collectives.errors import CollectiveMisuseError
from runtime.collectives.handles import CollectiveHandle

__all__ = ["TAG_LIMIT", "ReceiveOrder", "expectation_tag", "offer_tag", "post_checked_receive", "post_checked_send"]

#: User tags are below this; the signatures travel on tags above it.
TAG_LIMIT = 1 << 29

_HINT = (
    "\n  hint: send and receive tensors of one shape and dtype; when the shape varies, send it first "
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
                f"{mine.describe()}; the receiver discarded the data{_HINT}"
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
        self.sent: Signature | None = None
        self.answer: CollectiveHandle[None] | None = None
        self.data: CollectiveHandle[torch.Tensor] | None = None
        self.error: BaseException | None = None
        self.posted = threading.Event()

    def answer_to(self, src: int) -> None:
        self.answer = self.collective._isend(
            _signature_vector(self.collective, self.mine), src, self.group, expectation_tag(self.tag)
        )

    def post_data(self, src: int, offer: CollectiveHandle[torch.Tensor] | None, before: threading.Event | None) -> None:
        """Wait for the offer (and the data receive posted before this one), then post the data receive."""
        try:
            if offer is not None:
                offer.wait()
            if before is not None:
                before.wait()
            self.sent = _decoded(self.offer)
            sent = self.sent
            target = self.tensor
            if sent != self.mine:  # received and discarded: the engine must get the size the sender sends
                assert sent.dtype is not None  # a sender always offers a tensor
                target = torch.empty(sent.shape, dtype=sent.dtype, device=self.collective.device)
            self.data = self.collective._irecv(target, src, self.group, self.tag)
        except BaseException as exc:  # noqa: BLE001  (raised on the caller's wait, not in this thread)
            self.error = exc
        finally:
            self.posted.set()

    def is_completed(self) -> bool:
        if not self.posted.is_set() or self.error is not None:
            return self.posted.is_set()
        assert self.data is not None and self.answer is not None
        return self.data.is_completed() and self.answer.is_completed()

    def finish(self, operation: str, src: int) -> torch.Tensor:
        self.posted.wait()
        if self.error is not None:
            raise self.error
        assert self.data is not None and self.answer is not None and self.sent is not None
        self.data.wait()
        self.answer.wait()
        if self.sent != self.mine:
            raise CollectiveMisuseError(
                f"{operation} from rank {src}: it sends {self.sent.describe()}, but the receiving tensor has "
                f"{self.mine.describe()}; the tensor was left unchanged{_HINT}"
            )
        return self.tensor


class ReceiveOrder:
    """The last data receive posted (or about to be) per group, sender and tag, so that the next waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[Any, ...], threading.Event] = {}

    def enter(self, group: CollectiveGroup, src: int, tag: int, posted: threading.Event) -> threading.Event | None:
        key = (group.ranks, id(group.handle), src, tag)
        with self._lock:
            before = self._last.get(key)
            self._last[key] = posted
            return None if before is None or before.is_set() else before  # one entry per key: the table stays small


def post_checked_receive(
    collective: CollectiveCore,
    order: ReceiveOrder,
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
    ``background``: the data receive is posted by a thread once the offer arrived (``irecv``);
    otherwise here, before returning (``recv``, ``recv_any``).
    """
    receipt = _Receipt(collective, tensor, group, tag)
    offer: CollectiveHandle[torch.Tensor] | None = None
    if src is None:
        src = collective._recv(receipt.offer, None, group, offer_tag(tag))
    else:
        offer = collective._irecv(receipt.offer, src, group, offer_tag(tag))
    receipt.answer_to(src)
    before = order.enter(group, src, tag, receipt.posted)
    if background:
        threading.Thread(
            target=receipt.post_data, args=(src, offer, before), name=f"runtime-{operation}", daemon=True
        ).start()
    else:
        receipt.post_data(src, offer, before)
    sender = src
    return CollectiveHandle(operation, lambda: receipt.finish(operation, sender), poll=receipt.is_completed), sender
