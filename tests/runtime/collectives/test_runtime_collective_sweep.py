"""Every public method of Collective, misused: wrong types and wrong ranks (in the contract suite,
``tests/contract/cases_arguments.py``), and here the wrong time (before set-up, after teardown);
then ``monitored_barrier`` naming (and the launcher blaming) the ranks that did not arrive."""

from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "contract"))

from cases_arguments import SWEEP  # noqa: E402

import runtime  # noqa: E402
from runtime._protocol.ports import find_free_port  # noqa: E402
from runtime.collectives import (  # noqa: E402
    BarrierTimeoutError,
    Collective,
    CollectiveMisuseError,
    CollectiveNotSetUpError,
    SingleDeviceCollective,
    TorchCollective,
)
from runtime.collectives.rendezvous import Rendezvous

pytestmark = pytest.mark.timeout(150)

#: Public methods that are not operations: joining and leaving the group, and a question about the engine.
NOT_OPERATIONS = {
    "setup": "joins the group (its own errors say why)",
    "teardown": "a no-op when not set up",
    "lacks_point_to_point": "reads unsupported_operations; needs no group",
}


def public_methods() -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(Collective)
        if not name.startswith("_") and inspect.isfunction(member)
    }


def test_the_sweep_covers_every_public_method() -> None:
    missing = public_methods() - set(SWEEP) - set(NOT_OPERATIONS)
    assert not missing, f"add these methods (with their argument checks) to cases_arguments.SWEEP: {sorted(missing)}"
    assert not set(SWEEP) - public_methods(), "SWEEP names a method Collective does not have"


def _assert_every_method_says_it_is_not_set_up(collective: Collective) -> None:
    for name, sweep in SWEEP.items():
        with pytest.raises(CollectiveNotSetUpError, match=rf"^{name}: the {collective.name} collective is not set up"):
            sweep.call(collective)
        # and a wrong type does not hide that: the state is what to fix first
        with pytest.raises(CollectiveNotSetUpError, match=rf"^{name}: .*not set up.*\n  hint: .*setup"):
            sweep.wrong_types[0].call(collective)


def test_every_method_before_setup_names_itself_and_the_fix() -> None:
    assert issubclass(CollectiveNotSetUpError, RuntimeError) and issubclass(CollectiveNotSetUpError, ValueError)
    _assert_every_method_says_it_is_not_set_up(SingleDeviceCollective())
    _assert_every_method_says_it_is_not_set_up(TorchCollective())


def test_every_method_after_teardown_names_itself_and_the_fix() -> None:
    single = SingleDeviceCollective()
    single.setup(Rendezvous(rank=0, world_size=1))
    single.teardown()
    _assert_every_method_says_it_is_not_set_up(single)
    torch_collective = TorchCollective()  # a real gloo group of one process, then left
    torch_collective.setup(Rendezvous(rank=0, world_size=1, backend="gloo", master_port=find_free_port(), timeout=30))
    assert float(torch_collective.all_reduce(torch.ones(1))) == 1.0
    torch_collective.teardown()
    _assert_every_method_says_it_is_not_set_up(torch_collective)


# -- monitored_barrier ----------------------------------------------------------------------------


def late_rank_misses_the_barrier(strategy: runtime.Strategy, report: str) -> None:
    """Rank 2 arrives 4 s late; ranks 0 and 1 wait at most 1 s. Each writes what it saw."""
    rank = strategy.global_rank
    if rank == 2:
        time.sleep(4)
    try:
        strategy.collective.monitored_barrier(timeout=1.0, wait_all_ranks=True)
        outcome = "passed"
    except (BarrierTimeoutError, CollectiveMisuseError, RuntimeError) as exc:
        outcome = f"{type(exc).__name__}: {exc} missing={getattr(exc, 'missing', None)}"
    Path(report, f"rank{rank}.txt").write_text(outcome)


def test_monitored_barrier_names_the_ranks_that_did_not_arrive(tmp_path: Path) -> None:
    runtime.launch(late_rank_misses_the_barrier, str(tmp_path), accelerator="cpu", devices=3, strategy="ddp_fork",
                   timeout=60)  # fmt: skip
    first = (tmp_path / "rank0.txt").read_text()
    assert first.startswith("BarrierTimeoutError: monitored_barrier: rank 0 waited 1 s for rank(s) 2, which did not"), (
        first
    )
    assert first.endswith("missing=(2,)")
    for rank in (1, 2):  # they reached the barrier, but rank 0 (which collects the arrivals) never confirmed
        seen = (tmp_path / f"rank{rank}.txt").read_text()
        assert seen.startswith(
            f"BarrierTimeoutError: monitored_barrier: rank {rank} arrived, but rank 0 (which collects the arrivals) "
            "did not confirm within 1 s"
        ), seen
        assert seen.endswith("missing=()")


def hung_rank_is_blamed(strategy: runtime.Strategy) -> None:
    """Rank 1 hangs before the barrier; rank 0 gives up after 1 s and lets the error end the run."""
    if strategy.global_rank == 1:
        time.sleep(120)
    strategy.collective.monitored_barrier(timeout=1.0)


def test_the_launcher_blames_the_rank_that_never_arrived_with_its_stack() -> None:
    started = time.monotonic()
    with pytest.raises((runtime.LaunchTimeoutError, runtime.RankFailedError)) as failed:
        runtime.launch(hung_rank_is_blamed, accelerator="cpu", devices=2, strategy="ddp_fork", timeout=60)
    message = str(failed.value)
    assert "rank 1" in message and "hung_rank_is_blamed" in message, message  # rank 1 and where it was
    assert time.monotonic() - started < 45  # not the launch's whole timeout
