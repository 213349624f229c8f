"""A peer that went away is not a misuse: each rank started on its own (as srun and torchrun start
them, no runtime launcher to blame anyone), rank 1 killed mid-training makes rank 0 say that rank 1
stopped answering, short; rank 1 returning without calling backward is still the misuse it is. The
two are told apart by what rank 1 recorded in the rendezvous store when its work returned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime._protocol.ports import find_free_port

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "peer_gone.py"

pytestmark = pytest.mark.timeout(200)


def ranks_started_on_their_own(mode: str) -> list[subprocess.CompletedProcess[str]]:
    """Both ranks of ``peer_gone.py MODE``, each its own process with torchrun's variables, no launcher."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RESOLVER_", "TORCHELASTIC_", "MASTER_"))}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(find_free_port()), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                GROUP_RANK="0", TORCHELASTIC_RUN_ID="peer-gone", PYTHONPATH=os.pathsep.join(
                    [str(SCRIPT.parents[3]), base.get("PYTHONPATH", "")]))  # fmt: skip
    processes = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), mode],
            env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    done = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=150)
            done.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


def test_a_peer_killed_mid_training_stopped_answering_it_made_no_misuse() -> None:
    rank_0, rank_1 = ranks_started_on_their_own("sigkill")

    assert rank_1.returncode == -9
    assert rank_0.returncode == 1
    # torch prefixes a rank's uncaught error with "[rank0]: " under torchrun's variables
    error = [line.removeprefix("[rank0]: ") for line in rank_0.stderr.rstrip().splitlines()]
    assert "StrategyMisuseError" not in rank_0.stderr and "every rank must call it" not in rank_0.stderr
    assert error[-2].startswith("runtime.errors.PeerStoppedAnsweringError: rank 1 (host ")
    assert "stopped answering: rank 0 waited for it in strategy.backward() and the connection ended (" in error[-2]
    assert error[-1] == (
        "  hint: its own output says why: killed (kill -9, the out-of-memory killer), or its host went down"
    )
    # gloo's own traceback is not chained under it: its words are in the message
    assert "The above exception was the direct cause" not in rank_0.stderr, rank_0.stderr
    # and the runtime's frames between the user's call and the error are left out: 45 lines before
    assert 'peer_gone.py", line 28, in train' in rank_0.stderr and "_raise_if_a_peer_did_not_come" not in rank_0.stderr
    assert len(error) <= 16, rank_0.stderr


def test_when_the_killed_peer_hosted_the_store_it_still_stopped_answering() -> None:
    rank_0, rank_1 = ranks_started_on_their_own("sigkill@0")

    assert rank_0.returncode == -9
    error = [line.removeprefix("[rank1]: ") for line in rank_1.stderr.rstrip().splitlines()]
    assert "StrategyMisuseError" not in rank_1.stderr, rank_1.stderr
    assert error[-2].startswith("runtime.errors.PeerStoppedAnsweringError: rank 0 (host "), rank_1.stderr
    assert "(the rendezvous store is gone too, so whether it finished cannot be read" in error[-2]
    assert error[-1].startswith("  hint: its own output says why: killed (kill -9, the out-of-memory killer)")
    assert error[-1].endswith("it returned without calling strategy.backward(): call it on every rank")


def test_a_peer_that_returned_without_calling_backward_is_still_the_misuse() -> None:
    rank_0, rank_1 = ranks_started_on_their_own("skip")

    assert rank_1.returncode == 0
    assert rank_0.returncode == 1
    assert (
        "runtime.errors.StrategyMisuseError: strategy.backward(): every rank must call it, and rank 1 never did ("
        in (rank_0.stderr)
    )
    assert "hint: call strategy.backward() on every rank, not under `if strategy.is_global_zero:`" in rank_0.stderr
    assert "stopped answering" not in rank_0.stderr


def test_under_runtime_launch_the_launcher_still_blames_the_killed_rank() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESOLVER_", "TORCHELASTIC_", "MASTER_"))}
    env.pop("RANK", None)
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPT.parents[3]), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "sigkill"], capture_output=True, text=True, timeout=150, env=env
    )

    assert done.returncode == 1
    assert done.stderr.rstrip().splitlines()[-2:] == [
        "[rank0]: runtime.errors.RankFailedError: rank 1 failed (exit code -9): killed by signal 9",
        "[rank0]:   it was killed by signal 9 before it could report an error",
    ], done.stderr
