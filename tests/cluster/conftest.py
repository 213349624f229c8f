"""A real one-machine SLURM cluster (munged, slurmctld, slurmd), started once for these tests.

``scripts/test-cluster.sh start`` installs the Debian packages it lacks and starts the daemons with
their files in a temporary folder; the folder and every daemon are gone after the session. Where
the cluster cannot run here (not root, no apt-get) the tests that need it are skipped with the
reason, unless ``RESOLVER_REQUIRE_CLUSTER=1`` (set by CI's cluster phase in ``.ci/run``): then they
fail. Each job shape's time from submission to the first training step is printed at the end.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from slurm_jobs import FIGURES, PREEMPTION_FIGURES, REQUIRED, Cluster, start_cluster, stop_cluster  # noqa: E402


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    """The session's cluster, started on first use and stopped (nothing left behind) at the end."""
    cluster, why = start_cluster()
    if cluster is None:
        if REQUIRED:
            pytest.fail(f"RESOLVER_REQUIRE_CLUSTER=1 but {why}")
        pytest.skip(why)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if PREEMPTION_FIGURES:
        terminalreporter.section("SLURM: pre-emption and requeue (seconds)")
        for what, seconds in PREEMPTION_FIGURES:
            terminalreporter.write_line(f"{what:<52} {seconds:7.2f} s")
    if not FIGURES:
        return
    terminalreporter.section("SLURM: seconds from submitting the job to each step (slowest rank)")
    for shape, entry, started, first_step in FIGURES:
        terminalreporter.write_line(
            f"{shape:<32} {entry:<15} process start {started:6.1f} s   first training step {first_step:6.1f} s"
        )
