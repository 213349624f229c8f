"""Collects the code blocks of README.md and docs/*.md as tests (tests/support/docs_examples.py says how),
registers the environments some tests need wherever they live (tests/support/environments.py), and puts
the tests that share something of the machine in one pytest-xdist group each."""

import pytest

from tests.support.docs_examples import DOCS

pytest_plugins = ["tests.support.environments"]

pytest_collect_file = DOCS.pytest()


#: Tests that share something of the machine's run on one pytest-xdist worker, one after another
#: (``--dist loadgroup`` in pyproject.toml's addopts; ``-n 2`` in the README's test command); every
#: other test may run beside any other.
#: A live SLURM (one per session: fixed daemons and ports) and the namespace hosts' cluster tests;
#: the plugin tests' session venv (built once); the preflight tests, which find their check's rank
#: processes among all of the machine's. And each docs page (Sybil): its blocks run in order, sharing names.
_SHARED_FIXTURES = {"slurm_cluster": "cluster", "hosts": "cluster", "venv": "plugin-venv"}


def _group(item: pytest.Item) -> str | None:
    fixtures = getattr(item, "fixturenames", ())
    group = next((_SHARED_FIXTURES[name] for name in fixtures if name in _SHARED_FIXTURES), None)
    if group is None and item.get_closest_marker("cluster") is not None:
        group = "cluster"
    if group is None and "preflight" in item.path.parts:
        group = "preflight"
    if group is None and item.path.suffix == ".md":
        group = f"page-{item.path.name}"
    return group


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, each grouped test's id ends with ``@GROUP``: what ``--dist loadgroup`` sends to one
    worker. pytest-xdist (3.8) marks the ids through an attribute pytest 9 no longer reads, so the ids are
    renamed here (an ``xdist_group`` mark would be lost the same way)."""
    if not config.getoption("loadgroup", default=False):
        return
    for item in items:
        group = _group(item)
        if group is not None and not item.nodeid.endswith(f"@{group}"):
            item._nodeid = f"{item.nodeid}@{group}"  # pytest 8
            if hasattr(item, "_id"):  # pytest 9
                from _pytest.nodeid import coerce_node_id

                item._id = coerce_node_id(f"{item.nodeid}@{group}")
