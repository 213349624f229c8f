"""How two nodes' launchers share their ranks' progress through a store, and the diagnosis a node makes from
it: the rank outside any collective named with its node and host, where the other waits, a node whose key
stopped changing named as silent. One in-process store stands for the rendezvous store; the exchanges are
stepped by hand (``tests/runtime/supervision/test_two_hosts_progress.py`` runs them on two hosts)."""

from __future__ import annotations

import time

import pytest
import torch.distributed as dist

from runtime._protocol.progress import RankProgress
from runtime._supervision import progress_exchange
from runtime._supervision.progress_exchange import ProgressExchange
from runtime._supervision.progress_watchdog import Stall

ADDRESSES = ("10.0.0.1", "10.0.0.2")
WAITING = RankProgress(steps=21, collectives=22, current=22, operation="all_reduce")
OUTSIDE = RankProgress(steps=21, collectives=21)


def _nodes() -> tuple[ProgressExchange, ProgressExchange]:
    store = dist.HashStore()
    first = ProgressExchange(store, "run.progress.0.", 0, "gpu-a", ADDRESSES)
    second = ProgressExchange(store, "run.progress.0.", 1, "gpu-b", ADDRESSES)
    return first, second


def _stall(first: ProgressExchange) -> Stall:
    others, _ = first.records()
    return Stall(3.0, 3.0, None, {0: WAITING, **others}, first.view())


def test_each_node_reads_the_other_nodes_ranks() -> None:
    first, second = _nodes()
    first.share({0: WAITING}, ())
    second.share({1: OUTSIDE}, ())
    first.exchange()
    second.exchange()
    first.exchange()

    assert first.records() == ({1: OUTSIDE}, frozenset())
    assert second.records() == ({0: WAITING}, frozenset())


def test_the_rank_stuck_on_another_node_is_named_with_its_host_and_where_this_one_waits() -> None:
    first, second = _nodes()
    first.share({0: WAITING}, ())
    second.share({1: OUTSIDE}, ())
    second.publish_where({})  # node 1 took its rank's stack: it waits in no collective
    second.exchange()
    first.exchange()
    stall = _stall(first)
    assert stall.nodes is not None
    stall.nodes.stacks_taken({}, stall.progress)

    error = stall.nodes.error(stall, (0,), {}, waiting={0: "all_reduce() (called at train.py:8 in work)"}, silent={})

    assert error.ranks == (1,)
    assert str(error).startswith("rank 1 on node 1 (gpu-b) made no progress for 3 s (the progress deadline")
    assert "rank 0 was waiting for it in all_reduce #22 (called at train.py:8 in work) on node 0 (gpu-a)" in str(error)
    assert "rank 1 on node 1 (gpu-b) is outside any collective (step 21, after collective #21)" in str(error)
    assert "rank 1 is at #21: it ran 1 collective fewer than rank 0" in error.summary()


def test_a_node_whose_key_stopped_changing_is_named_silent_with_where_its_ranks_were_last_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress_exchange, "SILENT_AFTER", 0.2)
    first, second = _nodes()
    first.share({0: WAITING}, ())
    second.share({1: RankProgress(steps=21, collectives=22, current=22, operation="all_reduce")}, ())
    second.exchange()
    first.exchange()
    time.sleep(0.3)  # node 1 writes no more (its link cut)
    first.exchange()
    stall = _stall(first)
    assert stall.nodes is not None
    stall.nodes.stacks_taken({}, stall.progress)  # no wait for a silent node

    error = stall.nodes.error(stall, (0,), {}, waiting={0: "all_reduce() (called at train.py:8 in work)"}, silent={})

    assert error.ranks == (1,)
    assert str(error).startswith("rank 1 on node 1 (gpu-b) made no progress for 3 s")
    assert (
        "node 1 (gpu-b, 10.0.0.2) is silent: its progress entry stopped changing 0 s ago (its link cut, its host "
        "down or its launcher stopped); last seen: rank 1 in all_reduce #22 (step 21)"
    ) in str(error)
