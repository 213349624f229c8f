"""How the progress watchdog judges the ranks' records: the deadline it learns from the step time,
its first-step allowance, progress of any kind, and the collectives it tells apart.

The looks are given their times here; ``tests/runtime/launchers/test_progress_watchdog_runs.py`` runs
the same logic on real processes.
"""

from __future__ import annotations

import pytest

from runtime._protocol.progress import RankProgress
from runtime._supervision.progress_watchdog import ProgressWatch, mismatches, progress_timeout
from runtime.errors import RuntimeConfigError


def _steps(watch: ProgressWatch, start: float, count: int, every: float) -> float:
    """``count`` looks, each after one more step on both ranks, ``every`` seconds apart; the last look's time."""
    now = start
    for step in range(1, count + 1):
        now = start + step * every
        watch.look(now, {0: RankProgress(steps=step), 1: RankProgress(steps=step)})
    return now


def test_with_fast_steps_the_deadline_is_the_floor_the_default_60_s() -> None:
    watch = ProgressWatch(progress_timeout({}))
    now = _steps(watch, 0.0, 30, every=0.5)

    assert watch.deadline() == 60
    assert not watch.stalled(now + 59.9)
    assert watch.stalled(now + 60)


def test_with_slow_steps_the_deadline_is_ten_median_step_times() -> None:
    watch = ProgressWatch(60)
    now = _steps(watch, 0.0, 20, every=9.0)

    assert watch.median_step() == pytest.approx(9.0)
    assert watch.deadline() == pytest.approx(90.0)
    assert not watch.stalled(now + 89)
    assert watch.stalled(now + 90)


def test_nothing_is_judged_before_the_first_step_however_long_it_takes() -> None:
    watch = ProgressWatch(1)
    watch.look(0.0, {0: RankProgress(), 1: RankProgress()})
    watch.look(3600.0, {0: RankProgress(collectives=1, current=1), 1: RankProgress()})  # set-up, compiling

    assert not watch.armed
    assert not watch.stalled(7200.0)


def test_a_collective_begun_or_ended_or_a_rank_finishing_counts_as_progress() -> None:
    watch = ProgressWatch(10)
    now = _steps(watch, 0.0, 5, every=1.0)
    steps = RankProgress(steps=5)
    watch.look(now + 9, {0: RankProgress(5, 1, 1, "barrier"), 1: steps})
    watch.look(now + 18, {0: RankProgress(5, 1, 0, "barrier"), 1: steps})
    watch.look(now + 27, {0: RankProgress(5, 1, 0, "barrier"), 1: steps}, done=[0])

    assert not watch.stalled(now + 36)
    assert watch.stalled(now + 37)


def test_a_rank_saving_or_loading_a_checkpoint_is_not_judged_however_long_it_takes() -> None:
    watch = ProgressWatch(10)
    now = _steps(watch, 0.0, 5, every=1.0)
    watch.look(now + 1, {0: RankProgress(5, 0, 0, "", long=1), 1: RankProgress(steps=5)})

    assert not watch.stalled(now + 3600)
    watch.look(now + 3600, {0: RankProgress(steps=5), 1: RankProgress(steps=5)})  # the save returned
    assert not watch.stalled(now + 3609)
    assert watch.stalled(now + 3610)


def test_progress_timeout_0_turns_the_watchdog_off() -> None:
    watch = ProgressWatch(progress_timeout({"progress_timeout": 0}))
    now = _steps(watch, 0.0, 5, every=1.0)

    assert not watch.stalled(now + 10_000)


def test_a_negative_progress_timeout_says_what_to_give() -> None:
    with pytest.raises(RuntimeConfigError, match="progress_timeout=-1") as error:
        progress_timeout({"progress_timeout": -1})
    assert "or 0 to turn the progress watchdog off" in str(error.value)


def test_ranks_in_different_collectives_or_one_behind_are_told_apart() -> None:
    assert mismatches({0: RankProgress(40, 812, 812, "all_reduce"), 1: RankProgress(40, 812, 812, "all_reduce")}) == []
    assert mismatches({0: RankProgress(40, 812, 812, "all_reduce"), 1: RankProgress(40, 812, 812, "broadcast")}) == [
        "the ranks wait in different collectives: rank 0 in all_reduce #812, rank 1 in broadcast #812"
    ]
    assert mismatches({0: RankProgress(40, 812, 812, "all_reduce"), 1: RankProgress(40, 811, 0, "barrier")}) == [
        "rank 1 is at #811: it ran 1 collective fewer than rank 0, and is outside any collective"
    ]


def test_ranks_in_different_collectives_are_named_with_the_lines_that_called_them() -> None:
    records = {0: RankProgress(40, 812, 812, "all_reduce"), 1: RankProgress(40, 812, 812, "broadcast")}
    called = {0: "all_reduce #812 (called at train.py:40 in step)", 1: "broadcast #812 (called at train.py:55 in step)"}

    assert mismatches(records, called) == [
        "the ranks wait in different collectives: rank 0 in all_reduce #812 (called at train.py:40 in step), "
        "rank 1 in broadcast #812 (called at train.py:55 in step)"
    ]
