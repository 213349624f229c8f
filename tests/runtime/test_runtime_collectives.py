"""Collectives: every operation, checked against the math, with 2 real processes over gloo."""

from __future__ import annotations

import pytest
import torch
from runtime_configs import ddp_config
from runtime_workers import exercise_collectives

import runtime
from runtime.collectives import REDUCE_OPS, SingleDeviceCollective, TorchCollective


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    """Run every operation once in ranks 0 and 1 (gloo on 127.0.0.1); each rank's results."""
    out = tmp_path_factory.mktemp("collectives")
    runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(exercise_collectives, out)
    return [torch.load(out / f"collectives-{rank}.pt") for rank in (0, 1)]


pytestmark = pytest.mark.timeout(120)


def each(results: list[dict[str, object]], key: str) -> list[object]:
    return [r[key] for r in results]


def test_broadcast_gives_every_rank_the_source_ranks_tensor(results: list[dict[str, object]]) -> None:
    for tensor in each(results, "broadcast"):
        assert torch.equal(tensor, torch.full((3,), 2.0))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "expected"),
    [("sum", [3.0, 30.0]), ("mean", [1.5, 15.0]), ("max", [2.0, 20.0]), ("min", [1.0, 10.0])],
)
def test_all_reduce_of_rank_values(results: list[dict[str, object]], op: str, expected: list[float]) -> None:
    # rank r contributes [r + 1, 10 (r + 1)]
    for tensor in each(results, f"all_reduce_{op}"):
        assert torch.equal(tensor, torch.tensor(expected))  # type: ignore[arg-type]


def test_all_reduce_sums_integers(results: list[dict[str, object]]) -> None:
    assert each(results, "all_reduce_int_sum") == [torch.tensor([3])] * 2


def test_all_gather_orders_tensors_by_rank(results: list[dict[str, object]]) -> None:
    for gathered in each(results, "all_gather"):
        assert [t.tolist() for t in gathered] == [[0.0, 0.0], [1.0, 1.0]]  # type: ignore[attr-defined]


def test_reduce_scatter_gives_each_rank_its_chunk_of_the_reduction(results: list[dict[str, object]]) -> None:
    # rank r contributes arange(4) + 10 r -> the sum is [10, 12, 14, 16]
    assert [t.tolist() for t in each(results, "reduce_scatter_sum")] == [[10.0, 12.0], [14.0, 16.0]]  # type: ignore[attr-defined]
    assert [t.tolist() for t in each(results, "reduce_scatter_mean")] == [[5.0, 6.0], [7.0, 8.0]]  # type: ignore[attr-defined]
    # rank r contributes arange(4) * (r + 1) -> the max is [0, 2, 4, 6]
    assert [t.tolist() for t in each(results, "reduce_scatter_max")] == [[0.0, 2.0], [4.0, 6.0]]  # type: ignore[attr-defined]


def test_broadcast_object_and_all_gather_object(results: list[dict[str, object]]) -> None:
    assert each(results, "broadcast_object") == [{"from": 1, "items": [1, 1]}] * 2
    assert each(results, "all_gather_object") == [[("rank", 0), ("rank", 1)]] * 2


def test_reduce_boolean_decision(results: list[dict[str, object]]) -> None:
    # rank 0 says True, rank 1 says False
    assert each(results, "any_true") == [True, True]
    assert each(results, "all_true") == [False, False]
    assert each(results, "all_agree") == [True, True]
    assert each(results, "none_true") == [False, False]


def test_barrier_waits_for_the_slowest_rank(results: list[dict[str, object]]) -> None:
    rank0_wait, rank1_wait = each(results, "barrier_wait")
    assert rank0_wait >= 0.3 > rank1_wait  # type: ignore[operator]


def test_the_single_device_collective_is_the_identity() -> None:
    collective = SingleDeviceCollective()
    collective.setup(rank=0, world_size=1)
    x = torch.tensor([1.0, 2.0])
    assert collective.broadcast(x) is x
    for op in REDUCE_OPS:
        assert torch.equal(collective.all_reduce(x.clone(), op), x)
    assert collective.all_gather(x) == [x]
    assert collective.reduce_scatter(x) is x
    assert collective.broadcast_object({"a": 1}) == {"a": 1}
    assert collective.all_gather_object(3) == [3]
    assert collective.reduce_boolean_decision(True) and not collective.reduce_boolean_decision(False, all=False)
    collective.barrier()
    collective.teardown()
    assert not collective.is_initialized


def test_the_single_device_collective_holds_one_process() -> None:
    with pytest.raises(ValueError, match="rank 1 of 2.*'torch' collective"):
        SingleDeviceCollective().setup(rank=1, world_size=2)


def test_reduce_ops_are_checked() -> None:
    collective = SingleDeviceCollective()
    with pytest.raises(ValueError, match="unknown reduce op 'avg'; use one of sum, mean, max, min"):
        collective.all_reduce(torch.ones(1), "avg")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'mean' needs a floating-point tensor"):
        collective.all_reduce(torch.ones(1, dtype=torch.int64), "mean")


def test_the_torch_collective_says_when_it_is_not_set_up() -> None:
    with pytest.raises(RuntimeError, match="not set up.*strategy.launch"):
        TorchCollective().all_reduce(torch.ones(1))
