"""Checkpoints: rank 0 writes, every rank reads, nobody reads a half-written file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from runtime_configs import ddp_config
from runtime_workers import checkpoint_round_trip

import runtime


@pytest.mark.timeout(120)
def test_two_ranks_round_trip_a_model_and_optimizer_through_rank_0s_file(tmp_path: Path) -> None:
    path = tmp_path / "ckpt" / "last.pt"
    verdicts = runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(checkpoint_round_trip, str(path))
    assert verdicts == [True, True]
    saved = torch.load(path)
    assert set(saved) == {"model", "optimizer", "step"}
    assert set(saved["model"]) == {"weight", "bias"}  # unwrapped from DistributedDataParallel


def test_torch_checkpoint_io_writes_atomically_and_loads_safely(tmp_path: Path) -> None:
    io = runtime.TorchCheckpointIO()
    path = tmp_path / "deep" / "dir" / "c.pt"
    io.save({"w": torch.ones(2), "epoch": 3}, path)
    assert [p.name for p in path.parent.iterdir()] == ["c.pt"]  # no partial file left
    loaded = io.load(path)
    assert loaded["epoch"] == 3 and torch.equal(loaded["w"], torch.ones(2))
    io.remove(path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        io.load(path)


def test_loading_a_missing_entry_names_what_the_file_has(tmp_path: Path) -> None:
    from runtime_configs import single_device_config

    strategy = runtime.build(single_device_config())
    strategy.setup_environment()
    strategy.save_checkpoint(tmp_path / "c.pt", {"model": torch.nn.Linear(1, 1)})
    with pytest.raises(KeyError, match="no entry 'optimizer'.*'model'"):
        strategy.load_checkpoint(tmp_path / "c.pt", {"optimizer": torch.optim.SGD([torch.zeros(1)], lr=1)})
