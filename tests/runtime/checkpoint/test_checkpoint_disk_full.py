"""Disk full while saving (issue 37, point 4): every rank raises the same CheckpointNoSpaceError naming
the path, what was half written is removed, the previous checkpoint stays the latest and loads. A real
small file system: a 1 MiB tmpfs mounted for the test (needs root, as CI runs)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from checkpoint_workers import save_on_a_full_disk
from runtime_configs import ddp_config

import resolver
import runtime

pytestmark = pytest.mark.timeout(400)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a real full disk) needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def assert_clean_failure(report: dict, folder: Path) -> None:
    first, *others = report["outcomes"]
    assert first.get("error") == "CheckpointNoSpaceError", first
    assert all(other == first for other in others), report["outcomes"]  # every rank: the same error
    assert first["message"].startswith(f"no space left on the device holding {folder / 'epoch-1'}"), first
    assert report["listing"] == ["epoch-0", "filler"], report["listing"]  # nothing half written is left
    assert report["latest"] == "epoch-0" and report["loaded"] == {"ok": True}, report


def test_ddp_single_file(small_disk: Path) -> None:
    report = runtime.build(ddp_config(2), timeout=240).launch(save_on_a_full_disk, str(small_disk))
    assert_clean_failure(report, small_disk)
    assert "unexpected pos" not in report["outcomes"][0]["message"]


def test_fsdp_sharded(small_disk: Path) -> None:
    strategy = runtime.build(ddp_config(2, strategy="fsdp"), timeout=240, state_dict_type="sharded")
    assert_clean_failure(strategy.launch(save_on_a_full_disk, str(small_disk)), small_disk)


@pytest.mark.deepspeed
def test_deepspeed(small_disk: Path) -> None:
    pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")
    config = resolver.resolve(strategy="deepspeed_stage_2", devices=2, accelerator="cpu")
    strategy = runtime.build(attrs.evolve(config, launcher="fork"), timeout=360)
    assert_clean_failure(strategy.launch(save_on_a_full_disk, str(small_disk)), small_disk)


def test_torch_checkpoint_io_alone(small_disk: Path) -> None:
    import torch
    from checkpoint_workers import _fill

    io = runtime.TorchCheckpointIO()
    io.save({"w": torch.ones(1000)}, small_disk / "old.pt")
    _fill(small_disk / "filler", leave=4096)
    with pytest.raises(runtime.CheckpointNoSpaceError) as full:
        io.save({"w": torch.ones(1000)}, small_disk / "new.pt")
    message = str(full.value)
    assert message.startswith(f"no space left on the device holding {small_disk / 'new.pt'}"), message
    assert "No space left on device" in message and "partial file is removed" in message
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "old.pt"]
    assert torch.equal(io.load(small_disk / "old.pt")["w"], torch.ones(1000))
