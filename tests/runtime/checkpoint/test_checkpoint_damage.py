"""A damaged newest checkpoint is skipped, said so on stderr, and loading it names the file and the part
(issue 37, point 3): the campaign's cases, with 2 real ranks per kind of checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from checkpoint_workers import damaged_cases
from runtime_configs import ddp_config

import resolver
import runtime
from runtime.checkpoint import directory_problem, latest_checkpoint, mark_complete

SINGLE_FILE = [("truncated", ""), ("empty", ""), ("random bytes", "")]


def assert_skipped_and_named(report: dict[str, Any], cases: list[tuple[str, str]], part_names: dict[str, str]) -> None:
    assert set(report) == {f"{how} {part}" for how, part in cases}
    for (how, part), result in zip(cases, report.values(), strict=True):
        name = part_names.get(part, "epoch-1")
        error = result["load damaged"]
        assert error.get("error") == "CheckpointDamagedError", (how, part, error)
        message = error["message"]
        assert "epoch-1" in message and name in message, message
        assert "weights_only" not in message, message  # never torch's advice to load unsafely
        if part.startswith("legacy:"):
            assert result["latest"] == "epoch-1"  # an older version's mark lists no files: only loading tells
            continue
        assert result["load latest"] == {"ok": True}, result
        assert result["latest"] == "epoch-0", (how, part, result)
        assert "latest_checkpoint: skipped" in result["printed"] and "epoch-1" in result["printed"], result
        assert name in result["printed"], result


@pytest.mark.timeout(300)
def test_ddp_single_file_checkpoints(tmp_path: Path) -> None:
    report = runtime.build(ddp_config(2), timeout=240).launch(damaged_cases, str(tmp_path), SINGLE_FILE)
    assert_skipped_and_named(report, SINGLE_FILE, {})
    assert "it is empty (0 bytes)" in report["empty "]["load damaged"]["message"]
    assert "is cut short" in report["truncated "]["load damaged"]["message"]
    assert "not a torch checkpoint" in report["random bytes "]["load damaged"]["message"]


SHARDED = [
    ("missing", "__1_0.distcp"),
    ("truncated", "__1_0.distcp"),
    ("empty", "entries.pt"),
    ("random bytes", ".metadata"),
    ("truncated", "legacy:__1_0.distcp"),
]


@pytest.mark.timeout(300)
def test_fsdp_sharded_checkpoints(tmp_path: Path) -> None:
    strategy = runtime.build(ddp_config(2, strategy="fsdp"), timeout=240, state_dict_type="sharded")
    report = strategy.launch(damaged_cases, str(tmp_path), SHARDED)
    names = {part: part.removeprefix("legacy:") for _, part in SHARDED}
    assert_skipped_and_named(report, SHARDED, names)


DEEPSPEED = [("missing", "*/zero_pp_rank_1_*optim_states.pt"), ("truncated", "*/*model_states.pt")]


@pytest.mark.deepspeed
@pytest.mark.timeout(400)
def test_deepspeed_checkpoints(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")
    config = resolver.resolve(strategy="deepspeed_stage_2", devices=2, accelerator="cpu")
    strategy = runtime.build(attrs.evolve(config, launcher="fork"), timeout=360)
    report = strategy.launch(damaged_cases, str(tmp_path), DEEPSPEED)
    names = {DEEPSPEED[0][1]: "zero_pp_rank_1_mp_rank_00_optim_states.pt", DEEPSPEED[1][1]: "model_states.pt"}
    assert_skipped_and_named(report, DEEPSPEED, names)


def test_a_directory_lists_its_files_and_a_changed_byte_of_200_mib_is_found(tmp_path: Path) -> None:
    directory = tmp_path / "big"
    directory.mkdir()
    for index in range(4):
        # Plain bytes (what is checked is the files, whatever wrote them): a large torch operation here
        # would start OpenMP's threads in this process, and a rank a later test forks from it would hang.
        (directory / f"part-{index}.pt").write_bytes(bytes(50 * 2**20))  # 4 x 50 MiB
    started = time.perf_counter()
    mark_complete(directory)
    marked = time.perf_counter() - started
    started = time.perf_counter()
    assert directory_problem(directory) is None
    assert latest_checkpoint(tmp_path) == directory
    verified = time.perf_counter() - started
    print(f"200 MiB directory: marked (CRC-32 of every file) in {marked:.2f} s, verified in {verified:.2f} s")

    with open(directory / "part-2.pt", "r+b") as handle:
        handle.seek(30 * 2**20)
        handle.write(b"\x01")  # one byte of a tensor: same size, another checksum
    assert directory_problem(directory) == (
        "part-2.pt",
        "fails its CRC-32 check: its bytes changed after it was written",
    )
