"""What a node of a multi-node run says when another node stops answering, or the rendezvous store's host does.

A node is named by its node rank in the round, its host name (each node writes it to the rendezvous
store before it joins, so every node knows the others' names, also after one is gone) and its advertised
address, with the global ranks it held: ``node 1 (node-1 at 10.88.0.2: rank 1)``.

torch's c10d rendezvous keeps its state in one key-value store, hosted by the node the endpoint names;
no other node can take it over. When that node is lost, every other node's launcher ends with
:class:`RendezvousStoreLostError`, which says so and what to do, instead of waiting on a store that is gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["RendezvousStoreLostError", "dropped_nodes", "missing_nodes", "node_label", "store_lost"]


class RendezvousStoreLostError(RuntimeError):
    """The rendezvous store stopped answering: its host (the endpoint's node) is lost, and the run with it."""


def node_label(rank: int, address: str, names: Mapping[str, str], per_node: int) -> str:
    """``node 1 (node-1 at 10.88.0.2: rank 1)``: ``rank`` the node rank, ``per_node`` its number of ranks."""
    name = names.get(address)
    where = f"{name} at {address}" if name else address
    ranks = ", ".join(str(rank * per_node + local) for local in range(per_node))
    return f"node {rank} ({where}: {'rank' if per_node == 1 else 'ranks'} {ranks})"


def dropped_nodes(nodes: Sequence[str], present: Sequence[str], names: Mapping[str, str], per_node: int) -> list[str]:
    """The nodes of a round (``nodes``, addresses by node rank) no longer among ``present``, each labelled."""
    return [node_label(rank, address, names, per_node) for rank, address in enumerate(nodes) if address not in present]


def missing_nodes(nodes: Sequence[str], came: Sequence[str], names: Mapping[str, str], per_node: int) -> str:
    """``; missing from the last round: node 1 (...)``, or nothing when every node of the last round came."""
    missing = dropped_nodes(nodes, came, names, per_node)
    return f"; missing from the last round: {', '.join(missing)}" if missing else ""


def store_lost(endpoint: str, host: str, problem: object) -> str:
    """Why the run cannot go on once the store's host (``host``: its label) stopped answering, and what to do."""
    return (
        f"the rendezvous store at {endpoint}, hosted by {host}, stopped answering ({problem}): that node, or this "
        "node's link to it, is lost. torch's c10d rendezvous cannot move its store to another node, so no node can "
        "go on without it; start the run again on every node (the checkpoint resumes it), with --rdzv-endpoint on a "
        "node that is up"
    )
