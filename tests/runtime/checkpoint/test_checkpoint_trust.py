"""No checkpoint runs code: every file a loader reads is loaded the safe way or refused, naming the file
and the opt-in (issue 37, point 1). A payload is planted in each kind of file; the marker it would
create never appears; genuine checkpoints of every kind still load by default (2 real ranks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from checkpoint_workers import Payload, planted_loads
from runtime_configs import ddp_config, single_device_config

import resolver
import runtime

OPT_IN = "runtime.TorchCheckpointIO(weights_only=False)"


def assert_refused(result: dict[str, Any], part: str) -> None:
    assert result.get("error") == "CheckpointUntrustedError", result
    message = result["message"]
    assert part in message and OPT_IN in message, message
    assert "reference to exec" in message or "builtins.exec" in message, message
    assert "weights_only` set to `False`" not in message  # torch's own advice is not passed on


def test_a_single_file_checkpoint_with_a_payload_is_refused_and_trusted_only_on_opt_in(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    planted = tmp_path / "last.pt"
    torch.save({"model": Payload(str(marker)), "step": 1}, planted)
    strategy = runtime.build(single_device_config())
    strategy.setup_environment()
    try:  # torn down at the end: a strategy left set up makes this process a rank for the tests after it
        with pytest.raises(runtime.CheckpointUntrustedError) as refused:
            strategy.load_checkpoint(planted)
        assert not marker.exists()
        assert str(planted) in str(refused.value) and OPT_IN in str(refused.value)

        strategy.checkpoint_io = runtime.TorchCheckpointIO(weights_only=False)  # the opt-in: the user trusts it
        strategy.load_checkpoint(planted)
        assert marker.exists()
    finally:
        strategy.teardown()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["full", "sharded"])
def test_fsdp_checkpoints_load_and_a_payload_in_any_file_is_refused(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "marker"
    strategy = runtime.build(ddp_config(2, strategy="fsdp"), timeout=240, state_dict_type=kind)
    report = strategy.launch(planted_loads, str(tmp_path), str(marker), "fsdp")

    assert report.pop("genuine") == {"ok": True}
    assert not report.pop("marker") and not marker.exists()
    parts = {"single file": "planted.pt", "entries.pt": "entries.pt", ".metadata": ".metadata", "byte item": ".distcp"}
    assert set(report) == ({"single file"} if kind == "full" else {"entries.pt", ".metadata", "byte item"})
    for name, result in report.items():
        assert_refused(result, parts[name])


deepspeed_stages = pytest.mark.parametrize("alias", ["deepspeed_stage_2", "deepspeed_stage_3"])


@pytest.mark.deepspeed
@pytest.mark.timeout(400)
@deepspeed_stages
def test_deepspeed_checkpoints_load_and_a_payload_in_its_states_is_refused(tmp_path: Path, alias: str) -> None:
    pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")
    marker = tmp_path / "marker"
    config = resolver.resolve(strategy=alias, devices=2, accelerator="cpu")
    strategy = runtime.build(attrs.evolve(config, launcher="fork"), timeout=360)
    report = strategy.launch(planted_loads, str(tmp_path), str(marker), "deepspeed")

    assert report.pop("genuine") == {"ok": True}
    assert not report.pop("marker") and not marker.exists()
    assert set(report) == {"model states", "optimizer states"}
    assert_refused(report["model states"], "model_states.pt")
    assert_refused(report["optimizer states"], "optim_states.pt")
