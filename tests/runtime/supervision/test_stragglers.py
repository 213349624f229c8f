"""How stragglers are told from the ranks' records: a rank whose own work per step stays above the
others' median is named once, again when it recovers or gets worse, and noise is not named.

The looks are given their times here (one a second, as the watchdog makes them);
``tests/runtime/launchers/test_straggler_runs.py`` runs the same logic on real processes.
"""

from __future__ import annotations

from collections.abc import Mapping

from runtime._protocol.progress import RankProgress
from runtime._supervision.stragglers import StragglerWatch

HOSTS = {0: "node-a", 1: "node-b", 2: "node-b"}


class _Ranks:
    """Ranks stepping in lock step, each with its own work per step (seconds), looked at once a second."""

    def __init__(self, watch: StragglerWatch) -> None:
        self.watch = watch
        self.now = 0.0
        self.steps = 0
        self.work = dict.fromkeys(HOSTS, 0)

    def run(self, seconds: int, own: Mapping[int, float], steps_per_second: int = 20, **long: int) -> list[str]:
        reports = []
        for _ in range(seconds):
            self.now += 1.0
            self.steps += steps_per_second
            for rank, per_step in own.items():
                self.work[rank] += int(per_step * steps_per_second * 1e9)
            records = {rank: RankProgress(steps=self.steps, work=self.work[rank], long=long.get(f"long{rank}", 0))
                       for rank in own}  # fmt: skip
            reports += self.watch.look(self.now, records)
        return reports


def test_a_rank_doing_4x_the_others_work_is_named_once_with_its_figures_and_host() -> None:
    ranks = _Ranks(StragglerWatch(HOSTS))

    reports = ranks.run(60, {0: 0.010, 1: 0.040, 2: 0.010})

    assert reports == [
        "straggler: rank 1 (host node-b) spends 40 ms per step in its own work (outside collectives), 4.0x the "
        "other ranks' median of 10 ms, over its last 100 steps"
    ]
    figures = ranks.watch.figures()
    assert figures["stragglers"] == [1]
    assert [r["own_work_ms_per_step"] for r in figures["ranks"]] == [10.0, 40.0, 10.0]
    assert ranks.watch.summary() == (
        "straggler(s) rank 1; own work per step (outside collectives): rank 0 10 ms, rank 1 40 ms, rank 2 10 ms"
    )


def test_it_is_named_again_when_it_recovers_and_when_it_gets_markedly_worse() -> None:
    ranks = _Ranks(StragglerWatch(HOSTS))
    assert len(ranks.run(30, {0: 0.010, 1: 0.020})) == 1  # named at 2x

    worse = ranks.run(30, {0: 0.010, 1: 0.040})
    recovered = ranks.run(30, {0: 0.010, 1: 0.010})

    assert [line.split(": rank")[0] for line in worse + recovered] == ["straggler, worse", "straggler recovered"]
    assert "4.0x the other ranks' median" in worse[0]
    assert ranks.watch.figures()["ranks"][1]["worst_ratio"] == 4.0


def test_ranks_alike_or_a_burst_of_a_few_seconds_or_tiny_steps_are_not_named() -> None:
    ranks = _Ranks(StragglerWatch(HOSTS))

    assert ranks.run(30, {0: 0.010, 1: 0.011}) == []  # 1.1x: under the ratio
    assert ranks.run(4, {0: 0.010, 1: 0.030}) == []  # 3x for 4 s: a burst, shorter than the persistence
    assert ranks.run(30, {0: 0.010, 1: 0.010}) == []
    assert ranks.run(30, {0: 0.0010, 1: 0.0025}) == []  # 2.5x, but 1.5 ms per step: under the margin
    assert ranks.watch.figures()["stragglers"] == []


def test_a_finished_rank_or_a_checkpoint_being_saved_is_not_taken_for_a_straggler() -> None:
    ranks = _Ranks(StragglerWatch(HOSTS))
    ranks.run(20, {0: 0.010, 1: 0.010})
    # Rank 1 saves a checkpoint for 10 s (its work clock runs on), then every rank goes on alike.
    assert ranks.run(10, {0: 0.0, 1: 0.5}, steps_per_second=0, long1=1) == []
    assert ranks.run(30, {0: 0.010, 1: 0.010}) == []
    # The ranks end on a burst of 3 s in which rank 1 took 3x as long: their last windows differ (3x),
    # and the looks go on with no new step until the processes exit.
    assert ranks.run(3, {0: 0.010, 1: 0.030}) == []
    last = {rank: RankProgress(steps=ranks.steps, work=ranks.work[rank]) for rank in (0, 1)}
    assert [ranks.watch.look(ranks.now + 1 + t, last) for t in range(20)] == [[]] * 20
