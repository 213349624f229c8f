"""Operations on picklable Python objects: broadcast, all-gather, gather and scatter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from runtime.collectives.arguments import as_rank, root_problem, type_name
from runtime.collectives.checks import Call
from runtime.collectives.core import CollectiveCore, CollectiveGroup, first, noted
from runtime.collectives.errors import CollectiveArgumentTypeError, CollectiveMisuseError

__all__ = ["ObjectOperations"]

T = TypeVar("T")


class ObjectOperations(CollectiveCore):
    """Object operations; the objects are pickled, so every rank must be able to unpickle them."""

    @noted
    def broadcast_object(self, obj: T, src: int = 0, group: CollectiveGroup | None = None) -> T:
        """Rank ``src``'s picklable ``obj``, on every rank of the group."""
        g = self._group("broadcast_object", group)
        self._agree("broadcast_object", g, _rooted(root_problem("src", src, g.ranks, "broadcast_object"), src))
        return self._broadcast_object(obj, int(src), g)

    @noted
    def all_gather_object(self, obj: Any, group: CollectiveGroup | None = None) -> list[Any]:
        """Every rank's picklable ``obj``, ordered by rank."""
        return self._all_gather_object(obj, self._group("all_gather_object", group))

    @noted
    def gather_object(self, obj: Any, dst: int = 0, group: CollectiveGroup | None = None) -> list[Any] | None:
        """On rank ``dst``, every rank's picklable ``obj`` ordered by rank; ``None`` on the other ranks."""
        g = self._group("gather_object", group)
        self._agree("gather_object", g, _rooted(root_problem("dst", dst, g.ranks, "gather_object"), dst))
        return self._gather_object(obj, int(dst), g)

    @noted
    def scatter_object_list(
        self, objects: Sequence[Any] | None, src: int = 0, group: CollectiveGroup | None = None
    ) -> Any:
        """Rank ``i`` of the group gets ``objects[i]`` from rank ``src`` (only ``src`` passes the list,
        one picklable object per rank of the group; the others pass ``None``); returns this rank's object."""
        g = self._group("scatter_object_list", group)
        problem = root_problem("src", src, g.ranks, "scatter_object_list")
        if problem is None and as_rank(src) == self._rank:
            if isinstance(objects, (str, bytes)) or not isinstance(objects, Sequence):
                problem = CollectiveArgumentTypeError(
                    f"scatter_object_list: the source rank passes objects, a list with one object per rank of "
                    f"the group ({g.size}), got {type_name(objects)}",
                    hint="pass [object for rank 0, object for rank 1, ...] on the source rank and None on the others",
                )
            elif len(objects) != g.size:
                problem = CollectiveMisuseError(
                    f"scatter_object_list: the source rank passes one object per rank of the group ({g.size}) "
                    f"as objects, got {len(objects)}"
                )
        elif problem is None and objects is not None:
            problem = CollectiveMisuseError(
                f"scatter_object_list: only the source rank (src={src}) passes objects; rank {self._rank} "
                f"passed {type_name(objects)} (pass None on the other ranks)"
            )
        self._agree("scatter_object_list", g, _rooted(problem, src))
        return self._scatter_object(None if objects is None else list(objects), int(src), g)


def _rooted(problem: CollectiveMisuseError | None, root: object) -> Call:
    value = as_rank(root)
    return Call(root=value if value is not None and value >= 0 else -1, problem=first(problem))
