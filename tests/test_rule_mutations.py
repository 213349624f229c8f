"""Every broken rule file is a RuleTableError naming the file: never a crash, never accepted.

Seeded mutations of the real rule files (see tests/rule_mutations.py): each *breaking* mutation must
be refused with an error that names the mutated file; each *random* one (any value replaced by any
other) is either refused naming the file or gives a table that still never crashes ``resolve()``.
``RESOLVER_MUTATIONS=5000`` runs more.
"""

from __future__ import annotations

import os

import pytest
import rule_mutations

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
    kinds = {m.what.split(":")[0] for m in rule_mutations.mutants(seed=0, count=400)}
    assert kinds >= set(rule_mutations.BREAKING_KINDS)
