"""Golden scenarios: flags + environment in, the expected config or error out.

A scenario is one TOML file::

    description = "8 GPUs under SLURM, one task per GPU"
    [flags]
    devices = 8
    [environment]
    cuda_device_count = 8
    [environment.variables]
    SLURM_NTASKS = "8"
    [environment.files]       # texts of files variables name (LSB_DJOB_RANKFILE), if any
    [expect]                  # the config: every field, None written as "none" ...
    strategy = "ddp"
    [expect.rules]            # ... and the rule that decided each field
    strategy = "strategy.auto.ddp"

or, for a failure, ``[expect.error]`` with ``kind``, ``rule`` and ``rule_ids``. ``check`` compares,
``update`` rewrites the expectation from what the rules now say (review it in the diff).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from tomli_w import dumps

from resolver._engine.errors import ResolutionError
from resolver._engine.input_files import loads_toml, read_text
from resolver._snapshot.environment import Environment
from resolver.api import FLAG_DEFAULTS, RulesArg, config_from, run_rules

__all__ = ["Scenario", "load_scenario", "outcome", "check", "update"]

_NONE = "none"


@attrs.frozen
class Scenario:
    path: Path
    description: str
    flags: Mapping[str, Any]
    environment: Environment
    expect: Mapping[str, Any]
    raw: Mapping[str, Any] = attrs.field(eq=False, repr=False)


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        data = loads_toml(read_text(str(p), "golden scenario"), str(p), "golden scenario")
    except OSError as exc:
        raise ResolutionError(f"{p}: cannot read the scenario: {exc.strerror}", hint=_PATH_HINT) from exc
    except UnicodeDecodeError as exc:
        raise ResolutionError(f"{p}: not UTF-8 text ({exc.reason})", hint="save the scenario as UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ResolutionError(f"{p}: malformed TOML: {exc}") from exc
    for key in ("flags", "environment", "expect"):
        if not isinstance(data.get(key, {}), dict):
            raise ResolutionError(f"{p}: [{key}] must be a table", hint=f"write [{key}] as a table of name = value")
    if not isinstance(data.get("description", ""), str):
        raise ResolutionError(f"{p}: description must be text", hint='write description = "..."')
    flags = dict(data.get("flags", {}))
    unknown = sorted(set(flags) - set(FLAG_DEFAULTS))
    if unknown:
        raise ResolutionError(f"{p}: unknown flag(s) {', '.join(unknown)}; flags are {', '.join(FLAG_DEFAULTS)}")
    env = Environment.from_dict(data.get("environment", {}), source=str(p))
    return Scenario(p, data.get("description", ""), flags, env, data.get("expect", {}), data)


def outcome(scenario: Scenario, rules: RulesArg = None) -> dict[str, Any]:
    """What the rules say for a scenario, in the ``[expect]`` shape."""
    try:
        config = config_from(run_rules(scenario.flags, scenario.environment, rules))
    except ResolutionError as exc:
        return {"error": {"kind": type(exc).__name__, "rule": exc.rule or _NONE, "rule_ids": list(exc.rule_ids)}}
    fields = config.to_dict(with_provenance=False)
    result: dict[str, Any] = {}
    for name, value in fields.items():
        if name in ("notes", "flags"):  # flags: the scenario's own [flags], echoed
            continue
        result[name] = _NONE if value is None else value
    result["notes"] = list(config.notes)
    result["rules"] = {name: prov.rule or prov.kind for name, prov in config.provenance.items()}
    return result


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def check(scenario: Scenario, rules: RulesArg = None) -> list[str]:
    """Differences between a scenario's expectation and the rules' outcome (empty: it holds)."""
    actual = _plain(outcome(scenario, rules))
    expected = _plain(scenario.expect)
    problems = []
    for key in sorted(set(actual) | set(expected)):
        if actual.get(key) != expected.get(key):
            problems.append(f"{key}: expected {expected.get(key)!r}, got {actual.get(key)!r}")
    return problems


def update(scenario: Scenario, rules: RulesArg = None) -> bool:
    """Rewrite the scenario's ``[expect]`` from the rules; True when the file changed."""
    document = {k: v for k, v in scenario.raw.items() if k != "expect"}
    document["expect"] = outcome(scenario, rules)
    text = dumps(document)
    try:
        if scenario.path.exists() and read_text(str(scenario.path), "golden scenario") == text:
            return False
        scenario.path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ResolutionError(f"{scenario.path}: cannot rewrite the scenario: {exc.strerror}") from exc
    return True


_PATH_HINT = "pass scenario files (*.toml) or folders that hold them"


def scenario_paths(paths: list[str | Path]) -> list[Path]:
    """The scenario files named, and those under each folder named; a missing path is an error."""
    found: list[Path] = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise ResolutionError(f"{p}: no such file or folder", hint=_PATH_HINT)
        if not p.is_dir():
            found.append(p)
            continue
        for scenario in sorted(p.glob("**/*.toml")):
            if not scenario.is_file():  # a FIFO would be waited on forever
                raise ResolutionError(
                    f"{scenario}: not a regular file, in a folder of scenarios", hint="move it out or rename it"
                )
            found.append(scenario)
    if not found:
        raise ResolutionError(
            f"no scenarios (*.toml) in {', '.join(str(p) for p in paths)}: nothing was checked", hint=_PATH_HINT
        )
    return found
