"""The docs tests (tests/support/docs_examples.py) fail where a page is wrong, and only there."""

from __future__ import annotations

import textwrap
import unittest
from pathlib import Path

import pytest
from sybil.example import SybilFailure

from tests.support.docs_examples import DOCS, rank_order, tear_down_page

FENCE = "```"


def outcomes(tmp_path: Path, page: str) -> list[str]:
    """Each block's outcome, in order: 'ok', 'skipped: why', or 'failed: the message'."""
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(page).replace("'''", FENCE), encoding="utf-8")
    document = DOCS.parse(path)
    found = []
    try:
        for example in document:
            try:
                example.evaluate()
                found.append("ok")
            except SybilFailure as failure:
                found.append(f"failed: {failure.result}")
            except unittest.SkipTest as skip:
                found.append(f"skipped: {skip}")
            except Exception as error:  # an evaluator's own error (a block that is not valid TOML)
                found.append(f"failed: {type(error).__name__}: {error}")
    finally:
        tear_down_page(document.namespace)
    return found


def test_a_console_block_passes_when_the_shown_output_is_the_output_with_ellipsis_for_left_out_lines(
    tmp_path: Path,
) -> None:
    page = """
        '''console
        $ printf 'one\\ntwo  spaced\\nthree\\n'
        one
        two spaced
        ...
        $ exit 3  # exit 3
        '''
    """
    assert outcomes(tmp_path, page) == ["ok"]


@pytest.mark.parametrize(
    ("shown", "why"),
    [
        ("$ echo one\ntwo\n", "Expected:\n    two\nGot:\n    one"),
        ("$ echo one; echo two\none\n", "Got:\n    one\n    two"),  # a line the page leaves out, without ...
        ("$ exit 1\n", "exited with 1, the page says 0"),
    ],
)
def test_a_console_block_fails_on_any_other_output_or_exit_status(tmp_path: Path, shown: str, why: str) -> None:
    (outcome,) = outcomes(tmp_path, f"'''console\n{shown}'''\n")
    assert outcome.startswith("failed") and why in outcome, outcome


def test_lines_of_several_ranks_compare_in_rank_order_each_rank_keeping_its_own() -> None:
    arrived = "start\n[rank 1]: b1\n[rank 0]: a1\n[rank 1]: b2\n[rank 0]: a2\nend\n"
    assert rank_order(arrived) == "start\n[rank 0]: a1\n[rank 0]: a2\n[rank 1]: b1\n[rank 1]: b2\nend\n"


def test_named_files_are_written_for_the_page_and_a_python_block_runs_with_its_hidden_neighbours(
    tmp_path: Path,
) -> None:
    page = """
        '''console
        $ cat greeting.toml
        # greeting.toml
        text = "hello"
        '''

        '''toml
        # greeting.toml
        text = "hello"
        '''

        <!-- invisible-code-block: python
        import tomllib
        -->
        '''python
        text = tomllib.load(open("greeting.toml", "rb"))["text"]
        '''
        <!-- invisible-code-block: python
        assert text == "goodbye", text
        -->
    """
    found = outcomes(tmp_path, page)
    assert found[:3] == ["ok", "ok", "ok"]  # the console block, the file, the hidden block (used by the next)
    assert found[3].startswith("failed") and "AssertionError: hello" in found[3], found[3]


def test_a_block_that_does_not_run_fails_unless_a_skip_says_why(tmp_path: Path) -> None:
    page = """
        '''
        anything
        '''

        '''text
        anything
        '''

        <!-- skip: next "needs two machines" -->
        '''bash
        exit 1
        '''

        '''toml
        not = [valid
        '''
    """
    found = outcomes(tmp_path, page)
    assert found[0].startswith("failed: ``` (no language) blocks are not run"), found[0]
    assert found[1].startswith("failed: ```text blocks are not run"), found[1]
    assert found[2:4] == ["ok", "skipped: needs two machines"]  # the skip directive, then the block
    assert found[4].startswith("failed")
