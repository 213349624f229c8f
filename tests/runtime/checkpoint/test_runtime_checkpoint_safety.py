"""Checkpoint writes cannot be redirected by a planted file and never leave half a file (issue 7)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

import runtime


def test_a_symlink_planted_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / ".last.pt.partial").symlink_to(victim)  # the predictable name older versions wrote to

    runtime.TorchCheckpointIO().save({"w": torch.ones(2)}, folder / "last.pt")

    assert victim.read_text() == "precious"
    assert torch.equal(torch.load(folder / "last.pt")["w"], torch.ones(2))
    assert sorted(p.name for p in folder.iterdir()) == [".last.pt.partial", "last.pt"]  # nothing else left


def test_a_failed_write_keeps_the_old_checkpoint_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    io = runtime.TorchCheckpointIO()
    path = tmp_path / "last.pt"
    io.save({"epoch": 1}, path)

    with pytest.raises(Exception):  # noqa: B017 (pickling a lambda fails with an implementation-defined type)
        io.save({"epoch": 2, "bad": lambda: None}, path)

    assert io.load(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_the_written_file_gets_the_mode_a_new_file_gets_under_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        runtime.TorchCheckpointIO().save({"epoch": 1}, tmp_path / "c.pt")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "c.pt").stat().st_mode) == 0o644
