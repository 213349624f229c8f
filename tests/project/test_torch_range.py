"""The torch range the `runtime` extra declares is the one CI tests, and the README says it.

pip keeps a user's torch when it lies in the range (an exact pin would replace it), so the range
must not claim releases CI never runs: its lower end is the torch of the XLA phase
(``.ci/xla-env.sh``), its upper end the release after the one ``.ci/run`` installs exactly.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _runtime_torch() -> SpecifierSet:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (torch,) = [Requirement(text) for text in extras["runtime"] if Requirement(text).name == "torch"]
    return torch.specifier


def _one(pattern: str, path: str) -> Version:
    found = re.findall(pattern, (ROOT / path).read_text(), re.M)
    assert len(found) == 1, f"{path}: expected one match of {pattern!r}, found {found}"
    return Version(found[0])


def _bound(specifier: SpecifierSet, operator: str) -> Version:
    (bound,) = [Version(item.version) for item in specifier if item.operator == operator]
    return bound


def test_the_range_starts_at_the_torch_the_xla_phase_tests() -> None:
    specifier = _runtime_torch()
    xla_torch = _one(r"^TORCH_VERSION=(\S+)$", ".ci/xla-env.sh")
    assert _bound(specifier, ">=") == Version(f"{xla_torch.major}.{xla_torch.minor}"), (specifier, xla_torch)
    assert xla_torch in specifier


def test_the_range_ends_after_the_torch_ci_installs_exactly() -> None:
    specifier = _runtime_torch()
    ci_torch = _one(r"pip install -q torch==(\S+) ", ".ci/run")
    assert ci_torch in specifier
    assert _bound(specifier, "<") == Version(f"{ci_torch.major}.{ci_torch.minor + 1}"), (specifier, ci_torch)
    assert {item.operator for item in specifier} == {">=", "<"}  # a range, never a pin


def test_the_readme_says_the_range_and_the_build_ci_tests_with() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n### Which torch\n", 1)[1].split("\n#", 1)[0]
    specifier = _runtime_torch()
    lower, upper = _bound(specifier, ">="), _bound(specifier, "<")
    assert f"`torch>={lower},<{upper}`" in section
    assert f"torch {lower} to {upper.major}.{upper.minor - 1}" in section
    ci_torch = _one(r"pip install -q torch==(\S+) ", ".ci/run")
    assert f"pip install torch=={ci_torch} && pip install -e '.[runtime,test]'" in readme  # the quick start
