"""Did you mean: one helper (resolver._engine.suggest), and each place that refuses an unknown name uses it."""

from __future__ import annotations

import textwrap

import pytest

from resolver import ConflictError, Environment, ResolutionError, RuleTableError, resolve
from resolver._engine.suggest import closest, did_you_mean
from resolver._engine.table import RuleSource, read_sources
from resolver.api import builtin_rules_dir, compile_sources
from resolver.cli.simulate import simulate

BASE = read_sources([builtin_rules_dir()])


def load_error(extra: str) -> RuleTableError:
    with pytest.raises(RuleTableError) as info:
        compile_sources([*BASE, RuleSource("extra.toml", textwrap.dedent(extra))])
    return info.value


# -- the helper -----------------------------------------------------------------------------------


def test_closest_finds_typos_best_first_and_ignores_case():
    assert closest("dpp", ["ddp", "fsdp", "deepspeed", "xla"]) == ["ddp"]
    assert closest("fdsp", ["ddp", "fsdp", "deepspeed"])[0] == "fsdp"
    assert closest("DDP_SPAWM", ["ddp_spawn", "ddp_fork"]) == ["ddp_spawn"]
    assert closest("zzzz", ["ddp", "fsdp"]) == []
    assert closest("", ["ddp"]) == []
    assert closest("x", []) == []


def test_dotted_names_match_on_their_last_part_too():
    slots = [f"slot{i}.unrelated" for i in range(300)] + ["arg.strategy", "strategy"]
    found = closest("flag.stratgy", slots)
    assert "arg.strategy" in found and "strategy" in found


def test_did_you_mean_wording():
    assert did_you_mean("dpp", ["ddp"]) == "did you mean 'ddp'?"
    assert did_you_mean("16-mixd", ["16-mixed", "bf16-mixed"]) == "did you mean '16-mixed' or 'bf16-mixed'?"
    assert did_you_mean("--stratgy", ["--strategy"], quote=False) == "did you mean --strategy?"
    assert did_you_mean("zzzz", ["ddp"]) == ""


# -- flag values (the rules call the helper through the did_you_mean function) --------------------


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"strategy": "dpp"}, "unknown strategy 'dpp' (did you mean 'ddp'?)"),
        ({"accelerator": "gpuu"}, "unknown accelerator 'gpuu' (did you mean 'gpu'?)"),
        ({"precision": "bf16-mixd"}, "unknown precision 'bf16-mixd' (did you mean 'bf16-mixed'"),
        ({"cluster_environment": "slrum"}, "unknown cluster environment 'slrum' (did you mean 'slurm'?)"),
        ({"plugins": ["slrum"]}, "unknown plugin 'slrum' (did you mean 'slurm'?)"),
    ],
)
def test_an_unknown_flag_value_names_the_closest(flags, message):
    with pytest.raises(ConflictError) as info:
        resolve(**flags, environment=Environment())
    assert message in info.value.message


def test_an_override_variable_gets_the_suggestion_too():
    with pytest.raises(ConflictError) as info:
        resolve(environment=Environment(variables={"RESOLVER_STRATEGY": "fsdpp"}))
    assert "did you mean 'fsdp'?" in info.value.message


def test_a_value_close_to_nothing_gets_no_suggestion():
    with pytest.raises(ConflictError) as info:
        resolve(strategy="qqqqqq", environment=Environment())
    assert info.value.message == "unknown strategy 'qqqqqq'"
    assert "choose one of: auto, ddp" in (info.value.hint or "")


# -- --simulate tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, suggestion",
    [
        ("cdua=2", "did you mean 'cuda'?"),
        ("slurn,nodes=2", "did you mean 'slurm'?"),
        ("torchrum=4", "did you mean 'torchrun'?"),
        ("cuda_device_cuont=3", "'cuda_device_count'"),
    ],
)
def test_an_unknown_simulate_token_names_the_closest(spec, suggestion):
    with pytest.raises(ResolutionError) as info:
        simulate(spec)
    assert info.value.message.startswith("--simulate: unknown token")
    assert suggestion in info.value.message


# -- rule files -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "slot, expected",
    [
        ("stratgy", "'strategy'"),  # a bare name: the last-part match of old never found this
        ("flag.stratgy", "'flag.strategy'"),
        ("arg.num_node", "'arg.num_nodes'"),
    ],
)
def test_an_unknown_slot_in_a_rule_names_the_closest(slot, expected):
    error = load_error(
        f"""
        [[rule]]
        id = "my.rule"
        stage = "normalized"
        when = {{ "{slot}" = "ddp" }}
        note = "typo"
        """
    )
    assert f"unknown slot '{slot}'; did you mean {expected}" in str(error)
    assert error.rule == "my.rule"


def test_an_unknown_key_in_a_rule_names_the_closest():
    error = load_error(
        """
        [[rule]]
        id = "my.rule"
        stage = "normalized"
        wehn = { strategy = "ddp" }
        """
    )
    assert "unknown key(s) wehn (wehn: did you mean 'when'?)" in str(error)


def test_an_unknown_key_in_a_slot_declaration_names_the_closest():
    error = load_error(
        """
        [slot."my.slot"]
        stge = "normalized"
        """
    )
    assert "stge: did you mean 'stage'?" in str(error)


def test_unknown_stage_operator_and_value_name_the_closest():
    stage = load_error('[[rule]]\nid = "r"\nstage = "planed"\nnote = "x"\n')
    assert "unknown stage 'planed'; did you mean 'planned'" in str(stage)
    operator = load_error(
        '[[rule]]\nid = "r"\nstage = "normalized"\nwhen = { strategy = { ne_ = "ddp" } }\nnote = "x"\n'
    )
    assert "did you mean 'ne'" in str(operator)
    value = load_error('[[rule]]\nid = "r"\nstage = "normalized"\nwhen = { "flag.strategy" = "dpp" }\nnote = "x"\n')
    assert "unknown value 'dpp' for slot 'flag.strategy'; did you mean 'ddp'?" in str(value)
