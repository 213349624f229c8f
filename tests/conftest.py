"""What every test gets: no colour forced by the runner, no site rules of whoever runs them."""

from __future__ import annotations

import os

import pytest

# The tests compare the commands' plain text: a CI runner's FORCE_COLOR must not colour what they run.
os.environ.pop("FORCE_COLOR", None)


@pytest.fixture(autouse=True)
def _no_site_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The site rules of whoever runs the tests (RESOLVER_RULES) are not the table under test."""
    monkeypatch.delenv("RESOLVER_RULES", raising=False)
