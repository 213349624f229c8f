"""``resolver run --nnodes MIN:MAX`` when fewer than MIN nodes come within the join timeout: the run ends
with the nodes that came and how many are missing, before any rank starts (one host, loopback endpoint)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime._protocol.ports import find_free_port

pytestmark = pytest.mark.timeout(120)


def test_fewer_nodes_than_the_least_within_the_join_timeout_names_those_that_came(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import runtime\nruntime.launch(lambda strategy: print('TRAINED'))\n")
    endpoint = f"127.0.0.1:{find_free_port()}"
    env = {**os.environ, "RUNTIME_RENDEZVOUS_TIMEOUT": "4"}
    command = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--nproc-per-node", "1",
               "--nnodes", "2:3", "--rdzv-endpoint", endpoint, str(script)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TRAINED" not in done.stdout
    ended = (f"resolver run: the run ended on every node: the rendezvous at {endpoint} failed: fewer than 2 node(s) "
             "joined within the join timeout (4 s): came 1 (127.0.0.1), missing at least 1")  # fmt: skip
    assert ended in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
