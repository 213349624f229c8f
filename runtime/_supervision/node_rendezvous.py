"""Nodes that restart together: each node's launcher is a member of torch's elastic rendezvous.

The membership is torchrun's own engine: the c10d ``DynamicRendezvousHandler`` (its key-value store
at the endpoint, hosted by the node the endpoint names) forms each round's nodes and their order, and
torch's agent (:class:`~torch.distributed.elastic.agent.server.api.SimpleElasticAgent`, subclassed
here for its rendezvous step and its exit barrier only) assigns the global ranks and hands out the
address and port of the ranks' store, as torchrun's agent does. So a node started with
``torchrun --rdzv-backend c10d`` and one started with ``resolver run`` at the same endpoint and run id
form one job. The ranks themselves are started and watched by this project's supervision.

What this module adds to torch's engine:

- no hand settings on hosts without DNS names: the store host is the node holding the endpoint's
  address among its own interface addresses (torch resolves this host's name, which fails there), and
  the address this node advertises is the one the kernel sends from towards the endpoint (torch
  advertises the host's name otherwise);
- one restart count for every rank of a round: torchrun counts each node's own failures, so a node
  whose ranks were stopped because another node's failed keeps its count while the failed node's
  grows (and the ranks' store keys, prefixed with the count, then differ). Here the first node of each
  round to ask takes the next number from a counter in the rendezvous store;
- one end for every node: a failure that must not restart writes its reason to the store and closes
  the rendezvous; every other node stops its ranks and reports that same reason;
- with a range of nodes (``--nnodes MIN:MAX``), quick rounds without hand settings
  (:data:`ELASTIC_DEFAULTS`), each round's nodes by address (:attr:`NodeRound.nodes`), failures counted
  apart from the rounds a node joining caused (:meth:`NodeRendezvous.failures`), and a join timeout that
  names the nodes that came and those of the last round that did not;
- a node of the round dropped by the rendezvous (its keep-alive lapsed), or the store's host lost, named
  (:mod:`runtime._supervision.node_faults`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from torch.distributed.elastic.agent.server.api import RunResult, SimpleElasticAgent, WorkerGroup, WorkerSpec
from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousParameters, RendezvousTimeoutError
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

from runtime._gloo_interface import host_addresses
from runtime._supervision.node_address import address_towards, endpoint_address
from runtime._supervision.node_conf import check_rendezvous_conf, is_host_setting
from runtime._supervision.node_faults import (
    RendezvousStoreLostError,
    dropped_nodes,
    missing_nodes,
    node_label,
    store_lost,
)
from runtime._supervision.round_store_address import RoundStoreAddress
from runtime.errors import RuntimeConfigError

if TYPE_CHECKING:
    from torch.distributed import Store

__all__ = ["ELASTIC_DEFAULTS", "NodeRendezvous", "NodeRound"]

#: torch's c10d rendezvous settings for a range of nodes, unless ``--rdzv-conf`` gives them. torch's own
#: (30 s last call, a node dead after 3 keep-alives 5 s apart) make a node's loss cost 45 s; these ~6 s:
#: a node is dead after 4 missed keep-alives 1 s apart (its ranks' peers fail at once on the closed
#: sockets, the rendezvous needs the keep-alive to drop it), and a round with at least the least number
#: of nodes waits 2 s more for others. A torchrun node joining such a job needs the same (--rdzv-conf),
#: else its 5 s keep-alive reads as dead here.
ELASTIC_DEFAULTS = {"last_call_timeout": "2", "keep_alive_interval": "1", "keep_alive_max_attempt": "4"}
#: How long the store's host waits for the other nodes to have read the end (or finished) before it leaves.
_LINGER = 10.0
_QUIET = ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "torch.distributed.elastic.agent.server.api")


@attrs.frozen
class NodeRound:
    """One round of the rendezvous as this node takes part in it."""

    #: The ranks' ``TORCHELASTIC_RESTART_COUNT``: 0 for the first round, the same on every node.
    restart_count: int
    node_rank: int
    num_nodes: int
    #: Where every rank of the round meets (``MASTER_ADDR``/``MASTER_PORT``, torch's agent store).
    master_addr: str
    master_port: int
    #: This node's ranks, local rank by local rank.
    global_ranks: tuple[int, ...]
    world_size: int
    #: Whether the ranks use the store torch's agent hosts (``TORCHELASTIC_USE_AGENT_STORE``).
    agent_store: bool
    #: Each node's advertised address, by node rank (empty where torch's state could not be read).
    nodes: tuple[str, ...] = ()
    #: The least and most nodes of a round (``--nnodes MIN:MAX``), and the rendezvous endpoint.
    node_range: tuple[int, int] = (1, 1)
    endpoint: str = ""

    def explanation(self) -> str:
        """Which round, which nodes, and why this world size: one line for the ranks' config."""
        least, most = self.node_range
        where = ", ".join(f"node {rank} {address}" for rank, address in enumerate(self.nodes)) or "not known"
        counted = f"{self.num_nodes} node(s) (--nnodes {least}:{most})" if least < most else f"{self.num_nodes} node(s)"
        per_node = len(self.global_ranks)
        return (f"round {self.restart_count} of the c10d rendezvous at {self.endpoint}: {counted} came ({where}); "
                f"world size {self.world_size} = {self.num_nodes} node(s) x {per_node} rank(s) per node")  # fmt: skip


class _RoundAgent(SimpleElasticAgent):
    """torch's agent for its rendezvous step (node rank, global ranks, the ranks' store) and its exit
    barrier; this project's supervision starts and watches the ranks, so the process methods are unused."""

    def join_round(self) -> WorkerGroup:
        self._rendezvous(self._worker_group)
        return self._worker_group

    def exit_barrier(self) -> None:
        self._exit_barrier()  # type: ignore[no-untyped-call]

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        raise NotImplementedError("resolver run starts the ranks itself")

    def _stop_workers(self, worker_group: WorkerGroup) -> None:
        raise NotImplementedError("resolver run stops the ranks itself")

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        raise NotImplementedError("resolver run watches the ranks itself")

    def _shutdown(self, death_sig: Any = None, timeout: int = 30) -> None:
        raise NotImplementedError("resolver run stops the ranks itself")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch's agent and rendezvous log each step at INFO and a store gone at exit as WARNING: the
    launcher reports what matters itself."""
    loggers = [logging.getLogger(name) for name in _QUIET]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class NodeRendezvous:
    """This node's membership of the c10d rendezvous at ``host:port`` for the run ``run_id`` (see the
    module docstring). ``source`` names where the endpoint came from, for errors."""

    def __init__(
        self,
        host: str,
        port: int,
        run_id: str,
        *,
        nodes: tuple[int, int],
        local_world_size: int,
        max_restarts: int,
        role: str,
        join_timeout: float,
        conf: Mapping[str, str],
        source: str,
    ) -> None:
        target = endpoint_address(host, source)
        self.local_address = address_towards(target, source)
        check_rendezvous_conf(conf)
        given = conf.get("is_host")
        # The node whose own address the endpoint is hosts the store (never this host's name resolved).
        self.is_host = target in host_addresses() or ipaddress.ip_address(target).is_loopback
        if given is not None:
            self.is_host = is_host_setting(given)
        quick = ELASTIC_DEFAULTS if nodes[0] < nodes[1] else {}
        settings: dict[str, Any] = {"join_timeout": str(max(1, round(join_timeout))), **quick, **conf,
                                    "is_host": self.is_host}  # fmt: skip
        self._nodes = nodes
        self._join_timeout = join_timeout
        self.run_id = run_id
        self.endpoint = f"{host}:{port}"
        params = RendezvousParameters("c10d", self.endpoint, run_id, nodes[0], nodes[1], self.local_address,
                                      **settings)  # fmt: skip
        try:
            with _quiet():
                try:
                    backend, self._store = create_backend(params)
                except Exception:
                    if given is not None or not self.is_host:
                        raise
                    # Another node on this same host holds the store already (nodes tried out on one machine),
                    # as torch's own guess allows: join it.
                    self.is_host = False
                    params.config["is_host"] = False
                    backend, self._store = create_backend(params)
                self._handler = create_handler(self._store, backend, params)
        except Exception as exc:  # torch's RendezvousConnectionError, ValueError for a bad setting
            doing = "host" if self.is_host else "reach"
            raise RuntimeConfigError(
                f"this node ({socket.gethostname()}, {self.local_address}) could not {doing} the rendezvous store at "
                f"{self.endpoint} ({source}): {exc}",
                hint="on the node the endpoint names, make sure the port is free; on the others, that the endpoint's "
                "node is started and reachable; check --rdzv-conf",
            ) from None
        spec = WorkerSpec(
            role=role,
            local_world_size=local_world_size,
            rdzv_handler=RoundStoreAddress(self._handler),
            entrypoint="resolver run",
            max_restarts=max_restarts,
            local_addr=self.local_address,
        )
        self._agent = _RoundAgent(spec, exit_barrier_timeout=join_timeout)
        self._keys = f"resolver.{run_id}."
        self._num_nodes = nodes[1]
        self._target = target
        self._per_node = local_world_size
        self._round: NodeRound | None = None
        #: Set once the store stopped answering: leaving then talks to it no more (it would wait for it).
        self.lost = False
        #: Each node's host name by its advertised address, as the nodes wrote them before joining.
        self.names: dict[str, str] = {self.local_address: socket.gethostname()}
        with self._talking():
            self._store.set(f"{self._keys}host.{self.local_address}", socket.gethostname())

    def next_round(self) -> NodeRound:
        """Join the next round (wait until every node has); raises torch's ``RendezvousClosedError`` once a
        node ended the run, ``RendezvousTimeoutError`` when the nodes did not come within the join timeout."""
        with _quiet():
            try:
                group = self._agent.join_round()
            except RendezvousTimeoutError:
                self._num_nodes = 1  # no round formed: no other node to wait for when leaving
                raise RendezvousTimeoutError(self._timed_out()) from None
        store = group.store
        assert store is not None
        if store.add(f"{self._keys}counted", 1) == 1:  # the round's first node to ask numbers it
            store.set(f"{self._keys}restart_count", str(self._store.add(f"{self._keys}rounds", 1) - 1))
        count = int(store.get(f"{self._keys}restart_count"))
        self._num_nodes = group.group_world_size
        self._round = NodeRound(
            restart_count=count,
            node_rank=group.group_rank,
            num_nodes=group.group_world_size,
            master_addr=str(group.master_addr),
            master_port=int(group.master_port or 0),
            global_ranks=tuple(worker.global_rank for worker in group.workers),
            world_size=group.workers[0].world_size,
            agent_store=self._handler.use_agent_store,
            nodes=self._participants(),
            node_range=self._nodes,
            endpoint=self.endpoint,
        )
        with self._talking():
            for address in self._round.nodes:
                key = f"{self._keys}host.{address}"
                if address not in self.names and self._store.check([key]):
                    self.names[address] = self._store.get(key).decode()
        return self._round

    @contextlib.contextmanager
    def _talking(self) -> Iterator[None]:
        """Around a call to the rendezvous store: its failure (the store's host gone) as
        :class:`RendezvousStoreLostError`, which names that host and says what to do."""
        with _quiet():
            try:
                yield
            except (RendezvousClosedError, RendezvousTimeoutError, RendezvousStoreLostError):
                raise
            except Exception as exc:  # noqa: BLE001 - torch's DistStoreError, RendezvousConnectionError, ...
                self.lost = True
                raise RendezvousStoreLostError(self.store_lost(exc)) from None

    def silence_limit(self) -> float:
        """Seconds without an answer from the store after which it counts as lost: as long as the store takes
        to drop a node that stopped answering it (keep-alive interval x attempts)."""
        settings = self._handler.settings
        return settings.keep_alive_interval.total_seconds() * settings.keep_alive_max_attempt

    def store_lost(self, problem: object) -> str:
        """The reason to end with once the store stopped answering (see :func:`store_lost`)."""
        nodes = self._round.nodes if self._round is not None else ()
        if self._target in nodes:
            host = node_label(nodes.index(self._target), self._target, self.names, self._per_node)
        else:
            host = f"the node at {self._target}"
        return store_lost(self.endpoint, host, problem)

    @property
    def store(self) -> Store:
        """The rendezvous store (every node reaches it), for keys of this run under :attr:`keys`."""
        return self._store

    @property
    def keys(self) -> str:
        return self._keys

    def _state(self) -> Any:
        # torch's rendezvous state (participants, wait list) is private: read it, never rely on it.
        return getattr(getattr(self._handler, "_state_holder", None), "state", None)

    def _participants(self) -> tuple[str, ...]:
        """The round's nodes' advertised addresses, by node rank."""
        participants = getattr(self._state(), "participants", None) or {}
        return tuple(str(getattr(node, "addr", node)) for node, _ in sorted(participants.items(), key=lambda i: i[1]))

    def _timed_out(self) -> str:
        """Fewer nodes than the least came within the join timeout: which came, how many are missing."""
        state = self._state()
        # A complete round's participants are the last round's nodes not yet gone: the wait list asks for the next.
        joining = () if getattr(state, "complete", False) else getattr(state, "participants", {})
        came = {str(getattr(node, "addr", node)) for node in (*joining, *getattr(state, "wait_list", ()))}
        came.add(self.local_address)
        least = self._nodes[0]
        last = self._round.nodes if self._round is not None else ()
        return (f"fewer than {least} node(s) joined within the join timeout ({self._join_timeout:.0f} s): "
                f"came {len(came)} ({', '.join(sorted(came))}), missing at least {max(1, least - len(came))} (nodes "
                "that never reached the endpoint are not known by name)"
                f"{missing_nodes(last, sorted(came), self.names, self._per_node)}")  # fmt: skip

    def failures(self, current: NodeRound) -> int:
        """How many rounds failed, this one included (the same number on every node that asks about it): the
        restarts used. Rounds that only took in a node are not counted (as torchrun counts them)."""
        key = f"{self._keys}failed.{current.restart_count}"
        with self._talking():
            if self._store.add(key, 1) == 1:
                self._store.set(f"{key}.number", str(self._store.add(f"{self._keys}failures", 1)))
            return int(self._store.get(f"{key}.number"))

    def others_waiting(self) -> bool:
        """Whether another node waits for a new round (its ranks failed, or it joined)."""
        with self._talking():
            return self._handler.num_nodes_waiting() > 0

    @property
    def elastic(self) -> bool:
        """Whether the number of nodes is a range (``--nnodes MIN:MAX``)."""
        return self._nodes[0] < self._nodes[1]

    def dropped(self) -> list[str]:
        """The nodes of this round the rendezvous dropped (their keep-alive lapsed: killed, their host down
        or their link cut), each named, as read by the last :meth:`others_waiting`: the ranks here may be
        blocked on them until their collective timeout."""
        participants = getattr(self._state(), "participants", None)
        if participants is None or self._round is None or len(participants) >= self._num_nodes:
            return []
        present = [str(getattr(node, "addr", node)) for node in participants]
        return dropped_nodes(self._round.nodes, present, self.names, self._per_node) or ["a node"]

    def ended(self) -> str | None:
        """The reason a node ended the run, once one did (or torchrun's agent closed the rendezvous)."""
        with self._talking():
            if not self._handler.is_closed():
                return None
        return self.reason()

    def reason(self) -> str:
        key = f"{self._keys}end"
        with self._talking():
            if self._store.check([key]):
                return self._store.get(key).decode()
        return f"a node closed the rendezvous at {self.endpoint} (a torchrun agent that ended, or ran out of restarts)"

    def end(self, reason: str) -> str:
        """End the run on every node with ``reason`` (the first reason written wins); return that reason."""
        key = f"{self._keys}end"
        with self._talking():
            written = self._store.compare_set(key, "", reason).decode()
            self._handler.set_closed()
        return written or reason

    def wait_for_end(self, seconds: float) -> str | None:
        """The reason another node ends the run with, if one does within ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            reason = self.ended()
            if reason is not None:
                return reason
            time.sleep(0.1)
        return None

    def finish(self) -> None:
        """After this node's ranks succeeded: torch's exit barrier (until every node's ranks are done)."""
        with _quiet():
            self._agent.exit_barrier()

    def leave(self) -> None:
        """Stop taking part; the store's host first waits (a little) until the other nodes have left."""
        if self.lost:
            return
        with _quiet():
            try:
                left = self._store.add(f"{self._keys}left", 1)
                if self.is_host:
                    deadline = time.monotonic() + _LINGER
                    while left < self._num_nodes and time.monotonic() < deadline:
                        time.sleep(0.05)
                        left = self._store.add(f"{self._keys}left", 0)
            except Exception:  # noqa: BLE001 - the store's host has gone already: nothing to wait for
                pass
            with contextlib.suppress(Exception):  # the same: nothing to say goodbye to
                self._handler.shutdown()
