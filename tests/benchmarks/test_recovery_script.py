"""The recovery benchmark script still runs (issue 38): its quickest run of ``resolver run``'s headline case
(a node lost for good under ``--nnodes 1:2``) on network-namespace hosts prints its figure or why there is
none. The rank-death cases share its harness, and their behaviour is tested in
``tests/runtime/supervision/test_two_hosts_restarts.py``. No timing claim: the figures are the script's to
print (``python tests/benchmarks/recovery.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from script_process import run_script

from tests.support.two_hosts_support import REQUIRE_VARIABLE, missing_prerequisite

pytest.importorskip("torch")

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(200)]

SCRIPT = Path(__file__).with_name("recovery.py")
CASES = ("node-loss",)


def test_the_node_loss_case_prints_its_figure_or_why_there_is_none():
    why_not = missing_prerequisite()
    if why_not is not None:
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1 but {why_not}")
        pytest.skip(f"two hosts as network namespaces: {why_not}")
    done = run_script(SCRIPT, "--launcher", "resolver", "--quick", "--cases", *CASES, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr  # not 0 too when a namespace is left behind
    for case in CASES:
        lines = [line for line in done.stdout.splitlines() if line.startswith(f"CASE {case}: ")]
        assert len(lines) == 1, done.stdout + done.stderr
        figure = lines[0].removeprefix(f"CASE {case}: ")
        # A figure ("median 3.21 s over 1 of 1 runs ...") or a reason that says what happened.
        assert figure.startswith("median ") or (figure.startswith("no figure: ") and len(figure) > 40), lines[0]
