"""End to end: ``examples/train.py`` trains with real processes and every launcher."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime._protocol.ports import find_free_port

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"

pytestmark = pytest.mark.timeout(180)


def clean_environment(**extra: str) -> dict[str, str]:
    drop = {"RESOLVER_CONFIG", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def train_command(*flags: str) -> list[str]:
    return [sys.executable, str(TRAIN), "--epochs", "3", "--timeout", "120", *flags]


def result_of(output: str) -> dict[str, object]:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, output
    return json.loads(lines[0][len("RESULT ") :])


def assert_trained_in_sync(result: dict[str, object], world_size: int, fall: float = 0.5) -> None:
    assert result["world_size"] == world_size
    assert result["final_loss"] < fall * result["initial_loss"]  # type: ignore[operator]
    checksums = result["checksums"]
    assert len(checksums) == world_size and len(set(checksums)) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("strategy", "precision", "launcher"),
    [("ddp", "32-true", "subprocess"), ("ddp_spawn", "32-true", "spawn"), ("ddp_fork", "bf16-mixed", "fork")],
)
def test_two_devices_train_to_identical_parameters(strategy: str, precision: str, launcher: str) -> None:
    done = subprocess.run(
        train_command("--devices", "2", "--strategy", strategy, "--precision", precision),
        capture_output=True,
        text=True,
        timeout=150,
        env=clean_environment(),
    )

    assert done.returncode == 0, done.stdout + done.stderr
    result = result_of(done.stdout)
    assert (result["strategy"], result["launcher"], result["precision"]) == ("ddp", launcher, precision)
    assert_trained_in_sync(result, world_size=2)
    assert "epoch 3/3 loss" in done.stdout


@pytest.mark.parametrize(
    ("strategy", "fall"),
    [
        ("fsdp", 0.5),
        # as fast as the others: the runtime turns off DeepSpeed's default clipping (gradient_clipping 1.0)
        pytest.param("deepspeed", 0.5, marks=[pytest.mark.deepspeed, pytest.mark.skipif(
            importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is an optional extra (.ci/deepspeed)"
        )]),
    ],
)  # fmt: skip
def test_sharding_strategies_train_to_the_same_full_parameters_and_rank_0_alone_prints(
    strategy: str, fall: float
) -> None:
    done = subprocess.run(train_command("--devices", "2", "--strategy", strategy), capture_output=True, text=True,
                          timeout=170, env=clean_environment())  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    result = result_of(done.stdout)
    assert (result["strategy"], result["launcher"]) == (strategy, "subprocess")
    assert_trained_in_sync(result, world_size=2, fall=fall)
    assert [line.split(" loss")[0] for line in done.stdout.splitlines() if " loss " in line] == [
        "initial", "epoch 1/3", "epoch 2/3", "epoch 3/3"
    ]  # once each: rank 0 prints, the other rank does not  # fmt: skip


def test_two_nodes_on_loopback_train_as_four_ranks() -> None:
    port = str(find_free_port())
    nodes = [
        subprocess.Popen(
            train_command("--devices", "2", "--num-nodes", "2", "--strategy", "ddp"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_environment(NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
        )
        for node in (0, 1)
    ]
    try:
        outputs = [node.communicate(timeout=150) for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], "".join(out + err for out, err in outputs)
    assert_trained_in_sync(result_of(outputs[0][0]), world_size=4)
    assert "RESULT" not in outputs[1][0]  # only global rank 0 reports


def test_under_torchrun_the_script_runs_as_the_rank_torchrun_started() -> None:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(find_free_port()),
        *train_command("--devices", "2", "--strategy", "ddp")[1:],
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=150, env=clean_environment())

    assert done.returncode == 0, done.stdout + done.stderr
    result = result_of(done.stdout)
    assert result["launcher"] is None  # torchrun started the processes; nothing was launched again
    assert_trained_in_sync(result, world_size=2)
