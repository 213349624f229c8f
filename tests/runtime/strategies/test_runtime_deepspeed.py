"""DeepSpeed ZeRO with 2 real gloo processes on CPU: every stage and offload alias trains, checkpoints.

Needs the optional extra (``pip install -e '.[deepspeed]'``); without it this module is skipped
(``.ci/run`` installs it and runs this module in its own phase).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from misuse_workers import at_this_time, deepspeed_misuse, public_methods
from sharded_workers import checkpoint_round_trip, train_and_gather

import resolver
import runtime

deepspeed = pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")

pytestmark = [pytest.mark.deepspeed, pytest.mark.timeout(300)]


def deepspeed_run(strategy: str = "deepspeed", precision: str = "32-true", **options: Any) -> runtime.Strategy:
    """The flags through the real resolver on this machine (CPU, gloo), ranks forked for the test."""
    config = resolver.resolve(strategy=strategy, devices=2, accelerator="cpu", precision=precision)
    assert (config.strategy, config.process_group_backend) == ("deepspeed", "gloo")
    return runtime.build(attrs.evolve(config, launcher="fork"), timeout=240, **options)


@pytest.mark.parametrize(
    ("alias", "zero"),
    [
        ("deepspeed_stage_1", {"stage": 1}),
        ("deepspeed_stage_2", {"stage": 2}),
        ("deepspeed_stage_3", {"stage": 3}),
        ("deepspeed_stage_2_offload", {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": False}}),
        (
            "deepspeed_stage_3_offload",
            {
                "stage": 3,
                "offload_optimizer": {"device": "cpu", "pin_memory": False},
                "offload_param": {"device": "cpu", "pin_memory": False},
            },
        ),
    ],
)
def test_every_zero_stage_trains_and_every_rank_gathers_the_same_parameters(alias: str, zero: dict[str, Any]) -> None:
    strategy = deepspeed_run(alias)
    assert strategy.deepspeed_config["zero_optimization"] == zero  # type: ignore[attr-defined]

    result = strategy.launch(train_and_gather)

    losses = result["losses"]
    assert losses[-1] < 0.1 * losses[0], losses
    assert result["identical"]
    assert result["full_shapes"]["0.weight"] == (32, 8)


def test_bf16_mixed_runs_the_module_in_bfloat16() -> None:
    strategy = deepspeed_run("deepspeed_stage_2", precision="bf16-mixed")
    assert strategy.deepspeed_config["bf16"] == {"enabled": True}  # type: ignore[attr-defined]
    result = strategy.launch(train_and_gather)
    assert result["parameter_dtype"] == "torch.bfloat16"
    assert result["losses"][-1] < 0.2 * result["losses"][0]
    assert result["identical"]


@pytest.mark.parametrize("alias", ["deepspeed_stage_2", "deepspeed_stage_3"])
def test_checkpoints_round_trip_on_two_ranks(tmp_path: Path, alias: str) -> None:
    result = deepspeed_run(alias).launch(checkpoint_round_trip, str(tmp_path / "checkpoint"))

    assert result["weights_restored"] and result["optimizer_restored"] and result["identical"]
    assert result["extras"] == {"step": 5, "note": "saved"}
    assert (tmp_path / "checkpoint" / "latest").is_file()


def test_a_user_config_file_replaces_the_generated_one(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    mine = {
        "zero_optimization": {"stage": 1},
        "train_micro_batch_size_per_gpu": 4,
        "zero_allow_untested_optimizer": True,
    }
    path.write_text(json.dumps(mine))
    strategy = deepspeed_run(deepspeed_config=str(path))
    # as written, but for the one default the runtime adds to any config: no gradient clipping
    assert strategy.deepspeed_config == {**mine, "gradient_clipping": 0.0}  # type: ignore[attr-defined]
    result = strategy.launch(train_and_gather)
    assert result["identical"] and result["losses"][-1] < result["losses"][0]


@pytest.mark.parametrize("alias", ["deepspeed_stage_2", "deepspeed_stage_3"])
def test_setup_module_says_deepspeed_needs_the_optimizer_and_every_misuse_is_refused(alias: str) -> None:
    strategy = deepspeed_run(alias)
    report = strategy.launch(deepspeed_misuse, strategy.config)

    # the DDP habit: DeepSpeed itself would fail later ("zero stage 2 requires an optimizer", or stage 3's
    # "'DeepSpeedZeRoOffload' object has no attribute 'set_gradient_accumulation_boundary'" at the first step)
    setup = report["setup_module"]
    assert setup["raised"] == "StrategyMisuseError", setup
    stage = alias[-1]
    assert setup["message"].startswith(f"strategy.setup_module(): DeepSpeed (ZeRO stage {stage}) wraps the module")
    assert (
        "strategy.setup_module_and_optimizer(model, lambda params: torch.optim.SGD(params, lr=0.01))"
        in (setup["message"])
    )
    own = report["a torch optimizer of one's own"]
    assert own["argument_error"] and "not made by strategy.setup_module_and_optimizer" in own["message"], own
    assert report["the optimizer setup returned"]["raised"] is None

    sweep = report["sweep"]
    assert sweep["wrong_types"] and all(r["argument_error"] for r in sweep["wrong_types"].values()), sweep
    assert all(r["misuse"] for r in sweep["other_strategy"].values()), sweep["other_strategy"]
    after = {k: v for k, v in sweep["after_teardown"].items() if k != "process_dataloader"}
    assert after and all("called after strategy.teardown()" in r["message"] for r in after.values()), after


def test_before_set_up_deepspeeds_methods_say_so() -> None:
    strategy = deepspeed_run("deepspeed_stage_3")
    names = ["setup_module", "setup_module_and_optimizer", "backward", "optimizer_step", "save_checkpoint"]
    assert set(names) <= set(public_methods(type(strategy)))
    report = at_this_time(strategy, names)
    assert all(
        r["misuse"] and "called before the strategy is set up in this process" in r["message"] for r in report.values()
    ), report
