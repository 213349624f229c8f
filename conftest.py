"""Collects the code blocks of README.md and docs/*.md as tests (tests/support/docs_examples.py says how)."""

from tests.support.docs_examples import DOCS

pytest_collect_file = DOCS.pytest()
