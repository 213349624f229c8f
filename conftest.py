"""Collects the code blocks of README.md and docs/*.md as tests (tests/docs_examples.py says how)."""

from tests.docs_examples import DOCS

pytest_collect_file = DOCS.pytest()
