"""A DeepSpeed ZeRO checkpoint resumed on another number of ranks: refused with the checkpoint, both
numbers and the conversion to run, before DeepSpeed's own load fails without saying so; converted as
the error says, it loads on the new number of ranks with its weights.

Real DeepSpeed on the CPU (gloo); needs the optional extra, so CI's deepspeed phase runs it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from resume_workers import save_then_load, train

import resolver
import runtime

pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")

pytestmark = [pytest.mark.deepspeed, pytest.mark.timeout(400)]


def deepspeed(alias: str, devices: int, **options: Any) -> runtime.Strategy:
    config = resolver.resolve(strategy=alias, devices=devices, accelerator="cpu")
    return runtime.build(attrs.evolve(config, launcher="fork"), timeout=240, **options)


def test_a_zero_3_checkpoint_of_2_ranks_on_3_is_refused_naming_it_both_world_sizes_and_the_conversion(
    tmp_path: Path,
) -> None:
    deepspeed("deepspeed_stage_3", 2).launch(train, str(tmp_path), samples=36, until=12, save_every_step=False)
    checkpoint = tmp_path / "at-0012"

    with pytest.raises(runtime.RankFailedError) as refused:  # every rank raises it; the launcher reports the first
        deepspeed("deepspeed_stage_3", 3).launch(save_then_load, {"c": str(checkpoint)})

    message = str(refused.value)
    # the rank's error as the command line renders it: "error: ...", its fix on the next line as "= help:"
    assert ": error: the DeepSpeed checkpoint at" in message.splitlines()[0], message
    assert message.splitlines()[1].startswith("  = help: run on 2 ranks, or convert it once"), message
    assert f"the DeepSpeed checkpoint at {checkpoint} was saved by 2 ranks and this run has 3" in message
    assert (
        "python -m deepspeed.checkpoint.ds_to_universal --inject_missing_state "
        f"--input_folder {checkpoint}/global_step3 --output_folder {checkpoint}-universal/global_step3"
    ) in message


def test_a_zero_2_checkpoint_of_2_ranks_converted_as_the_error_says_loads_on_3_with_its_weights(
    tmp_path: Path,
) -> None:
    saved = deepspeed("deepspeed_stage_2", 2).launch(
        train, str(tmp_path), samples=36, until=12, save_every_step=False, adam=True
    )
    checkpoint = tmp_path / "at-0012"
    with pytest.raises(runtime.RankFailedError, match="saved by 2 ranks and this run has 3") as refused:
        deepspeed("deepspeed_stage_2", 3).launch(save_then_load, {"c": str(checkpoint)}, adam=True)

    command = shlex.split(str(refused.value).split(": python ", 1)[1].split("; then", 1)[0])  # -m deepspeed...
    converted = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=240)
    assert converted.returncode == 0, converted.stderr
    universal = deepspeed("deepspeed_stage_2", 3, extra_config={"checkpoint": {"load_universal": True}})
    loaded = universal.launch(save_then_load, {"c": f"{checkpoint}-universal"}, adam=True)["c"]

    assert loaded["consumed"] == 12
    assert all(torch.equal(loaded["weights"][k], saved["final"][k]) for k in saved["final"])
