"""Every broken rule file is a RuleTableError naming the file: never a crash, never accepted.

Seeded mutations of the real rule files (see tests/resolver/engine/rule_mutations.py): each *breaking* mutation must
be refused with an error that names the mutated file; each *random* one (any value replaced by any
other) is either refused naming the file or gives a table that still never crashes ``resolve()``.
``RESOLVER_MUTATIONS=5000`` runs more.
"""

from __future__ import annotations

import os
import tomllib

import pytest
import rule_mutations

from resolver._engine.errors import RuleTableError
from resolver.api import compile_sources

COUNT = int(os.environ.get("RESOLVER_MUTATIONS", "240"))
SOURCES = rule_mutations.builtin_sources()


@pytest.mark.parametrize("chunk", range(4))
def test_breaking_mutations_are_refused_naming_the_file(chunk: int):
    found = []
    for mutant in rule_mutations.mutants(seed=chunk, count=COUNT // 4):
        result = rule_mutations.outcome(SOURCES, mutant)
        if result != "refused":
            found.append(f"{result}: {mutant.file}: {mutant.what}")
    assert not found


def test_random_mutations_never_crash_the_loader_or_resolve():
    found = []
    for mutant in rule_mutations.mutants(seed=99, count=COUNT // 3, make="random"):
        result = rule_mutations.outcome(SOURCES, mutant)
        if result not in ("refused", "accepted"):
            found.append(f"{result}: {mutant.file}: {mutant.what}")
    assert not found


def test_the_mutations_cover_every_kind():
    # 1200: the files are drawn at random, and of the 28 by-concept files only vocabulary.toml has
    # `stages` (stage_renamed) and few have a rule with `match` (match_slot)
    kinds = {m.what.split(":")[0] for m in rule_mutations.mutants(seed=0, count=1200)}
    assert kinds >= set(rule_mutations.BREAKING_KINDS)


VOCABULARY = "vocabulary.toml"


def _with_vocabulary(text: str) -> list:
    return [rule_mutations.RuleSource(s.name, text) if s.name == VOCABULARY else s for s in SOURCES]


@pytest.mark.parametrize("change", ["renamed", "removed"])
def test_a_stage_renamed_in_the_vocabulary_is_blamed_on_the_vocabulary(change: str):
    """The flags' own slots (resolver/_domain/flags.py) are decided at `input` and `normalized`: when the
    vocabulary's `stages` loses one, the error points at that list, not at the generated flags."""
    text = next(s.text for s in SOURCES if s.name == VOCABULARY)
    stages_line = text[: text.index("\nstages = ")].count("\n") + 2
    for stage in ("input", "normalized"):
        edited = text.replace(f'"{stage}", ', '"prepared", ' if change == "renamed" else "", 1)
        with pytest.raises(RuleTableError) as caught:
            compile_sources(_with_vocabulary(edited))
        error = caught.value
        assert (error.file, error.line) == (VOCABULARY, stages_line), str(error)
        assert f"`stages` has no stage {stage!r}" in str(error)
        assert f"put {stage!r} back in `stages`" in str(error)
        assert ("(renamed to 'prepared'?)" in str(error)) == (change == "renamed")
        assert "<flags: resolver/_domain/flags.py>" in str(error)  # the other side: the slot that needs it


def test_every_stage_renamed_or_removed_is_refused_naming_the_vocabulary():
    text = next(s.text for s in SOURCES if s.name == VOCABULARY)
    stages = tomllib.loads(text)["stages"]
    for stage in stages:
        for replacement in (f'"{stage}_renamed"', ""):
            listed = ", ".join(replacement if s == stage else f'"{s}"' for s in stages if replacement or s != stage)
            edited = text.replace("stages = [" + ", ".join(f'"{s}"' for s in stages) + "]", f"stages = [{listed}]")
            assert edited != text
            with pytest.raises(RuleTableError) as caught:
                compile_sources(_with_vocabulary(edited))
            assert VOCABULARY in str(caught.value) and repr(stage) in str(caught.value), (stage, replacement)
