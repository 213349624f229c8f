"""What every test gets: no colour forced by the runner, no site rules of whoever runs them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The tests compare the commands' plain text: a CI runner's FORCE_COLOR must not colour what they run.
os.environ.pop("FORCE_COLOR", None)


@pytest.fixture(autouse=True)
def _no_site_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The site rules of whoever runs the tests (RESOLVER_RULES) are not the table under test."""
    monkeypatch.delenv("RESOLVER_RULES", raising=False)


#: The folders whose every test needs an environment the main one may lack, and the marker (registered in
#: pyproject.toml) each of their tests gets. They stay folders of their own because their conftest.py sets
#: that environment up (the SLURM cluster, Horovod's PYTHONPATH, XLA's children) and CI's phases name them.
ENVIRONMENT_FOLDERS = {"cluster": "cluster", "xla": "xla", "horovod_engine": "horovod", "gpu": "gpu"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).resolve().parent
    for item in items:
        path = Path(item.path).resolve()
        if path.is_relative_to(tests) and len(parts := path.relative_to(tests).parts) > 1:
            marker = ENVIRONMENT_FOLDERS.get(parts[0])
            if marker is not None:
                item.add_marker(marker)
