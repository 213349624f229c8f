"""The ranks' store address, agreed in every round of torch's c10d rendezvous, not only a node's first.

torch's ``DynamicRendezvousHandler`` (2.13), sharing its store with the ranks, writes the address of the
ranks' store (``MASTER_ADDR``/``MASTER_PORT`` under the round's keys) only in the first round a node
takes part in, and reuses what it read then afterwards. A node joining a running job later
(``--nnodes MIN:MAX``) then waits for an address the round's rank 0, in its second round, never writes,
and the nodes hang until the store's timeout; and a node that was node 0 and is not any more keeps
its own old address. :class:`RoundStoreAddress` wraps the handler: after each round, node 0 writes the
address it uses and every other node reads it, so every node of every round agrees.
"""

from __future__ import annotations

from torch.distributed import Store
from torch.distributed.elastic.rendezvous.api import RendezvousHandler, RendezvousInfo, RendezvousStoreInfo

__all__ = ["RoundStoreAddress"]


class RoundStoreAddress(RendezvousHandler):
    """``handler``, with the ranks' store address written by node 0 and read by the others in every round."""

    def __init__(self, handler: RendezvousHandler) -> None:
        self.handler = handler

    def next_rendezvous(self) -> RendezvousInfo:
        info = self.handler.next_rendezvous()
        if not self.handler.use_agent_store:
            return info  # torch's handler picks and writes a new address each round then
        mine = info.bootstrap_store_info
        server = getattr(self.handler, "_shared_tcp_store_server", None)  # the store this node hosts, if any
        node = getattr(getattr(self.handler, "_this_node", None), "addr", None)
        if info.rank == 0 and server is not None and node is not None:
            mine = RendezvousStoreInfo(node, server.port)  # what it read as another node's, before, is stale
        if mine is None:
            return info
        address = _agree(info.store, info.rank, mine)
        return RendezvousInfo(info.store, info.rank, info.world_size, address)

    @property
    def use_agent_store(self) -> bool:
        return self.handler.use_agent_store

    def get_backend(self) -> str:
        return self.handler.get_backend()

    def is_closed(self) -> bool:
        return self.handler.is_closed()

    def set_closed(self) -> None:
        self.handler.set_closed()

    def num_nodes_waiting(self) -> int:
        return self.handler.num_nodes_waiting()

    def get_run_id(self) -> str:
        return self.handler.get_run_id()

    def shutdown(self) -> bool:
        return self.handler.shutdown()


def _agree(store: Store, rank: int, mine: RendezvousStoreInfo) -> RendezvousStoreInfo:
    """Node 0's address of the ranks' store, written by node 0 (again: it wrote the same in its first round)."""
    addr_key, port_key = RendezvousStoreInfo.MASTER_ADDR_KEY, RendezvousStoreInfo.MASTER_PORT_KEY
    if rank == 0:
        store.set(addr_key, mine.master_addr)
        store.set(port_key, str(mine.master_port))
        return mine
    return RendezvousStoreInfo(store.get(addr_key).decode(), int(store.get(port_key).decode()))
