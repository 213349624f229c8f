"""A rule with `match` and `cases` is a table of rules, one per value of a slot (resolver/_engine/cases.py).

The strategy aliases with options (`deepspeed_stage_3`, `fsdp_cpu_offload`), the legacy precision
spellings and the visible devices per accelerator are written so; a site file adds an alias with
one case line, and every mistake in a case names the file, the rule, the case and its line.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from resolver import Environment, ResolutionError, RuleTableError, resolve
from resolver._engine.table import RuleSource, read_sources
from resolver.api import builtin_rules_dir, compile_sources
from resolver.cli import main

BASE = read_sources([builtin_rules_dir()])
#: The cases of rule "strategy" that mean DeepSpeed live in the DeepSpeed strategy's file.
DEEPSPEED = str(builtin_rules_dir() / "strategies" / "deepspeed.toml")
GPUS = Environment(cuda_device_count=2, deepspeed_available=True)

# A site file that adds one alias to the built-in table of strategy aliases: one case line.
SITE_ALIAS = (
    '[cases."strategy"]\n'
    'deepspeed_stage_2_custom = { set = { strategy = "deepspeed", strategy_options = { const = { stage = 2, '
    'allgather_bucket_size = 200000000 } } }, why = "our cluster\'s ZeRO-2 settings" }\n'
)


def compile_with(extra: str, name: str = "site.toml"):
    return compile_sources([*BASE, RuleSource(name, textwrap.dedent(extra))])


def load_error(extra: str, name: str = "site.toml") -> RuleTableError:
    with pytest.raises(RuleTableError) as info:
        compile_with(extra, name)
    return info.value


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


# -- the built-in tables ------------------------------------------------------------------------


def test_each_case_is_an_ordinary_rule_at_its_own_line():
    table = compile_sources(BASE)
    text = Path(DEEPSPEED).read_text(encoding="utf-8")
    stage_3 = table.rules["strategy.deepspeed_stage_3"]
    assert (stage_3.file, stage_3.line) == (DEEPSPEED, line_of(text, "deepspeed_stage_3 ="))
    assert [list(c.render()) for c in stage_3.when] == [["`flag.strategy` = 'deepspeed_stage_3'"]]
    assert stage_3.why == "DeepSpeed ZeRO stage 3" and stage_3.priority == 100
    assert "strategy" not in table.rules  # the table itself is not a rule
    assert {"deepspeed_stage_3", "fsdp_cpu_offload"} <= table.domains["strategy_alias"]  # cases_join
    assert {"16", "32", "64", "bf16"} == table.domains["precision_legacy"]


@pytest.mark.parametrize(
    ("flags", "field", "value", "rule"),
    [
        (
            {"strategy": "deepspeed_stage_3_offload"},
            "strategy_options",
            {"stage": 3, "offload_optimizer": True, "offload_parameters": True},
            "strategy.deepspeed_stage_3_offload",
        ),
        ({"strategy": "fsdp_cpu_offload"}, "strategy", "fsdp", "strategy.fsdp_cpu_offload"),
        ({"precision": 16}, "precision", "16-mixed", "precision.legacy.16"),
        ({"precision": "bf16"}, "precision", "bf16-mixed", "precision.legacy.bf16"),
        ({"accelerator": "cuda"}, "device_ids", (0, 1), "devices.cuda.auto"),
    ],
)
def test_builtin_cases_resolve_with_their_case_as_provenance(flags, field, value, rule):
    config = resolve(**flags, environment=GPUS)
    assert getattr(config, field) == value
    assert config.provenance[field].rule == rule


# -- a site file adds an alias ------------------------------------------------------------------


def test_a_site_file_adds_an_alias_with_one_case_line(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(SITE_ALIAS)
    config = resolve(strategy="deepspeed_stage_2_custom", environment=GPUS, rules=[site])
    assert config.strategy == "deepspeed"
    assert dict(config.strategy_options) == {"stage": 2, "allgather_bucket_size": 200000000}
    assert config.provenance["strategy"].rule == "strategy.deepspeed_stage_2_custom"
    assert config.provenance["strategy"].why == "our cluster's ZeRO-2 settings"
    # like the built-in aliases: DeepSpeed's checks apply, and plugins may not carry it
    with pytest.raises(ResolutionError, match="needs the deepspeed package"):
        resolve(strategy="deepspeed_stage_2_custom", environment=Environment(cuda_device_count=2), rules=[site])
    with pytest.raises(ResolutionError, match="passing a strategy through plugins was removed"):
        resolve(plugins=["deepspeed_stage_2_custom"], environment=GPUS, rules=[site])
    # without the site file it is unknown
    with pytest.raises(ResolutionError, match="unknown strategy 'deepspeed_stage_2_custom'"):
        resolve(strategy="deepspeed_stage_2_custom", environment=GPUS)


def test_the_added_alias_is_a_rule_of_the_site_file_and_a_known_flag_value(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(SITE_ALIAS)
    table = compile_sources([*BASE, RuleSource(str(site), SITE_ALIAS)])
    rule = table.rules["strategy.deepspeed_stage_2_custom"]
    assert (rule.file, rule.line) == (str(site), 2)
    assert "deepspeed_stage_2_custom" in table.domains["strategy_flag"]
    with pytest.raises(ResolutionError, match="did you mean 'deepspeed_stage_2_custom'"):
        resolve(strategy="deepspeed_stage_2_custon", environment=GPUS, rules=[site])


def test_cases_may_come_before_their_rule():
    table = compile_sources([RuleSource("site.toml", SITE_ALIAS), *BASE])
    assert table.rules["strategy.deepspeed_stage_2_custom"].file == "site.toml"


def test_explain_shows_the_site_alias_and_its_reason(tmp_path, capsys):
    site = tmp_path / "site.toml"
    site.write_text(
        '[cases."strategy"]\n'
        'my_fsdp_offload = { set = { strategy = "fsdp", strategy_options = { const = { cpu_offload = true, '
        'min_num_params = 1000 } } }, why = "FSDP offloaded to CPU, as our site runs it" }\n'
    )
    argv = ["explain", "--strategy", "my_fsdp_offload", "--devices", "2", "--accelerator", "cpu", "--simulate", ""]
    assert main([*argv, "--rules", str(site)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "rule strategy.my_fsdp_offload: FSDP offloaded to CPU, as our site runs it" in rows["strategy"]
    assert "{cpu_offload=true, min_num_params=1000}" in rows["strategy_options"]
    assert "rule strategy.my_fsdp_offload" in rows["strategy_options"]


def test_a_site_rule_of_its_own_cases(tmp_path):
    """A table of the site's own: its cases are `site.notes.<value>`, and an int slot's cases are integers."""
    site = tmp_path / "site.toml"
    site.write_text(
        textwrap.dedent(
            """
            [[rule]]
            id = "site.notes"
            stage = "planned"
            match = "num_devices"
            when = { accelerator = "cpu" }
            note = "{num_devices} CPU processes"
            cases."3" = {}
            cases."5" = { note = "five CPU processes: our nodes have four cores" }
            """
        )
    )
    assert resolve(devices=3, accelerator="cpu", environment=Environment(), rules=[site]).notes == ("3 CPU processes",)
    config = resolve(devices=5, accelerator="cpu", environment=Environment(), rules=[site])
    assert config.notes == ("five CPU processes: our nodes have four cores",)
    assert resolve(devices=4, accelerator="cpu", environment=Environment(), rules=[site]).notes == ()


def test_cases_of_a_true_or_false_slot():
    table = compile_with(
        '[[rule]]\nid = "site.session"\nstage = "planned"\nmatch = "env.interactive"\n'
        'cases.true = { note = "an interactive session" }\n'
    )
    assert resolve(environment=Environment(interactive=True), rules=table).notes == ("an interactive session",)
    assert resolve(environment=Environment(interactive=False), rules=table).notes == ()


def test_set_of_a_case_adds_to_the_rules_set():
    table = compile_with(
        """
        [[rule]]
        id = "site.alias"
        stage = "planned"
        match = "flag.strategy"
        cases_join = "strategy_alias"
        set = { strategy = "deepspeed" }
        priority = 100
        why = "our DeepSpeed presets"
        cases.zero1_site = { set = { strategy_options = { const = { stage = 1 } } } }
        cases.zero3_site = { set = { strategy_options = { const = { stage = 3 } } }, why = "ZeRO-3 preset" }
        """
    )
    one, three = table.rules["site.alias.zero1_site"], table.rules["site.alias.zero3_site"]
    assert [name for name, _ in one.sets] == ["strategy", "strategy_options"]
    assert (one.why, three.why) == ("our DeepSpeed presets", "ZeRO-3 preset")
    config = resolve(strategy="zero3_site", environment=GPUS, rules=table)
    assert (config.strategy, dict(config.strategy_options)) == ("deepspeed", {"stage": 3})


def test_a_case_adds_its_own_conditions_and_none_answers_a_complete_table():
    table = compile_with(
        """
        [[rule]]
        id = "site.session"
        case_id = "site.{case}.session"
        stage = "planned"
        match = "accelerator"
        cases_complete = true
        when = { "env.interactive" = true }
        note = "an interactive session"
        cases.cuda = { when = { "env.cuda_device_count" = { gt = 1 } }, note = "an interactive session on GPUs" }
        cases.cpu = {}
        cases.mps = { none = "not asked" }
        cases.xla = { none = "not asked" }
        """
    )
    assert "site.mps.session" not in table.rules and "site.cpu.session" in table.rules
    gpus = Environment(interactive=True, cuda_device_count=2)
    assert "an interactive session on GPUs" in resolve(environment=gpus, rules=table).notes
    one_gpu = Environment(interactive=True, cuda_device_count=1)
    assert "an interactive session on GPUs" not in resolve(environment=one_gpu, rules=table).notes


# -- mistakes: each names the file, the rule, the case and the line ------------------------------


def test_a_misspelt_slot_in_a_case_names_the_case_and_suggests():
    error = load_error(
        '[cases."strategy"]\n'
        "# our presets\n"
        'mine = { set = { strategy = "deepspeed", strategy_optons = { const = { stage = 1 } } }, why = "x" }\n'
    )
    assert (error.file, error.rule, error.line) == ("site.toml", "strategy", 3)
    assert "case 'mine': unknown slot 'strategy_optons'; did you mean 'strategy_options' or 'strategy'?" in str(error)


def test_a_misspelt_match_slot_suggests_the_slot():
    error = load_error(
        '[[rule]]\nid = "site.alias"\nstage = "planned"\nmatch = "flag.stratgy"\n'
        'cases.mine = { set = { strategy = "ddp" } }\n'
    )
    assert (error.file, error.rule, error.line) == ("site.toml", "site.alias", 2)
    assert "`match` names unknown slot 'flag.stratgy'; did you mean 'flag.strategy'" in str(error)


def test_a_misspelt_key_of_a_case_suggests_the_key():
    error = load_error(
        '[[rule]]\nid = "site.alias"\nstage = "planned"\nmatch = "flag.strategy"\n'
        'cases.ok = { set = { strategy = "ddp" } }\n'
        'cases.mine = { sett = { strategy = "ddp" } }\n'
    )
    assert (error.file, error.rule, error.line) == ("site.toml", "site.alias", 6)
    assert "unknown key(s) sett (sett: did you mean 'set'?)" in str(error)
    assert "(at cases.mine)" in str(error)


def test_a_case_for_a_misspelt_rule_suggests_the_rule():
    error = load_error('\n[cases."stratgy"]\nmine = { set = { strategy = "ddp" } }\n')
    assert (error.file, error.rule, error.line) == ("site.toml", "stratgy", 3)
    assert "names unknown rule 'stratgy'; did you mean 'strategy'?" in str(error)


@pytest.mark.parametrize(
    ("snippet", "message", "line"),
    [
        # cases for a rule that is not a table
        ('[cases."strategy.explicit"]\nmine = { set = { strategy = "ddp" } }\n', "which has no `match`", 2),
        # a case the built-in table already has
        (
            '[cases."strategy"]\ndeepspeed_stage_3 = { set = { strategy = "ddp" } }\n',
            f"case 'deepspeed_stage_3': given twice (first at {DEEPSPEED}:",
            2,
        ),
        # a case whose rule id another rule has
        ('[cases."strategy"]\nexplicit = { set = { strategy = "ddp" } }\n', "makes the rule id 'strategy.explicit'", 2),
        # the value of a case is a value of the slot
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "num_devices"\nnote = "n"\ncases.two = {}\n',
            "case 'two': `match` slot 'num_devices' holds int, and 'two' is not an integer",
            6,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "strategy"\n'
            'cases.ddpp = { set = { launcher = "spawn" } }\n',
            "case 'ddpp': unknown value 'ddpp' for slot 'strategy'; did you mean 'ddp'?",
            5,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "env.interactive"\nnote = "n"\ncases.yes = {}\n',
            "case 'yes': `match` slot 'env.interactive' holds true or false, not 'yes'",
            6,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\nnote = "n"\ncases." " = {}\n',
            "case ' ': a case is named by a value of the matched slot, not by empty text",
            6,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "device_ids"\nnote = "n"\ncases.x = {}\n',
            "`match` names slot 'device_ids', which holds tuple",
            2,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\ncases_join = "strategy_alais"\n'
            'cases.x = { set = { strategy = "ddp" } }\n',
            "unknown domain 'strategy_alais'; did you mean 'strategy_alias'",
            2,
        ),
        # the shape of the table
        ('[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\nset = { strategy = "ddp" }\n', "no cases", 2),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\ncases.x = { set = { strategy = "ddp" } }\n',
            "`cases` needs `match",
            2,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\nwhen = { "flag.strategy" = "a" }\n'
            'cases.x = { set = { strategy = "ddp" } }\n',
            "`when` tests 'flag.strategy', which `match` gives each case",
            2,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\ncases_join = "strategy_alias"\nset = { strategy = "ddp" }\n',
            "`cases_join` adds the values of `cases` to a domain; it needs `match`",
            2,
        ),
        ('[[rule]]\nid = "r"\nstage = "planned"\nmatch = 5\n', "expected text, got 5 (at match)", 2),
        (
            '[[rule]]\nid = "r"\ncase_id = "r.{case}"\nstage = "planned"\nset = { strategy = "ddp" }\n',
            "`case_id` names the rules made from `cases`; it needs `match`",
            2,
        ),
        (
            '[[rule]]\nid = "r"\ncase_id = "r.case"\nstage = "planned"\nmatch = "flag.strategy"\n'
            'cases.x = { set = { strategy = "ddp" } }\n',
            "`case_id` 'r.case' must hold {case} once",
            2,
        ),
        # a case whose id, made by `case_id`, another rule has
        (
            '[[rule]]\nid = "r"\ncase_id = "strategy.{case}"\nstage = "planned"\nmatch = "flag.strategy"\n'
            'note = "n"\ncases.explicit = {}\n',
            "makes the rule id 'strategy.explicit'",
            7,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "strategy"\n[rule.cases.ddp]\nset = { launcher = 5 }\n',
            "case 'ddp': sets 'launcher' to 5, but the slot holds str",
            5,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\n[rule.cases]\nx = { conflict = "c" }\n',
            "case 'x': a conflict needs a `hint`",
            6,
        ),
        # a case's own `when` adds conditions on other slots; `none` stands alone, in a complete table
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\nwhen = { "env.interactive" = true }\n'
            'note = "n"\ncases.x = { when = { "env.interactive" = false } }\n',
            "case 'x': `when` tests 'env.interactive', which the rule's `when` (or its `match`) tests already",
            7,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\nnote = "n"\n'
            'cases.x = { when = { "flag.strategy" = "y" } }\n',
            "case 'x': `when` tests 'flag.strategy', which the rule's `when` (or its `match`) tests already",
            6,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\nnote = "n"\ncases.x = { none = "no" }\n',
            "case 'x': `none` says why a value has no rule of a `cases_complete` table, and rule 'r' is not one",
            6,
        ),
        (
            '[[rule]]\nid = "r"\nstage = "planned"\nmatch = "flag.strategy"\nnote = "n"\n'
            'cases.x = { none = "no", note = "m" }\n',
            "`none` stands alone (this value has no rule), but the case gives note",
            6,
        ),
    ],
)
def test_table_mistakes_name_the_file_rule_case_and_line(snippet: str, message: str, line: int):
    error = load_error(snippet)
    assert error.file == "site.toml"
    assert message in str(error)
    assert error.line == line


def test_ambiguity_between_a_case_and_another_rule_is_found():
    """The ambiguity check sees each case as a rule: `ddp` at priority 100 is also `strategy.explicit`."""
    error = load_error(
        '[[rule]]\nid = "site.alias"\nstage = "planned"\nmatch = "flag.strategy"\npriority = 100\n'
        'cases.ddp = { set = { strategy = "fsdp" } }\n'
    )
    assert "ambiguous: rules 'site.alias.ddp' and 'strategy.explicit'" in str(error) or (
        "ambiguous: rules 'strategy.explicit' and 'site.alias.ddp'" in str(error)
    )


def test_case_id_names_each_case_rule_and_a_new_cluster_turns_on_the_generic_rank_checks():
    """The rank-range checks are written once (rules/clusters.toml) and named per cluster by their
    `case_id`: a site cluster gives its variables' names and turns a check on with one case line."""
    site = compile_with(
        """
        [domain.cluster]
        values = ["pbs"]

        [[rule]]
        id = "world.pbs"
        stage = "clustered"
        when = { cluster_environment = "pbs" }
        set.world_size = { fn = "to_int", args = ["var.PBS_NP"] }
        set.global_rank = { fn = "to_int", args = ["var.PBS_RANK"] }
        priority = 50
        why = "PBS's variables"

        [cases."cluster.rank_variables"]
        pbs.set."cluster.launcher" = "pbsdsh"
        pbs.set."cluster.rank_variable" = "PBS_RANK"
        pbs.set."cluster.world_variable" = "PBS_NP"

        [cases."ranks.global.too_large"]
        pbs = {}
        """
    )
    rule = site.rules["ranks.pbs.global.too_large"]
    assert rule.file == "site.toml" and "ranks.global.too_large.pbs" not in site.rules
    assert "ranks.slurm.global.too_large" in site.rules  # the built-in clusters' checks keep their ids
    environment = Environment(variables={"PBS_NP": "2", "PBS_RANK": "5"})
    with pytest.raises(ResolutionError) as info:
        resolve(cluster_environment="pbs", devices=2, environment=environment, rules=site)
    assert info.value.rule == "ranks.pbs.global.too_large"
    assert info.value.message.startswith("PBS_RANK=5 is outside the job: ranks run from 0 to PBS_NP-1 (PBS_NP=2)")
    assert "pbsdsh sets PBS_RANK below PBS_NP" in (info.value.hint or "")


def test_a_mistake_in_a_rule_whose_case_is_in_another_file_names_both_files():
    """A case in one file makes a rule of a table written in another: a broken condition of the
    table shows at the case, and the message names the table's file and line too."""
    sources = [
        *BASE,
        RuleSource(
            "table.toml",
            '[[rule]]\nid = "site.ranks"\nstage = "clustered"\nmatch = "cluster_environment"\n'
            'when = { node_rank = { not_in = 5 } }\nnote = "n"\n',
        ),
        RuleSource("case.toml", '[cases."site.ranks"]\nslurm = {}\n'),
    ]
    with pytest.raises(RuleTableError) as info:
        compile_sources(sources)
    assert info.value.file == "case.toml" and info.value.line == 2
    message = "case 'slurm': 'not_in' on 'node_rank' needs a list, not 5 (rule 'site.ranks' is written at table.toml:2)"
    assert message in str(info.value)


def test_the_available_accelerators_follow_the_auto_rules_priorities():
    """The order `auto` tries the accelerators is declared once, by the priorities of the rules
    accelerator.auto.*; the list a hint shows ({ order_of = "accelerator.auto" }) follows it."""
    machine = Environment(cuda_device_count=1, mps_available=True)
    with pytest.raises(ResolutionError) as info:
        resolve(accelerator="xla", environment=machine)
    assert "available: [mps, cuda, cpu]" in (info.value.hint or "")  # xla > mps > cuda > cpu
    site = compile_with(
        """
        [[rule]]
        id = "accelerator.auto.cuda_first"
        stage = "placed"
        when = { "flag.accelerator" = "auto", "env.cuda_device_count" = { gt = 0 } }
        set = { accelerator = "cuda" }
        priority = 50
        why = "this site prefers its CUDA devices"
        """
    )
    assert resolve(environment=machine, rules=site).accelerator == "cuda"
    with pytest.raises(ResolutionError) as info:
        resolve(accelerator="xla", environment=machine, rules=site)
    assert "available: [cuda, mps, cpu]" in (info.value.hint or "")
