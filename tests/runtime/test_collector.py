"""A launch sets its ranks up with Python's garbage collector paused, and runs the user's function
with the collector as the user left it."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_configs import ddp_config

import runtime

pytestmark = pytest.mark.timeout(120)


#: The set-up steps of a rank: resolving the flags, building the strategy, joining the process group.
SET_UP = {"resolve", "build", "setup_environment"}


@pytest.fixture
def collector() -> Iterator[list[str]]:
    """Records each collection that starts, as the set-up steps it started inside (``"collection
    in build"``) or ``"collection"``; puts the collector back after."""
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    events: list[str] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        frame, inside = sys._getframe(1), []
        while frame is not None:
            if frame.f_code.co_name in SET_UP:
                inside.append(frame.f_code.co_name)
            frame = frame.f_back
        events.append(" ".join(["collection", *(f"in {name}" for name in inside)]))

    gc.callbacks.append(record)
    try:
        yield events
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*threshold)
        gc.enable() if enabled else gc.disable()


def _work(events: list[str]) -> bool:
    events.append("work")
    _ = [[] for _ in range(100)]  # with a threshold of 1, these start collections at once
    return gc.isenabled()


def test_no_collection_starts_while_a_launch_sets_up_and_the_function_runs_with_the_collector_on(
    collector: list[str],
) -> None:
    gc.enable()
    gc.set_threshold(1, 1, 1)  # any allocation of a container starts a collection

    enabled_in_work = runtime.launch(lambda strategy: _work(collector), accelerator="cpu", devices=1)

    assert enabled_in_work and gc.isenabled()
    assert [event for event in collector if event.startswith("collection in")] == []
    assert "collection" in collector[collector.index("work") :]


def test_a_collector_the_user_turned_off_stays_off(collector: list[str]) -> None:
    gc.disable()

    enabled_in_work = runtime.launch(lambda strategy: _work(collector), accelerator="cpu", devices=1)

    assert not enabled_in_work and not gc.isenabled()
    assert not any(event.startswith("collection") for event in collector)


@pytest.mark.parametrize("launch", ["runtime.launch", "strategy.launch"])
def test_forked_ranks_run_the_function_with_the_collector_on(launch: str, collector: list[str]) -> None:
    gc.enable()
    work = lambda strategy: (strategy.global_rank, gc.isenabled())  # noqa: E731
    if launch == "runtime.launch":
        result = runtime.launch(work, accelerator="cpu", devices=2, strategy="ddp_fork", timeout=60)
    else:
        result = runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(work)

    assert result == (0, True)
    assert gc.isenabled()


class _Finalized:
    """Garbage with a finalizer: a cycle, so only a collection frees it. Records who finalized it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cycle = self

    def __del__(self) -> None:
        with self.path.open("a") as file:
            file.write(f"{os.getpid()}\n")


def test_forked_ranks_do_not_finalize_the_launching_process_s_garbage(tmp_path: Path, collector: list[str]) -> None:
    finalized = tmp_path / "finalized"
    gc.disable()
    _Finalized(finalized)  # garbage now, collected by nobody yet

    pids = runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(
        lambda strategy: (gc.collect(), strategy.collective.all_gather_object(os.getpid()))[1]
    )

    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert not finalized.exists()  # both ranks collected; neither ran the finalizer
    gc.collect()
    assert finalized.read_text() == f"{os.getpid()}\n"  # it is finalized here, once


def test_objects_the_launching_process_froze_stay_frozen(collector: list[str]) -> None:
    gc.freeze()
    try:
        result = runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(lambda strategy: strategy.world_size)
        assert result == 2 and gc.get_freeze_count() > 0  # not unfrozen by the launch
    finally:
        gc.unfreeze()
