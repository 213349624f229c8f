"""Compare tests/golden/*.toml with a git revision (default HEAD).

Prints the scenarios whose outcome changed (ok <-> error, or another error), and those with other
changes, leaving out the keys that ``ADDED`` names (``main_address``/``main_port``, added to every
scenario at once). Run from the repository root: ``python scripts/golden_diff.py [REVISION]``.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib
from typing import Any

ADDED = {"main_address", "main_port"}


def _without_added(expect: dict[str, Any]) -> dict[str, Any]:
    """``expect`` without the ``ADDED`` keys, at the top and in its ``rules`` table."""
    return {
        key: ({k: v for k, v in value.items() if k not in ADDED} if key == "rules" else value)
        for key, value in expect.items()
        if key not in ADDED
    }


def main(base: str) -> None:
    changed_outcome: list[tuple[str, str, str]] = []
    other: list[tuple[str, str]] = []
    for path in sorted(pathlib.Path("tests/golden").glob("*.toml")):
        shown = subprocess.run(["git", "show", f"{base}:{path}"], capture_output=True, text=True)
        if shown.returncode != 0:
            print("NEW", path.name)
            continue
        old, new = tomllib.loads(shown.stdout), tomllib.loads(path.read_text())
        old_expect, new_expect = old.get("expect", {}), new.get("expect", {})
        if {k: v for k, v in old.items() if k != "expect"} != {k: v for k, v in new.items() if k != "expect"}:
            other.append((path.name, "non-expect part changed"))
        if old_expect.get("error") != new_expect.get("error"):  # ok -> error, error -> ok, or another error
            changed_outcome.append((path.name, old_expect.get("error", "ok"), new_expect.get("error", "ok")))
            continue
        old_kept, new_kept = _without_added(old_expect), _without_added(new_expect)
        if old_kept != new_kept:
            differ = {k for k in set(old_kept) | set(new_kept) if old_kept.get(k) != new_kept.get(k)}
            other.append((path.name, f"keys differ: {sorted(differ)}"))
    for outcome in changed_outcome:
        print("OUTCOME", *outcome)
    for change in other:
        print("OTHER", *change)
    print(f"{len(changed_outcome)} outcome changes, {len(other)} other changes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "HEAD")
