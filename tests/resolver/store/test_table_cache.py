"""The compiled rule table is cached on disk, keyed by the rule files' content; a stale or broken
entry is never used. Each test runs with its own cache folder (``RESOLVER_CACHE_DIR``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from resolver import Environment, load_rules, resolve
from resolver._store.cache import cache_dir

SITE_RULE = """
[[rule]]
id = "site.note"
stage = "placed"
when = {{ "var.SITE_FLAG" = {{ set = true }} }}
note = "{text}"
"""


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("RESOLVER_CACHE_DIR", str(folder))
    return folder


def _python(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RESOLVER_CACHE_DIR=str(cache))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("table-*.pickle"))


def test_a_warm_cache_resolves_without_importing_networkx_or_cattrs(cache):
    code = (
        "import sys, resolver\n"
        "config = resolver.resolve(devices=2, strategy='ddp', environment=resolver.Environment())\n"
        "print(config.launcher, 'networkx' in sys.modules, 'cattrs' in sys.modules)\n"
    )
    cold = _python(code, cache)
    assert cold.stdout.split()[:2] == ["subprocess", "True"], cold.stderr  # compiled: networkx (and cattrs) once
    assert len(_entries(cache)) == 1
    warm = _python(code, cache)
    assert warm.stdout.split() == ["subprocess", "False", "False"], warm.stderr
    serialized = _python(code + "config.to_json(); print('cattrs' in sys.modules)\n", cache)
    assert serialized.stdout.split()[-1] == "True"


def test_editing_a_rule_file_makes_a_new_entry(cache, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(SITE_RULE.format(text="first"))
    env = Environment(variables={"SITE_FLAG": "1"})
    assert load_rules([site]).rules["site.note"].note == "first"
    site.write_text(SITE_RULE.format(text="second"))
    assert len(_entries(cache)) == 1
    assert load_rules([site]).rules["site.note"].note == "second"
    assert len(_entries(cache)) == 2
    assert "second" in resolve(environment=env, rules=load_rules([site])).notes


def test_a_corrupt_entry_is_compiled_again(cache):
    load_rules()
    (entry,) = _entries(cache)
    entry.write_bytes(b"\x80\x05not a pickle")
    table = load_rules()
    assert "strategy.auto.ddp" in table.rules
    with entry.open("rb") as f:
        assert f.read(2) != b"\x80\x05n"  # rewritten with a good entry


def test_an_entry_calling_an_unregistered_function_is_not_used(cache, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        '[[rule]]\nid = "site.twice"\nstage = "placed"\nwhen = { "var.SITE_N" = { set = true } }\n'
        'set = { "num_devices" = { fn = "site_twice", args = ["var.SITE_N"] } }\npriority = 1000\n'
    )
    registered = (
        "import resolver\n"
        "resolver.register_function('site_twice')(lambda n: 2 * int(n))\n"
        "env = resolver.Environment(variables={'SITE_N': '3'})\n"
        f"print(resolver.resolve(environment=env, rules=[{str(site)!r}]).num_devices)\n"
    )
    assert _python(registered, cache).stdout.strip() == "6"
    unregistered = (
        "import resolver\n"
        "try:\n"
        f"    resolver.load_rules([{str(site)!r}])\n"
        "except resolver.RuleTableError as exc:\n"
        "    print(exc)\n"
    )
    assert "unknown function 'site_twice'" in _python(unregistered, cache).stdout


def test_cache_off_and_unwritable_folders_only_cost_time(tmp_path, monkeypatch):
    monkeypatch.setenv("RESOLVER_CACHE_DIR", "off")
    assert cache_dir() is None
    assert "strategy.auto.ddp" in load_rules().rules
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("RESOLVER_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    assert "strategy.auto.ddp" in load_rules().rules


def test_default_folder_is_the_user_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("RESOLVER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if sys.platform.startswith("linux"):
        assert cache_dir() == tmp_path / "resolver"


def test_changing_a_flag_declaration_makes_a_new_entry(cache, monkeypatch):
    import attrs

    from resolver._domain import flags

    assert load_rules().slots["arg.accelerator"].doc.endswith("the device kind")
    changed = (attrs.evolve(flags.FLAGS[0], help="the kind of device"), *flags.FLAGS[1:])
    monkeypatch.setattr(flags, "FLAGS", changed)
    assert load_rules().slots["arg.accelerator"].doc.endswith("the kind of device")
    assert len(_entries(cache)) == 2


def test_an_entry_is_used_only_for_the_files_it_was_compiled_from(cache, tmp_path, monkeypatch):
    """Entry names are a short checksum; two rule sets with the same name never share a table."""
    from resolver._store import cache as table_cache

    monkeypatch.setattr(table_cache, "_name", lambda material: "same")
    site = tmp_path / "site.toml"
    site.write_text(SITE_RULE.format(text="first"))
    assert load_rules([site]).rules["site.note"].note == "first"
    site.write_text(SITE_RULE.format(text="second"))
    assert load_rules([site]).rules["site.note"].note == "second"
    assert [p.name for p in _entries(cache)] == ["table-same.pickle"]


def test_a_table_from_the_cache_says_what_the_compiled_one_says(cache):
    """Every golden scenario: the same explanation (each field's value and why, notes) or the same
    diagnostic (message, sides, fix) from the table as compiled and as read back from the cache."""
    from resolver import golden
    from resolver._engine.errors import ResolutionError
    from resolver.cli.explain import explain_text
    from tests.support.cli_support import ROOT

    compiled = load_rules()
    cached = load_rules()  # the entry the first call wrote
    assert cached is not compiled

    def said(scenario: golden.Scenario, table: object) -> str:
        try:
            config = resolve(**scenario.flags, environment=scenario.environment, rules=table)
        except ResolutionError as error:
            return error.diagnostic()
        return explain_text(config)

    paths = golden.scenario_paths([ROOT / "tests" / "golden"])
    assert len(paths) > 100
    for path in paths:
        scenario = golden.load_scenario(path)
        assert said(scenario, cached) == said(scenario, compiled), path.name


#: Four rules testing one variable: 1, 1.0 and true are equal in Python, the last repeats the first.
EQUAL_IN_PYTHON = "".join(
    f'[[rule]]\nid = "site.{name}"\nstage = "placed"\n'
    f'when = {{ "var.SITE_N" = {{ eq = {value} }} }}\nnote = "{name}"\n\n'
    for name, value in (("one", "1"), ("one-point-zero", "1.0"), ("true", "true"), ("one-again", "1"))
)


def test_equal_tests_are_shared_but_values_of_another_type_are_not(cache, tmp_path):
    """Equal conditions become one object (pickled and tested once), but 1, 1.0 and true, equal in
    Python, keep their own types, compiled and read back from the cache."""
    site = tmp_path / "site.toml"
    site.write_text(EQUAL_IN_PYTHON)
    compiled = load_rules([site])
    cached = load_rules([site])
    assert cached is not compiled
    for table in (compiled, cached):
        rules = ("site.one", "site.one-point-zero", "site.true")
        assert [type(table.rules[rule].when[0].ops[0][1]) for rule in rules] == [int, float, bool]
        assert table.rules["site.one"].when[0] is table.rules["site.one-again"].when[0]
    said = [
        resolve(environment=Environment(variables={"SITE_N": value}), rules=table).notes
        for table in (compiled, cached)
        for value in ("1", "true")
    ]
    assert said[:2] == said[2:]


def test_every_rule_and_slot_read_back_holds_every_field_as_compiled(cache):
    """The cache leaves out fields holding their usual value (the class holds it): every field of
    every rule and slot still reads the same, with the same type, down to each condition and value
    (the engine's objects compare by identity, so their fields are compared)."""
    import attrs

    def fields(obj: object) -> dict[str, object]:
        return attrs.asdict(obj, filter=lambda a, _: a.name != "templates")

    compiled = load_rules()
    cached = load_rules()
    assert cached is not compiled
    for kind, before, after in (("rule", compiled.rules, cached.rules), ("slot", compiled.slots, cached.slots)):
        assert before.keys() == after.keys()
        for name, original in before.items():
            read = after[name]
            assert fields(read) == fields(original), (kind, name)
            for field in attrs.fields(type(original)):
                if field.name == "templates":
                    continue
                mine, theirs = getattr(read, field.name), getattr(original, field.name)
                assert type(mine) is type(theirs), (kind, name, field.name)
        assert any(len(vars(read)) < len(attrs.fields(type(read))) for read in after.values())  # the point of it
