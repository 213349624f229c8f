"""Messages between two ranks: ``send``/``recv`` (matched, checked), ``recv_any``, ``isend``/``irecv``."""

from __future__ import annotations

import torch

from runtime.collectives.arguments import as_rank, overlap_problem, root_problem, tensor_problem, type_name
from runtime.collectives.core import CollectiveCore, CollectiveGroup, first, noted
from runtime.collectives.envelopes import TAG_LIMIT, PendingReceives, post_checked_receive, post_checked_send
from runtime.collectives.errors import CollectiveArgumentTypeError, CollectiveMisuseError
from runtime.collectives.handles import CollectiveHandle

__all__ = ["PointToPoint"]


class PointToPoint(CollectiveCore):
    """Point-to-point operations. Checked messages carry both ends' tensor signatures beside the data
    (:mod:`runtime.collectives.envelopes`), so ``send``/``isend`` pair with ``recv``/``irecv``/``recv_any``
    in any combination, and a shape or dtype mismatch raises on both ends. A wrong argument raises on
    the rank that passed it only (its would-be peer waits until the collective's timeout): no
    group-wide exchange can tell the peer."""

    def __init__(self) -> None:
        super().__init__()
        self._pending_receives = PendingReceives()

    def _forget_run(self) -> None:
        super()._forget_run()
        self._pending_receives.forget()

    @noted
    def send(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup | None = None, tag: int = 0) -> None:
        """Send ``tensor`` to rank ``dst``, which receives it with :meth:`recv`, :meth:`irecv` or
        :meth:`recv_any` into a tensor of the same shape and dtype, with the same ``tag``. Both raise if
        they do not match."""
        g = self._group("send", group)
        _raise(first(tensor_problem("send", "tensor", tensor, "what this rank sends"), _tag_problem("send", tag),
                     _peer_problem("send", "dst", dst, g, self._rank)))  # fmt: skip
        dst, tag = int(dst), int(tag)
        if not self.check_across_ranks:
            self._send(tensor, dst, g, tag)
            return
        post_checked_send(self, "send", tensor, dst, g, tag).wait()

    @noted
    def recv(self, tensor: torch.Tensor, src: int, group: CollectiveGroup | None = None, tag: int = 0) -> torch.Tensor:
        """Receive into ``tensor`` what rank ``src`` sends with :meth:`send` or :meth:`isend` (same ``tag``),
        and return it."""
        g = self._group("recv", group)
        if src is None:
            raise CollectiveArgumentTypeError(
                "recv: src must be an integer rank, got None",
                hint="to receive from whichever rank sends, use recv_any(tensor), which also returns the sender",
            )
        _raise(first(tensor_problem("recv", "tensor", tensor, "the buffer this rank receives into"),
                     overlap_problem("recv", "tensor", tensor), _tag_problem("recv", tag),
                     _peer_problem("recv", "src", src, g, self._rank)))  # fmt: skip
        src, tag = int(src), int(tag)
        if not self.check_across_ranks:
            self._recv(tensor, src, g, tag)
            return tensor
        handle, _ = post_checked_receive(self, self._pending_receives, "recv", tensor, src, g, tag, background=False)
        return handle.wait()

    @noted
    def recv_any(
        self, tensor: torch.Tensor, group: CollectiveGroup | None = None, tag: int = 0
    ) -> tuple[torch.Tensor, int]:
        """Receive into ``tensor`` the first message sent here with :meth:`send` or :meth:`isend` (and
        ``tag``) by any rank of the group; return ``(tensor, sender)`` (the sender's global rank)."""
        g = self._group("recv_any", group)
        _raise(first(tensor_problem("recv_any", "tensor", tensor, "the buffer this rank receives into"),
                     overlap_problem("recv_any", "tensor", tensor), _tag_problem("recv_any", tag)))  # fmt: skip
        tag = int(tag)
        if g.size == 1:
            raise CollectiveMisuseError(
                f"recv_any: the group holds only this rank ({self._rank}), so no other rank can send to it"
            )
        if not self.check_across_ranks:
            return tensor, self._recv(tensor, None, g, tag)
        handle, sender = post_checked_receive(
            self, self._pending_receives, "recv_any", tensor, None, g, tag, background=False
        )
        return handle.wait(), sender

    @noted
    def isend(
        self, tensor: torch.Tensor, dst: int, group: CollectiveGroup | None = None, tag: int = 0
    ) -> CollectiveHandle[None]:
        """Start sending ``tensor`` to rank ``dst`` (which receives it with :meth:`irecv`, :meth:`recv` or
        :meth:`recv_any`, with the same ``tag``); ``wait()`` on the handle before changing ``tensor``.
        ``wait()`` raises, as :meth:`send` does, when the receiver's tensor has another shape or dtype."""
        g = self._group("isend", group)
        _raise(first(tensor_problem("isend", "tensor", tensor, "what this rank sends"), _tag_problem("isend", tag),
                     _peer_problem("isend", "dst", dst, g, self._rank)))  # fmt: skip
        if not self.check_across_ranks:
            return self._isend(tensor, int(dst), g, int(tag))
        return post_checked_send(self, "isend", tensor, int(dst), g, int(tag))

    @noted
    def irecv(
        self, tensor: torch.Tensor, src: int, group: CollectiveGroup | None = None, tag: int = 0
    ) -> CollectiveHandle[torch.Tensor]:
        """Start receiving into ``tensor`` what rank ``src`` sends with :meth:`isend` or :meth:`send`; the
        handle's ``wait()`` returns the filled tensor, or raises, as :meth:`recv` does, when the sender's
        tensor has another shape or dtype."""
        g = self._group("irecv", group)
        _raise(first(tensor_problem("irecv", "tensor", tensor, "the buffer this rank receives into"),
                     overlap_problem("irecv", "tensor", tensor), _tag_problem("irecv", tag),
                     _peer_problem("irecv", "src", src, g, self._rank)))  # fmt: skip
        src, tag = int(src), int(tag)
        if not self.check_across_ranks:
            return self._irecv(tensor, src, g, tag)
        handle, _ = post_checked_receive(self, self._pending_receives, "irecv", tensor, src, g, tag, background=True)
        return handle


def _raise(problem: CollectiveMisuseError | None) -> None:
    if problem is not None:
        raise problem


def _peer_problem(
    operation: str, name: str, peer: object, group: CollectiveGroup, rank: int
) -> CollectiveMisuseError | None:
    problem = root_problem(name, peer, group.ranks, operation)
    if problem is None and as_rank(peer) == rank:
        problem = CollectiveMisuseError(
            f"{operation}: {name}={peer!r} is this rank itself; send/recv need another rank of the group",
            hint="pass the peer's global rank (a tensor that stays on this rank needs no message)",
        )
    return problem


def _tag_problem(operation: str, tag: object) -> CollectiveMisuseError | None:
    value = as_rank(tag)
    if value is not None and 0 <= value < TAG_LIMIT:
        return None
    kind = CollectiveMisuseError if value is not None else CollectiveArgumentTypeError
    return kind(
        f"{operation}: tag must be an integer >= 0 and below {TAG_LIMIT} (the same on both ends), got "
        f"{type_name(tag)} {tag!r}",
        hint="pass the same non-negative int as tag to the sender and the receiver",
    )
