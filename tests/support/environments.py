"""The environments some tests need and the main one may lack: a live SLURM, Horovod, torch_xla.

Registered for the whole run by the top-level ``conftest.py``, so it serves a test wherever it lives.
A test bound to such an environment carries its marker (``cluster``, ``xla``, ``horovod``,
``deepspeed``, ``gpu``; registered in ``pyproject.toml``) in its own module, and CI's phases select
by marker (``.ci/run``, ``.ci/deepspeed``). A docs page is marked by the blocks it skips where an
engine is missing (``<!-- skip: next if(missing("horovod"), ...) -->``): it runs whole, so the whole
page belongs to that engine's phase too. What a test needs set up, it asks for by fixture name:

- ``slurm_cluster``: a real one-machine SLURM cluster (munged, slurmctld, slurmd) started once for
  the session by ``scripts/test-cluster.sh start`` (which installs the Debian packages it lacks),
  its folder and every daemon gone after the session. Where it cannot run here (not root, no
  apt-get) the test is skipped with the reason, unless ``RESOLVER_REQUIRE_CLUSTER=1`` (CI's main
  phase): then it fails. Each job shape's time to the first training step is printed at the end.
- ``horovod_ranks`` (a module's ``usefixtures``): skipped without Horovod, unless
  ``RESOLVER_REQUIRE_HOROVOD=1`` (CI's Horovod phase): then it fails; no rank variables from
  outside; ``PYTHONPATH`` names the project root and the contract cases, since Horovod's runner
  starts fresh interpreters that unpickle the work functions by module name.
- ``xla_cpu`` (a module's ``usefixtures``): XLA:CPU with one device, no rank variables from outside;
  and ``in_fresh_process``, which runs a function in a new process with its own XLA runtime: a
  process can start torch_xla's replicas only while its own XLA runtime has not started, so the
  pytest process never touches an XLA device.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import multiprocessing
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.slurm_jobs import FIGURES, PREEMPTION_FIGURES, REQUIRED, Cluster, start_cluster, stop_cluster

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "tests" / "contract"  # collective_cases, which the contract's ranks import
RUNTIME_TESTS = ROOT / "tests" / "runtime"  # misuse_workers: the strategy misuse sweep

#: The engine a docs page's conditional skip names (``missing("...")``) -> the marker of its phase.
PAGE_ENGINES = {"horovod": "horovod", "deepspeed": "deepspeed", "torch_xla": "xla"}
_MISSING = re.compile(r"""if\(missing\(["'](\w+)["']\)""")

HOROVOD_INSTALLED = importlib.util.find_spec("horovod") is not None
HOROVOD_REQUIRED = os.environ.get("RESOLVER_REQUIRE_HOROVOD") == "1"
HOROVOD_MISSING = "horovod is not installed; build it for this torch with scripts/build-horovod.sh (CI always does)"
HOROVOD_VARIABLES = (
    "RESOLVER_CONFIG",
    "RUNTIME_REPORT_DIR",
    "RUNTIME_LAUNCHER_PID",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
XLA_VARIABLES = ("RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
CHILD_TIMEOUT = 240


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A docs page with a block that needs an engine belongs to that engine's phase, as a whole."""
    engines: dict[Path, list[str]] = {}
    for item in items:
        path = Path(item.path)
        if path.suffix != ".md":
            continue
        if path not in engines:
            named = _MISSING.findall(path.read_text(encoding="utf-8"))
            engines[path] = sorted({PAGE_ENGINES[name] for name in named if name in PAGE_ENGINES})
        for marker in engines[path]:
            item.add_marker(marker)


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


@pytest.fixture
def horovod_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Horovod installed (else skipped, or failed under RESOLVER_REQUIRE_HOROVOD=1), a clean rank environment."""
    if not HOROVOD_INSTALLED:
        if HOROVOD_REQUIRED:
            pytest.fail(f"RESOLVER_REQUIRE_HOROVOD=1 but {HOROVOD_MISSING}")
        pytest.skip(HOROVOD_MISSING)
    for name in list(os.environ):
        if name.startswith("HOROVOD_") or name in HOROVOD_VARIABLES:
            monkeypatch.delenv(name)
    inherited = filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(CONTRACT), str(RUNTIME_TESTS), *inherited]))


@pytest.fixture
def xla_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA:CPU with one device unless a test asks for more; no rank variables from outside."""
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.delenv("CPU_NUM_DEVICES", raising=False)
    for name in XLA_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def in_fresh_process() -> Callable[..., Any]:
    """Run a module-level function in a new process (its own XLA runtime) and return its result."""

    def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            return pool.submit(fn, *args, **kwargs).result(timeout=CHILD_TIMEOUT)

    return run


@pytest.fixture
def hosts() -> Iterator[Any]:
    """Two hosts made of network namespaces (tests.support.two_hosts_support), removed afterwards."""
    from tests.support.two_hosts_support import TwoHosts

    made = TwoHosts.create()
    yield made
    made.remove()
    assert made.namespaces_left() == []


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
