"""Messages between two ranks: ``send``/``recv`` (matched, checked), ``recv_any``, ``isend``/``irecv``."""

from __future__ import annotations

import torch

from runtime.collectives.arguments import as_rank, overlap_problem, root_problem, tensor_problem, type_name
from runtime.collectives.checks import Call, Signature
from runtime.collectives.core import CollectiveCore, CollectiveGroup, first, noted
from runtime.collectives.errors import CollectiveArgumentTypeError, CollectiveMisuseError
from runtime.collectives.handles import CollectiveHandle

__all__ = ["PointToPoint"]


class PointToPoint(CollectiveCore):
    """Point-to-point operations. A wrong argument raises on the rank that passed it only (its would-be
    peer waits until the collective's timeout): no group-wide exchange can tell the peer."""

    @noted
    def send(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup | None = None, tag: int = 0) -> None:
        """Send ``tensor`` to rank ``dst``, which calls :meth:`recv` (or :meth:`recv_any`) with a tensor
        of the same shape and dtype and the same ``tag``. Both raise if they do not match."""
        g = self._group("send", group)
        _raise(first(tensor_problem("send", "tensor", tensor, "what this rank sends"), _tag_problem("send", tag),
                     _peer_problem("send", "dst", dst, g, self._rank)))  # fmt: skip
        dst, tag = int(dst), int(tag)
        if self.check_across_ranks:
            offer = Call(signatures=(Signature.of(tensor),)).encode(self._device())
            self._send(offer, dst, g, tag)
            answer = torch.empty_like(offer)
            self._recv(answer, dst, g, tag)
            mismatch, peer = Call.decode(answer)
            if mismatch:
                raise CollectiveMisuseError(
                    f"send to rank {dst}: it expects {peer.signatures[0].describe()}, but this rank sends "
                    f"{Signature.of(tensor).describe()}; nothing was sent"
                )
        self._send(tensor, dst, g, tag)

    @noted
    def recv(self, tensor: torch.Tensor, src: int, group: CollectiveGroup | None = None, tag: int = 0) -> torch.Tensor:
        """Receive into ``tensor`` what rank ``src`` sends with :meth:`send` (same ``tag``), and return it."""
        g = self._group("recv", group)
        if src is None:
            raise CollectiveArgumentTypeError(
                "recv: src must be an integer rank, got None\n  hint: to receive from whichever rank sends, "
                "use recv_any(tensor), which also returns the sender"
            )
        _raise(first(tensor_problem("recv", "tensor", tensor, "the buffer this rank receives into"),
                     overlap_problem("recv", "tensor", tensor), _tag_problem("recv", tag),
                     _peer_problem("recv", "src", src, g, self._rank)))  # fmt: skip
        src, tag = int(src), int(tag)
        if self.check_across_ranks:
            self._answer_offer(tensor, src, g, tag, "recv")
        self._recv(tensor, src, g, tag)
        return tensor

    @noted
    def recv_any(
        self, tensor: torch.Tensor, group: CollectiveGroup | None = None, tag: int = 0
    ) -> tuple[torch.Tensor, int]:
        """Receive into ``tensor`` the first message sent here with :meth:`send` (and ``tag``) by any rank
        of the group; return ``(tensor, sender)`` (the sender's global rank)."""
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
        sender = self._answer_offer(tensor, None, g, tag, "recv_any")
        self._recv(tensor, sender, g, tag)
        return tensor, sender

    @noted
    def isend(
        self, tensor: torch.Tensor, dst: int, group: CollectiveGroup | None = None, tag: int = 0
    ) -> CollectiveHandle[None]:
        """Start sending ``tensor`` to rank ``dst`` (which receives it with :meth:`irecv` or :meth:`recv`
        with the same ``tag``); ``wait()`` on the handle before changing ``tensor``. Unlike :meth:`send`,
        the shapes are not compared with the receiver first (that would wait for it)."""
        g = self._group("isend", group)
        _raise(first(tensor_problem("isend", "tensor", tensor, "what this rank sends"), _tag_problem("isend", tag),
                     _peer_problem("isend", "dst", dst, g, self._rank)))  # fmt: skip
        return self._isend(tensor, int(dst), g, int(tag))

    @noted
    def irecv(
        self, tensor: torch.Tensor, src: int, group: CollectiveGroup | None = None, tag: int = 0
    ) -> CollectiveHandle[torch.Tensor]:
        """Start receiving into ``tensor`` from rank ``src``; the handle's ``wait()`` returns the filled tensor.
        The sender must send unchecked (:meth:`isend`, or :meth:`send` with ``check_across_ranks`` off)."""
        g = self._group("irecv", group)
        _raise(first(tensor_problem("irecv", "tensor", tensor, "the buffer this rank receives into"),
                     overlap_problem("irecv", "tensor", tensor), _tag_problem("irecv", tag),
                     _peer_problem("irecv", "src", src, g, self._rank)))  # fmt: skip
        return self._irecv(tensor, int(src), g, int(tag))

    def _answer_offer(self, tensor: torch.Tensor, src: int | None, g: CollectiveGroup, tag: int, operation: str) -> int:
        """Receive a sender's description of its tensor, answer whether it fits ``tensor``; return the sender."""
        mine = Signature.of(tensor)
        offer = Call(signatures=(mine,)).encode(self._device())
        sender = self._recv(offer, src, g, tag)
        _, offered = Call.decode(offer)
        sent = offered.signatures[0]
        # The flag slot of the answer says "mismatch" to the sender (see Call.encode).
        mismatch = CollectiveMisuseError("mismatch") if sent != mine else None
        self._send(Call(signatures=(mine,), problem=mismatch).encode(self._device()), sender, g, tag)
        if mismatch is not None:
            raise CollectiveMisuseError(
                f"{operation} from rank {sender}: it sends {sent.describe()}, but the receiving tensor has "
                f"{mine.describe()}; nothing was received"
            )
        return sender


def _raise(problem: CollectiveMisuseError | None) -> None:
    if problem is not None:
        raise problem


def _peer_problem(
    operation: str, name: str, peer: object, group: CollectiveGroup, rank: int
) -> CollectiveMisuseError | None:
    problem = root_problem(name, peer, group.ranks, operation)
    if problem is None and as_rank(peer) == rank:
        problem = CollectiveMisuseError(
            f"{operation}: {name}={peer!r} is this rank itself; send/recv need another rank of the group\n"
            "  hint: pass the peer's global rank (a tensor that stays on this rank needs no message)"
        )
    return problem


def _tag_problem(operation: str, tag: object) -> CollectiveMisuseError | None:
    value = as_rank(tag)
    if value is not None and value >= 0:
        return None
    kind = CollectiveMisuseError if value is not None else CollectiveArgumentTypeError
    return kind(
        f"{operation}: tag must be an integer >= 0 (the same on both ends), got {type_name(tag)} {tag!r}\n"
        "  hint: pass the same non-negative int as tag to the sender and the receiver"
    )
