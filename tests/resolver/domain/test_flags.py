"""The flags are declared once (resolver/_domain/flags.py); signatures, CLI options, slots and defaults
follow that declaration, and the CLI's help lists values from the loaded table."""

from __future__ import annotations

import inspect

import pytest

import resolver
from resolver._domain.flags import FLAG_DEFAULTS, FLAGS
from resolver.api import builtin_table
from resolver.cli.parser import _parser

FLAG_NAMES = [flag.name for flag in FLAGS]


def _flag_parameters(fn) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.name in FLAG_DEFAULTS]


def test_resolve_takes_exactly_the_declared_flags_with_their_defaults_and_types():
    parameters = _flag_parameters(resolver.resolve)
    assert [p.name for p in parameters] == FLAG_NAMES
    for parameter, flag in zip(parameters, FLAGS, strict=True):
        assert parameter.default == flag.default, flag.name
        assert parameter.annotation == flag.annotation, flag.name


#: What runtime.launch takes beyond the flag: a range of nodes, (MIN, MAX), which resolve() does not (the flag is MAX).
_LAUNCH_WIDER = {"num_nodes": "int | tuple[int, int]"}


def test_runtime_launch_takes_exactly_the_declared_flags():
    runtime = pytest.importorskip("runtime")
    parameters = _flag_parameters(runtime.launch)
    assert [p.name for p in parameters] == FLAG_NAMES
    for parameter, flag in zip(parameters, FLAGS, strict=True):
        annotation = _LAUNCH_WIDER.get(flag.name, flag.annotation)
        assert (parameter.default, parameter.annotation) == (flag.default, annotation), flag.name


def test_every_flag_has_its_input_slot_and_nothing_else_is_an_argument():
    table = builtin_table()
    arguments = {name[len("arg.") :] for name in table.slots if name.startswith("arg.")}
    assert arguments == set(FLAG_NAMES)


def _options(command: str, *, printed: bool = False) -> dict[str, object]:
    """The options of ``command``; ``printed``: after its help was printed (help is written then)."""
    sub = next(a for a in _parser()._actions if a.dest == "command")
    if printed:
        sub.choices[command].format_help()
    return {option: action for action in sub.choices[command]._actions for option in action.option_strings}


@pytest.mark.parametrize("command", ["explain", "run"])
def test_the_cli_has_each_flag_in_both_spellings(command: str):
    options = _options(command)
    for flag in FLAGS:
        spellings = flag.cli_spellings()
        assert all(options[s].dest == flag.name for s in spellings), spellings
        if "_" in (flag.cli_name or flag.name):
            assert len(spellings) == 2  # --num-nodes and --num_nodes


def test_the_cli_help_lists_the_loaded_domains_values():
    options = _options("explain", printed=True)
    for flag in FLAGS:
        help_text = options[flag.cli_spellings()[0]].help
        for domain in flag.listed_domains:
            for value in builtin_table().domains[domain]:
                assert value in help_text, (flag.name, value)
    plugin_help = options["--plugin"].help
    assert "slurm" in plugin_help and "bf16-mixed" in plugin_help and "ddp" not in plugin_help


def test_underscore_spellings_and_new_flags_reach_resolve(capsys):
    from resolver.cli import main

    code = main(
        [
            "explain",
            "--simulate",
            "",
            "--num_nodes",
            "2",
            "--node_rank",
            "1",
            "--master_addr",
            "Host0",
            "--master-port",
            "29501",
            "--cluster_environment",
            "local",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "flag master_addr='Host0'" in out and "flag master_port=29501" in out and "node_rank=1" in out


def test_resolve_reads_each_flag_as_the_flag_it_is():
    """Every flag given at once, each with a value of its own: each is recorded and used under its own name."""
    flags = {
        "accelerator": "cpu",
        "devices": 2,
        "strategy": "ddp",
        "num_nodes": 2,
        "cluster_environment": "local",
        "node_rank": 1,
        "master_addr": "10.0.0.1",
        "master_port": 29501,
    }
    config = resolver.resolve(**flags, plugins=["bf16-mixed"], environment=resolver.Environment())
    assert dict(config.flags) == {**flags, "plugins": ("bf16-mixed",)}
    assert (config.accelerator, config.num_devices, config.strategy, config.precision) == (
        "cpu",
        2,
        "ddp",
        "bf16-mixed",
    )
    assert (config.num_nodes, config.cluster_environment, config.node_rank) == (2, "local", 1)
    assert (config.main_address, config.main_port, config.global_rank, config.world_size) == ("10.0.0.1", 29501, 2, 4)
    assert config.provenance["main_port"].describe().startswith("flag master_port=29501")


def test_runtime_launch_accepts_every_keyword_resolve_takes_with_its_default():
    runtime = pytest.importorskip("runtime")
    launch = inspect.signature(runtime.launch).parameters
    for name, parameter in inspect.signature(resolver.resolve).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue  # removed flags (gpus=...), which resolve() refuses with their replacement
        assert name in launch, f"runtime.launch() does not take {name}=, which resolve() takes"
        assert launch[name].default == parameter.default, name
