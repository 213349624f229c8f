"""A peer that vanished is named from gloo's address; a rank that cannot answer for its stack is named by its silence.

The processes themselves are in ``test_runtime_faults.py`` (SIGSTOP) and
``tests/runtime/collectives/test_two_hosts.py`` (a node killed); these pin how the launcher turns what it
saw into the error, with the gloo messages torch 2.13 prints.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime._protocol.peers import LostPeer, announcement, lost_peer, remember_hosts
from runtime._protocol.rank_files import timeout_error
from runtime._supervision.supervisor import Failure, Outcome
from runtime.errors import PeerLostError, RankFailedError, SilentRank

CLOSED = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
    "peer [10.88.0.2]:38583. This is typically caused by a remote worker crashing."
)
RESET = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[10.88.0.2]:50889: Connection reset by peer. This is typically caused by a remote worker hanging."
)


@pytest.fixture(autouse=True)
def _forget_hosts() -> Iterator[None]:
    yield
    remember_hosts({})  # what this process's ranks announced is the next launch's to set


def _two_nodes() -> None:
    node_1 = '{"host": "node-1", "node": 1, "addresses": ["127.0.0.1", "10.88.0.2"]}'
    remember_hosts({0: announcement(("10.88.0.1",)), 1: announcement(("10.88.0.1",)), 2: node_1, 3: node_1})


def test_gloo_names_the_peer_by_address_and_the_announced_hosts_give_its_ranks() -> None:
    _two_nodes()
    assert lost_peer(CLOSED) == LostPeer(
        "10.88.0.2", 38583, "Connection closed by peer [10.88.0.2]:38583", (2, 3), "node-1", 1
    )
    assert lost_peer(RESET) == LostPeer(
        "10.88.0.2", 50889, "Read error [10.88.0.2]:50889: Connection reset by peer", (2, 3), "node-1", 1
    )
    assert lost_peer("RuntimeError: ValueError: bad batch [10.88.0.2]:1") is None  # not gloo's transport


def test_only_echoes_naming_another_nodes_peer_blame_that_node_not_a_rank_of_this_one() -> None:
    _two_nodes()
    echo = Failure(0, 10.0, 1, CLOSED, "Traceback ...\n" + CLOSED, communication=True, lost_peer=lost_peer(CLOSED))
    error = Outcome([echo], local_ranks=frozenset({0, 1})).problem(None)

    assert isinstance(error, PeerLostError) and isinstance(error, RankFailedError)
    assert (error.ranks, error.rank, error.seen_by, error.traceback_rank) == ((2, 3), 2, 0, 0)
    assert str(error).startswith(
        "a rank on node 1 (host node-1 at 10.88.0.2: ranks 2, 3) went away: rank 0's connection to it ended "
        "(Connection closed by peer [10.88.0.2]:38583), and no rank on this node failed first\n  hint: "
    )
    assert "--- traceback of rank 0 ---" in str(error)


def test_on_one_host_the_peer_is_a_local_rank_and_the_usual_blame_stands() -> None:
    remember_hosts({rank: announcement(("127.0.0.1",)) for rank in (0, 1)})
    closed_here = CLOSED.replace("10.88.0.2", "127.0.0.1")
    echo = Failure(0, 10.0, 1, closed_here, "", communication=True, lost_peer=lost_peer(closed_here))
    error = Outcome([echo], local_ranks=frozenset({0, 1})).problem(None)

    assert type(error) is RankFailedError and str(error).startswith("rank 0 failed (exit code 1)")


def test_a_peer_on_an_unknown_host_is_named_by_its_address() -> None:
    error = PeerLostError((), "10.88.0.9", host=None, node=None, seen_by=1, words="Connection closed", traceback="")
    assert str(error).startswith("a rank on host 10.88.0.9 went away: rank 1's connection to it ended")


def test_the_rank_that_did_not_answer_for_its_stack_is_named_by_elimination() -> None:
    stacks = {0: 'Current thread 0x1 (most recent call first):\n  File "train.py", line 9 in step\n'}
    error = timeout_error((0, 1), 30, stacks, {}, rendezvous=False, silent={1: SilentRank(4242, "T")})

    assert error.ranks == (1,)
    lines = str(error).splitlines()
    assert lines[0] == "rank 1 did not finish within the 30 s launch timeout and was stopped"
    assert lines[1].startswith(
        "  rank 1 (pid 4242) did not answer the request for its Python stack: a signal had frozen it "
        "(state T in /proc/4242/stat: SIGSTOP, or SIGTSTP from Ctrl-Z), which only SIGCONT undoes"
    )
    assert lines[2] == "  rank 0 answered the request for its stack (below): it was running, not frozen"


def test_when_no_rank_answered_every_rank_still_running_is_named() -> None:
    silent = {0: SilentRank(11, "D"), 1: SilentRank(12, "S")}
    error = timeout_error((0, 1), 30, {}, {}, rendezvous=False, silent=silent)

    assert error.ranks == (0, 1)
    assert "rank 0 (pid 11) did not answer the request for its Python stack: it was blocked in the kernel" in str(error)
    assert "rank 1 (pid 12) did not answer the request for its Python stack: it was frozen below Python" in str(error)
