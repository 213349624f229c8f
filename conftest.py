"""Collects the code blocks of README.md and docs/*.md as tests (tests/support/docs_examples.py says how),
and registers the environments some tests need wherever they live (tests/support/environments.py)."""

from tests.support.docs_examples import DOCS

pytest_plugins = ["tests.support.environments"]

pytest_collect_file = DOCS.pytest()
