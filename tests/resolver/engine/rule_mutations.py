"""Seeded mutations of the real rule files, for tests/resolver/engine/test_rule_mutations.py and larger campaigns.

Each *breaking* mutation makes a file wrong in a way the loader must catch (an unknown key, a value
of the wrong type, a missing required key, invalid UTF-8, a stage listed twice, a stage renamed or
removed from `stages` while slots and rules still name it, a duplicate rule id,
a function called with the wrong number of arguments, an unknown operator, slot, domain value or
function, malformed TOML, a rule's `match` naming an unknown slot, a case given twice, cases added
to an unknown rule). A *random* mutation replaces any value with any other: the loader
either refuses it (naming the file) or the table it accepts must still never crash ``resolve()``.

Campaign: ``python tests/resolver/engine/rule_mutations.py --breaking 5000 --random 5000 --seed 1`` prints how
many mutations gave each outcome.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import sys
import tomllib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tomli_w import dumps

from resolver import Environment, ResolutionError, resolve
from resolver._engine.compiled import CompiledTable
from resolver._engine.errors import RuleTableError
from resolver._engine.table import RuleSource, rule_files
from resolver.api import builtin_rules_dir, compile_sources

Document = dict[str, Any]

_TYPED_FIELDS: dict[str, dict[str, str]] = {
    "rule": {
        "id": "str",
        "stage": "str",
        "why": "str",
        "conflict": "str",
        "hint": "str",
        "note": "str",
        "between": "list",
        "priority": "int",
        "when": "table",
        "set": "table",
        "match": "str",
        "cases_join": "str",
        "cases": "table",
    },
    "case": {"set": "table", "why": "str", "conflict": "str", "hint": "str", "note": "str"},
    "slot": {"stage": "str", "type": "str", "domain": "str", "nullable": "bool", "required": "bool", "doc": "str"},
    "domain": {"values": "list", "include": "list"},
    "removed": {"why": "str", "python": "str", "cli": "str"},
}
_WRONG: dict[str, list[Any]] = {
    "str": [5, True, ["x"], {"a": 1}, 1.5],
    "bool": ["no", "yes", "true", 1, 0, ["x"]],
    "int": ["5", 5.5, True, [1], {"a": 1}],
    "list": ["abc", 5, {"a": 1}, [5], [{"a": 1}], [True]],
    "table": [5, "x", [1], True],
}
_ANY_VALUES: list[Any] = [
    5,
    -1,
    0,
    10**30,
    1.5,
    True,
    False,
    "",
    "x",
    "no",
    "none",
    "auto",
    "ddp",
    "²",
    [],
    [5],
    ["a", "a"],
    [{"a": 1}],
    {},
    {"ref": 5},
    {"ref": "nope"},
    {"ref": "num_devices"},
    {"const": 1},
    {"fn": "to_int"},
    {"fn": "to_int", "args": 5},
    {"fn": ["to_int"]},
    {"in": [{"a": 1}]},
    {"in_domain": ["strategy"]},
    {"gt": "x"},
    {"set": "no"},
    {"is": "integer"},
    {"eq": {"ref": 5}},
    {"between": [5]},
    {"wehn": 1},
]


def builtin_sources() -> list[RuleSource]:
    folder = str(builtin_rules_dir())  # each file named by its place in rules/ ("clusters/slurm.toml")
    return [
        RuleSource(Path(os.path.relpath(f, folder)).as_posix(), Path(f).read_text(encoding="utf-8"))
        for f in rule_files(folder)
    ]


class Mutant:
    """One mutated file: its name, its new bytes, and what was done."""

    def __init__(self, file: str, data: bytes, what: str) -> None:
        self.file, self.data, self.what = file, data, what


def _cases(doc: Document) -> list[dict[str, Any]]:
    """Every case of a document: of its rules' ``cases`` and of its ``[cases."RULE"]`` tables."""
    tables = [r.get("cases", {}) for r in doc.get("rule", []) if isinstance(r, dict)]
    tables += [t for t in doc.get("cases", {}).values() if isinstance(t, dict)]
    return [c for t in tables if isinstance(t, dict) for c in t.values() if isinstance(c, dict)]


def _tables(doc: Document) -> list[tuple[str, dict[str, Any]]]:
    """Every (kind, table) of a document: rules, slots, domains, removed flags, cases."""
    found: list[tuple[str, dict[str, Any]]] = [("rule", r) for r in doc.get("rule", []) if isinstance(r, dict)]
    for kind in ("slot", "domain", "removed"):
        found += [(kind, t) for t in doc.get(kind, {}).values() if isinstance(t, dict)]
    found += [("case", c) for c in _cases(doc)]
    return found


def _sets(doc: Document) -> list[dict[str, Any]]:
    """Every ``set`` table of a document: of its rules and of their cases."""
    owners = [r for r in doc.get("rule", []) if isinstance(r, dict)] + _cases(doc)
    return [o["set"] for o in owners if isinstance(o.get("set"), dict)]


# Each kind of mutation the loader must refuse; a kind listed twice is drawn twice as often.
BREAKING_KINDS: list[str] = [
    "unknown_key",
    "wrong_type",
    "wrong_type",
    "missing_key",
    "utf8",
    "duplicate_stage",
    "stage_renamed",
    "duplicate_id",
    "arity",
    "operator",
    "operand",
    "unknown_slot",
    "ref",
    "domain_value",
    "unknown_function",
    "malformed",
    "match_slot",
    "duplicate_case",
    "case_rule",
]


def _breaking(rng: random.Random, name: str, text: str, doc: Document, vocabulary: Document) -> Mutant | None:
    """One mutation that must be refused; None when this file has nothing of the kind chosen."""
    kind = rng.choice(BREAKING_KINDS)
    doc = copy.deepcopy(doc)
    tables = _tables(doc)
    rules = [r for r in doc.get("rule", []) if isinstance(r, dict)]
    sets = _sets(doc)
    with_cases = [r for r in rules if r.get("match") and r.get("cases")]
    if kind == "utf8":
        data = text.encode()
        at = rng.randrange(len(data) + 1)
        return Mutant(name, data[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xe2\x82", b"\x80"]) + data[at:], kind)
    if kind == "malformed":
        lines = text.split("\n")
        headers = [i for i, line in enumerate(lines) if line.startswith("[")]
        if not headers:
            return None
        i = rng.choice(headers)
        lines[i] = lines[i].replace("]", "", 1)  # a header may end in a comment: drop its first "]"
        return Mutant(name, "\n".join(lines).encode(), f"{kind}: line {i + 1}")
    if kind == "unknown_key":
        target = rng.choice([("top", doc), *tables])[1]
        target[rng.choice(["wehn", "bogus", "values_", "sett"])] = 1
    elif kind == "wrong_type":
        candidates = [(k, t, f) for k, t in tables for f in _TYPED_FIELDS[k] if f in t]
        if "stages" in doc:
            candidates.append(("top", doc, "stages"))
        if not candidates:
            return None
        table_kind, table, field = rng.choice(candidates)
        expected = "list" if field == "stages" else _TYPED_FIELDS[table_kind][field]
        table[field] = rng.choice(_WRONG[expected])
        kind = f"{kind}: {table_kind}.{field}={table[field]!r}"
    elif kind == "missing_key":
        candidates = [
            (t, f)
            for k, t in tables
            for f in {"rule": ("id", "stage"), "slot": ("stage",), "removed": ("why",)}.get(k, ())
            if f in t
        ]
        if not candidates:
            return None
        table, field = rng.choice(candidates)
        del table[field]
        kind = f"{kind}: {field}"
    elif kind == "duplicate_stage":
        if "stages" not in doc:
            return None
        doc["stages"].insert(rng.randrange(len(doc["stages"]) + 1), rng.choice(doc["stages"]))
    elif kind == "stage_renamed":  # renamed or removed from `stages` only: slots and rules still name it
        if "stages" not in doc:
            return None
        at = rng.randrange(len(doc["stages"]))
        old = doc["stages"][at]
        if rng.random() < 0.5:
            doc["stages"][at] = old + "_renamed"
        else:
            del doc["stages"][at]
        kind = f"{kind}: {old}"
    elif kind == "duplicate_id":
        if not rules:
            return None
        doc["rule"].insert(rng.randrange(len(rules) + 1), copy.deepcopy(rng.choice(rules)))
    elif kind in ("match_slot", "duplicate_case", "case_rule"):
        if not with_cases:
            return None
        rule = rng.choice(with_cases)
        if kind == "match_slot":
            rule["match"] = "no.such." + rule["match"]
        else:
            value = rng.choice(sorted(rule["cases"]))
            target = rule["id"] if kind == "duplicate_case" else rule["id"] + "_x"
            doc.setdefault("cases", {}).setdefault(target, {})[value] = copy.deepcopy(rule["cases"][value])
        kind = f"{kind}: {rule['id']}"
    elif kind == "arity":
        calls = [e for t in sets for e in t.values() if isinstance(e, dict) and "fn" in e]
        if not calls:
            return None
        call = rng.choice(calls)
        args = call.setdefault("args", [])
        if args and rng.random() < 0.5:
            args.pop(rng.randrange(len(args)))
        else:
            args.insert(rng.randrange(len(args) + 1), "arg.devices")
    elif kind in ("operator", "operand", "unknown_slot"):
        with_when = [r for r in rules if r.get("when")]
        if not with_when:
            return None
        when = rng.choice(with_when)["when"]
        slot = rng.choice(sorted(when))
        if kind == "unknown_slot":
            when["no.such." + slot] = when.pop(slot)
        elif kind == "operator":
            spec = when[slot]
            when[slot] = {"eqq": spec} if not isinstance(spec, dict) else {op + "_x": v for op, v in spec.items()}
        else:
            when[slot] = rng.choice(
                [
                    {"in": "abc"},
                    {"set": "no"},
                    {"gt": "x"},
                    {"is": "integer"},
                    {"in_domain": "nope"},
                    {"not_in": 5},
                    {"le": True},
                    {"in_domain": ["strategy"]},
                    {"eq": {"a": 1}},
                    {"ref": 5},
                ]
            )
    elif kind == "ref":
        setting = [t for t in sets if t]
        if not setting:
            return None
        chosen = rng.choice(setting)
        chosen[rng.choice(sorted(chosen))] = rng.choice([{"ref": 5}, {"ref": "no.such.slot"}, {"ref": ""}])
    elif kind == "domain_value":
        slots = vocabulary.get("slot", {})
        choices = [
            (t, s)
            for t in sets
            for s, v in t.items()
            if isinstance(v, str) and v != "none" and slots.get(s, {}).get("domain")
        ]
        if not choices:
            return None
        chosen, slot = rng.choice(choices)
        chosen[slot] = chosen[slot] + "_not_a_member"
    elif kind == "unknown_function":
        calls = [e for t in sets for e in t.values() if isinstance(e, dict) and "fn" in e]
        if not calls:
            return None
        rng.choice(calls)["fn"] += "_nope"
    return Mutant(name, dumps(doc).encode(), kind)


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _leaves(value, (*path, index))
    return found


def _random(rng: random.Random, name: str, text: str, doc: Document) -> Mutant | None:
    """Any value anywhere replaced by any other (a table, list or scalar)."""
    doc = copy.deepcopy(doc)
    paths = _leaves(doc)
    if not paths:
        return None
    path = rng.choice(paths)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    value = copy.deepcopy(rng.choice(_ANY_VALUES))
    parent[path[-1]] = value
    return Mutant(name, dumps(doc).encode(), f"random: {'.'.join(map(str, path))}={value!r}")


_SCENARIOS: list[tuple[dict[str, Any], Environment]] = [
    ({}, Environment()),
    ({"devices": 2, "strategy": "ddp"}, Environment()),
    ({"devices": 2, "precision": "bf16-mixed"}, Environment(cuda_device_count=4)),
    (
        {"devices": 2},
        Environment(
            variables={
                "SLURM_NTASKS": "2",
                "SLURM_PROCID": "1",
                "SLURM_LOCALID": "1",
                "SLURM_NODEID": "0",
                "SLURM_JOB_NAME": "train",
            }
        ),
    ),
    ({"strategy": "fsdp", "accelerator": "cuda", "devices": -1}, Environment(cuda_device_count=2)),
]


def outcome(sources: list[RuleSource], mutant: Mutant) -> str:
    """``refused`` (a RuleTableError naming the file), ``refused_unnamed``, ``accepted`` (resolving
    still gives only configs or ResolutionErrors), ``crash_loader`` or ``crash_resolve``."""
    mutated: list[RuleSource] = []
    try:
        for source in sources:
            if source.name != mutant.file:
                mutated.append(source)
                continue
            try:
                mutated.append(RuleSource(source.name, mutant.data.decode("utf-8")))
            except UnicodeDecodeError:
                _load_file_from_disk(mutant)  # the loader's own decoding path
                return "accepted_bad_utf8"  # unreachable when the loader refuses it
        table = compile_sources(mutated)  # the flags' own rules (resolver/_domain/flags.py) in front
    except RuleTableError as error:
        return "refused" if mutant.file in str(error) else "refused_unnamed"
    except Exception:  # noqa: BLE001 - the thing this campaign looks for
        return "crash_loader"
    return "accepted" if _resolves_safely(table) else "crash_resolve"


def _load_file_from_disk(mutant: Mutant) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / mutant.file
        path.parent.mkdir(parents=True, exist_ok=True)  # clusters/slurm.toml
        path.write_bytes(mutant.data)
        RuleSource.from_path(path)


def _resolves_safely(table: CompiledTable) -> bool:
    for flags, environment in _SCENARIOS:
        try:
            resolve(**flags, environment=environment, rules=table)
        except ResolutionError:
            pass
        except Exception:  # noqa: BLE001
            return False
    return True


def mutants(seed: int, count: int, make: str = "breaking") -> list[Mutant]:
    """``count`` seeded mutants of the built-in files (``breaking`` or ``random``)."""
    rng = random.Random(seed)
    sources = builtin_sources()
    docs = {s.name: tomllib.loads(s.text) for s in sources}
    vocabulary = docs.get("vocabulary.toml", {})
    found: list[Mutant] = []
    while len(found) < count:
        source = rng.choice(sources)
        if make == "breaking":
            mutant = _breaking(rng, source.name, source.text, docs[source.name], vocabulary)
        else:
            mutant = _random(rng, source.name, source.text, docs[source.name])
        if mutant is not None:
            found.append(mutant)
    return found


def campaign(seed: int, breaking: int, random_count: int, report: Callable[[str], None] = print) -> Counter[str]:
    sources = builtin_sources()
    totals: Counter[str] = Counter()
    for make, count in (("breaking", breaking), ("random", random_count)):
        for done, mutant in enumerate(mutants(seed, count, make), 1):
            result = outcome(sources, mutant)
            totals[f"{make}:{result}"] += 1
            if done % 500 == 0:
                report(f"progress: {make} {done}/{count} {dict(totals)}")
            if result.startswith("crash") or (make == "breaking" and result != "refused"):
                report(f"{result}: {mutant.file}: {mutant.what}")
    return totals


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--breaking", type=int, default=1000)
    parser.add_argument("--random", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    totals = campaign(args.seed, args.breaking, args.random, report=lambda line: print(line, flush=True))
    for key, value in sorted(totals.items()):
        print(f"{key}: {value}")
    sys.exit(1 if any(k.endswith(("crash_loader", "crash_resolve", "refused_unnamed")) for k in totals) else 0)
