"""Loading the rule table reports every mistake with its file, rule id and line."""

from __future__ import annotations

import textwrap

import pytest

from resolver import Environment, RuleTableError, resolve
from resolver._engine.table import RuleSource, read_sources
from resolver.api import builtin_rules_dir, compile_sources

BASE = read_sources([builtin_rules_dir()])


def compile_with(extra: str, name: str = "extra.toml"):
    return compile_sources([*BASE, RuleSource(name, textwrap.dedent(extra))])


def load_error(extra: str, name: str = "extra.toml") -> RuleTableError:
    with pytest.raises(RuleTableError) as info:
        compile_with(extra, name)
    return info.value


def test_the_builtin_table_loads():
    table = compile_sources(BASE)
    assert len(table.rules) > 150
    assert [s.name for s in table.stages] == ["input", "normalized", "placed", "clustered", "planned", "resolved"]


def test_malformed_toml_names_the_file_and_line():
    error = load_error('[[rule]]\nid = "x"\nstage = \n', name="broken.toml")
    assert error.file == "broken.toml"
    assert "malformed TOML" in str(error)
    assert "line 3" in str(error)


def test_unknown_slot_names_rule_and_line():
    error = load_error(
        """
        [[rule]]
        id = "my.rule"
        stage = "planned"
        when = { stratgy = "ddp" }
        set = { launcher = "spawn" }
        why = "typo"
        """
    )
    assert (error.file, error.rule, error.line) == ("extra.toml", "my.rule", 3)
    assert "unknown slot 'stratgy'" in str(error)


def test_unknown_value_lists_the_domain():
    error = load_error(
        """
        [[rule]]
        id = "my.rule"
        stage = "planned"
        when = { strategy = "ddpp" }
        set = { launcher = "spawn" }
        why = "typo"
        """
    )
    assert "unknown value 'ddpp' for slot 'strategy'" in str(error)
    assert "single_device" in str(error)


def test_unknown_set_value():
    error = load_error(
        """
        [[rule]]
        id = "my.rule"
        stage = "planned"
        when = { strategy = "ddp" }
        set = { launcher = "teleport" }
        why = "no such launcher"
        """
    )
    assert "unknown value 'teleport' for slot 'launcher'" in str(error)


def test_duplicate_ids_name_both_places():
    error = load_error(
        """
        [[rule]]
        id = "strategy.explicit"
        stage = "planned"
        when = { strategy = "ddp" }
        set = { launcher = "spawn" }
        why = "again"
        """
    )
    assert error.rule == "strategy.explicit"
    assert "duplicate rule id" in str(error)
    assert "rules/strategies.toml" in str(error)


def test_cycle_is_named():
    error = load_error(
        """
        [slot."mine.a"]
        stage = "planned"
        type = "int"
        [slot."mine.b"]
        stage = "planned"
        type = "int"

        [[rule]]
        id = "mine.a_from_b"
        stage = "planned"
        when = { "mine.b" = { gt = 0 } }
        set = { "mine.a" = 1 }
        why = "a follows b"

        [[rule]]
        id = "mine.b_from_a"
        stage = "planned"
        when = { "mine.a" = { gt = 0 } }
        set = { "mine.b" = 1 }
        why = "b follows a"
        """
    )
    assert "cycle" in str(error)
    assert "rule:mine.a_from_b" in str(error) and "rule:mine.b_from_a" in str(error)
    assert "slot:mine.a" in str(error) and "slot:mine.b" in str(error)


def test_reading_a_slot_a_later_stage_decides():
    error = load_error(
        """
        [[rule]]
        id = "early.reads.late"
        stage = "placed"
        when = { precision = "16-mixed" }
        set = { accelerator = "cuda" }
        why = "cannot know precision yet"
        """
    )
    assert error.rule == "early.reads.late"
    assert "reads slot 'precision', which stage 'resolved' decides after this rule's stage 'placed'" in str(error)


def test_setting_another_stages_slot():
    error = load_error(
        """
        [[rule]]
        id = "wrong.stage"
        stage = "resolved"
        when = { precision = "16-mixed" }
        set = { strategy = "ddp" }
        why = "too late"
        """
    )
    assert "sets slot 'strategy', which belongs to stage 'planned'" in str(error)


def test_ambiguous_rules_are_reported():
    error = load_error(
        """
        [[rule]]
        id = "mine.spawn_on_two"
        stage = "planned"
        when = { num_devices = 2 }
        set = { launcher = "spawn" }
        why = "x"

        [[rule]]
        id = "mine.fork_on_cuda"
        stage = "planned"
        when = { accelerator = "cuda" }
        set = { launcher = "fork" }
        why = "y"
        """
    )
    assert "ambiguous" in str(error)
    assert "mine.spawn_on_two" in str(error) and "mine.fork_on_cuda" in str(error)


def test_exclusive_rules_at_one_priority_are_fine():
    compile_with(
        """
        [[rule]]
        id = "mine.a"
        stage = "planned"
        when = { accelerator = "cuda", num_devices = 3 }
        set = { launcher = "spawn" }
        priority = 7
        why = "x"

        [[rule]]
        id = "mine.b"
        stage = "planned"
        when = { accelerator = "cpu", num_devices = 3 }
        set = { launcher = "fork" }
        priority = 7
        why = "y"
        """
    )


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        ('[[rule]]\nid = "r"\nstage = "planned"\nwhen = { strategy = "ddp" }\nconflict = "x"\n', "needs a `hint`"),
        ('[[rule]]\nid = "r"\nstage = "warp"\nset = { launcher = "spawn" }\n', "unknown stage 'warp'"),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nwhen = { strategy = { like = "d" } }\n'
            'set = { launcher = "spawn" }\n',
            "unknown condition operator 'like'",
        ),
        ('[[rule]]\nid = "r"\nstage = "planned"\nset = { launcher = { fn = "nope" } }\n', "unknown function 'nope'"),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nwehn = { strategy = "ddp" }\nset = { launcher = "spawn" }\n',
            "unknown key(s) wehn",
        ),
        ('[[rule]]\nid = "r"\nstage = "planned"\nwhen = { strategy = "ddp" }\n', "exactly one outcome"),
        ('[[rule]]\nid = "r"\nstage = "planned"\nset = { "var.RANK" = "1" }\n', "rules cannot change inputs"),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nwhen = { num_devices = { gt = "two" } }\n'
            'set = { launcher = "spawn" }\n',
            "needs a number",
        ),
        ('[[rule]]\nstage = "planned"\nset = { launcher = "spawn" }\n', "missing required key `id`"),
        ("bogus = 1\n", "unknown key(s) bogus; expected stages"),
    ],
)
def test_other_table_mistakes(snippet: str, message: str):
    assert message in str(load_error(snippet))


def test_extra_rule_file_from_disk_is_used_by_resolve(tmp_path):
    extra = tmp_path / "site.toml"
    extra.write_text(
        textwrap.dedent(
            """
            [[rule]]
            id = "site.always_spawn"
            stage = "planned"
            when = { strategy = "ddp", "cluster.manages_processes" = false }
            set = { launcher = "spawn" }
            priority = 45
            why = "our site prefers spawn"
            """
        )
    )
    config = resolve(devices=2, environment=Environment(), rules=[extra])
    assert config.launcher == "spawn"
    assert config.provenance["launcher"].rule == "site.always_spawn"
    assert resolve(devices=2, environment=Environment()).launcher == "subprocess"


def test_missing_rule_file_is_a_clear_error(tmp_path):
    from resolver import ResolutionError

    with pytest.raises(ResolutionError, match="cannot read rule file"):
        resolve(environment=Environment(), rules=[tmp_path / "absent.toml"])


# -- broken files found by mutating the real rule files: each a RuleTableError naming the file ------

R = '[[rule]]\nid = "r"\nstage = "planned"\n'


@pytest.mark.parametrize(
    ("snippet", "message", "line"),
    [
        # these crashed the loader
        ("[domain.strategy]\nvalues = 5\n", "domain.strategy.values: expected a list, got 5", 1),
        ("[removed]\ngpus = 5\n", "removed.gpus: expected a table, got 5", 2),
        (R + 'set = "x"\n', "expected a table, got 'x'", 2),
        (R + "set = { launcher = { ref = 5 } }\n", "must be a value or { ref = \"slot\" }, not {'ref': 5}", 2),
        (R + 'when = { num_devices = { in = [{ a = 1 }] } }\nset = { launcher = "spawn" }\n', "plain values", 2),
        (R + 'when = { strategy = { in_domain = ["strategy"] } }\nset = { launcher = "spawn" }\n', "unknown domain", 2),
        (R + 'set = { launcher = { fn = ["to_int"] } }\n', "expected text, got ['to_int']", 2),
        (R + 'set = { launcher = { fn = "to_text", args = 5 } }\n', "expected a list, got 5", 2),
        (
            R + 'when = { strategy = "ddp" }\nbetween = [5]\nconflict = "c"\nhint = "h"\n',
            "expected text, got 5 (at between.0)",
            2,
        ),
        # these were accepted
        (
            R + 'set = { num_devices = { fn = "to_int", args = ["arg.devices", "arg.strategy"] } }\n',
            "function 'to_int' takes (value), but the rule passes 2 argument(s)",
            2,
        ),
        (
            R + 'set = { threads_per_rank = { fn = "share", args = [{ const = "x" }, { const = 2 }] } }\n',
            "function 'share': argument 'total' takes int, but the rule passes 'x'",
            2,
        ),
        ('[slot."my.flag"]\nstage = "planned"\nnullable = "no"\n', "slot.my.flag.nullable: expected true or false", 1),
        ('[domain.strategy]\nvalues = "ddpx"\n', "expected a list, got 'ddpx'", 1),
        (
            'stages = ["input", "input", "normalized", "placed", "clustered", "planned", "resolved"]\n',
            "`stages` lists 'input' twice",
            1,
        ),
        (R + 'when = { strategy = { set = "no" } }\nset = { launcher = "spawn" }\n', "takes true or false", 2),
        (R + 'set = { num_devices = "two" }\n', "sets 'num_devices' to 'two', but the slot holds int", 2),
        (R + "set = { launcher = 5 }\n", "sets 'launcher' to 5, but the slot holds str", 2),
        # slot, stage and domain errors name the file and the line
        ('# a comment\n\n[slot."my.flag"]\nstage = "warp"\n', "slot 'my.flag' names unknown stage 'warp'", 3),
        ('\n[slot."my.flag"]\nstage = "planned"\ndomain = "nope"\n', "names unknown domain 'nope'", 2),
        ("\n\n[domain.mine]\ninclude = ['nope']\n", "[domain.mine] includes unknown domain 'nope'", 3),
        ('\n[domain.a]\ninclude = ["b"]\n[domain.b]\ninclude = ["a"]\n', "includes itself (a -> b -> a)", 4),
        ('\n[slot.strategy]\nstage = "planned"\n', "slot 'strategy' declared twice (first at", 2),
        ('x = 1\nstages = ["input"]\n', "unknown key(s) x", None),
    ],
)
def test_broken_files_are_rule_table_errors_naming_file_and_line(snippet: str, message: str, line: int | None):
    error = load_error(snippet, name="site.toml")
    assert error.file == "site.toml"
    assert message in str(error)
    if line is not None:
        assert error.line == line


def test_a_file_that_is_not_utf8_names_the_file_and_line(tmp_path):
    bad = tmp_path / "site.toml"
    bad.write_bytes(b'# ok\n[[rule]]\nid = "caf\xe9"\n')
    with pytest.raises(RuleTableError) as info:
        read_sources([bad])
    assert (info.value.file, info.value.line) == (str(bad), 3)
    assert "not UTF-8" in str(info.value)


def test_operators_are_one_registry_used_by_loader_and_docs():
    from resolver._engine.operators import OPERATORS

    table = compile_sources(BASE)
    used = {op for rule in table.rules.values() for c in rule.when for op, _ in c.ops}
    assert used <= set(OPERATORS)
    assert OPERATORS["ge"].render("num_devices", 2) == "`num_devices` ≥ 2"


def test_a_flag_value_with_capitals_is_refused_where_it_is_written():
    """Flags are lowercased before rules see them: a capitalised value could never be chosen."""
    error = load_error('[domain.strategy_flag]\nvalues = ["My_DDP"]\n', name="site.toml")
    assert error.file == "site.toml"
    assert "'My_DDP'" in str(error) and "write the value as 'my_ddp'" in str(error)

    error = load_error('[cases."strategy"]\nMy_Fsdp = { set = { strategy = "fsdp" }, why = "site alias" }\n')
    assert error.file == "extra.toml:2"
    assert "write the value as 'my_fsdp'" in str(error)


def test_a_lowercase_site_alias_is_chosen_whatever_the_case_of_the_flag():
    table = compile_with('[cases."strategy"]\nmy_fsdp = { set = { strategy = "fsdp" }, why = "site alias" }\n')
    config = resolve(strategy="MY_FSDP", devices=2, environment=Environment(), rules=table)
    assert config.strategy == "fsdp"
    assert config.provenance["strategy"].rule == "strategy.my_fsdp"


def test_a_slot_of_my_own_can_ask_for_lowercase_values():
    error = load_error(
        """
        [domain.site_queue]
        values = ["gpu", "Debug"]

        [slot."site.queue"]
        stage = "normalized"
        type = "str"
        domain = "site_queue"
        lowercase = true
        """
    )
    assert "domain 'site_queue' has the value 'Debug'" in str(error)


# -- where rules live: folders at any depth ------------------------------------------------------


def test_a_rule_folder_is_read_at_any_depth_in_a_fixed_order(tmp_path):
    """A folder's own files by name, then each subfolder's the same way: the same on every machine,
    and a link back to a folder above is not followed."""
    for name in ("z.toml", "a.toml", "b/c.toml", "b/d/e.toml", "c/f.toml", "b/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "b" / "d" / "up").symlink_to(tmp_path / "b", target_is_directory=True)
    names = [source.name for source in read_sources([tmp_path])]
    assert names == [str(tmp_path / n) for n in ("a.toml", "z.toml", "b/c.toml", "b/d/e.toml", "c/f.toml")]


def test_a_users_nested_rule_folder_is_used_and_its_errors_name_the_nested_file(tmp_path):
    site = tmp_path / "site"
    (site / "strategies").mkdir(parents=True)
    (site / "strategies" / "my_ddp.toml").write_text('[domain.torch_distributed_strategy]\nvalues = ["my_ddp"]\n')
    config = resolve(strategy="my_ddp", devices=2, environment=Environment(), rules=site)
    assert (config.strategy, config.launcher) == ("my_ddp", "subprocess")  # the family's rules apply to it

    (site / "clusters").mkdir()
    broken = site / "clusters" / "pbs.toml"
    broken.write_text('[[rule]]\nid = "pbs.world"\nstage = "clustered"\nset = { wrld_size = 1 }\nwhy = "x"\n')
    with pytest.raises(RuleTableError) as info:
        resolve(environment=Environment(), rules=site)
    assert (info.value.file, info.value.line) == (str(broken), 2)
    assert f"{broken}:2" in str(info.value)


def test_each_accelerator_cluster_and_strategy_is_named_in_its_own_file():
    """rules/accelerators/NAME.toml adds NAME to the accelerator domain (clusters/NAME.toml to
    cluster); each strategy is added to the strategy domain (or a family) by one strategies/ file."""
    import tomllib

    folder = builtin_rules_dir()
    table = compile_sources(BASE)

    def added(path, domains):
        declared = tomllib.loads(path.read_text(encoding="utf-8")).get("domain", {})
        return {value for name in domains for value in declared.get(name, {}).get("values", [])}

    for kind, domain in (("accelerators", "accelerator"), ("clusters", "cluster")):
        files = sorted((folder / kind).glob("*.toml"))
        assert sorted(p.stem for p in files) == sorted(table.domains[domain]), kind
        for path in files:
            assert added(path, [domain]) == {path.stem}, path
    families = ("strategy", "torch_distributed_strategy", "xla_strategy", "single_process_strategy")
    owners: dict[str, list[str]] = {}
    for path in sorted((folder / "strategies").glob("*.toml")):
        assert path.stem in added(path, families), path
        for value in added(path, families):
            owners.setdefault(value, []).append(path.name)
    assert set(owners) == set(table.domains["strategy"])
    assert {value: files for value, files in owners.items() if len(files) > 1} == {}
    assert added(folder / "vocabulary.toml", families + ("accelerator", "cluster")) == set()
