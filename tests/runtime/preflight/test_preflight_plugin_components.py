"""``resolver check`` runs a user's own accelerator and collective (registered with
``runtime.register_accelerator`` / ``runtime.register_collective``): it asks them for the device and
joins through them, as training does, instead of skipping a collective it does not know by name or
placing the check's tensors on a device of its own choosing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from preflight_support import check_environment

from runtime._protocol.ports import find_free_port

WORKER = Path(__file__).with_name("plugin_components_rank.py")


def _two_ranks(folder: Path) -> list[dict]:
    """Start two ranks of the check as torchrun would (its variables), each with the plugin's classes."""
    port = find_free_port()
    common = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                  TORCHELASTIC_RUN_ID="plugin-check", GROUP_RANK="0")  # fmt: skip
    ranks = []
    for rank in (0, 1):
        env = check_environment(**common, RANK=str(rank), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
        out = folder / f"rank-{rank}.json"
        process = subprocess.Popen([sys.executable, str(WORKER), str(out)], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)  # fmt: skip
        ranks.append((process, out))
    results = []
    try:
        for process, out in ranks:
            output, _ = process.communicate(timeout=240)
            assert process.returncode == 0, output
            results.append(json.loads(out.read_text(encoding="utf-8")))
    finally:
        for process, _ in ranks:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return results


def test_the_check_runs_every_step_through_a_plugin_accelerator_and_collective(tmp_path: Path) -> None:
    rank0, rank1 = _two_ranks(tmp_path)
    statuses = {name: status for name, status, _ in rank0["checks"]}
    assert statuses == dict.fromkeys(
        ("rendezvous", "agreement", "barrier", "all_reduce", "broadcast", "all_gather", "ring", "speed", "engine"), "ok"
    ), rank0["checks"]
    for rank in (rank0, rank1):
        calls = rank["calls"]
        # the device the accelerator gives is selected by the accelerator, before the collective joins
        assert calls[0] == "accelerator.set_device:cpu"
        # the collective joins once, through the check's store (no second rendezvous), and runs the steps
        assert calls.count("collective.setup:store=True") == 1 and "collective.setup:store=False" not in calls
        for operation in ("barrier", "all_reduce", "broadcast", "all_gather"):
            assert f"collective.{operation}" in calls
        # and leaves at the end, with the device released
        assert calls[-2:] == ["collective.teardown", "accelerator.teardown"]
