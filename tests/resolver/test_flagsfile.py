"""Flags files: resolve(config_file=...) reads the flags from TOML; keywords win; provenance names the file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from resolver import Environment, ResolutionError, resolve
from resolver._engine.errors import ConflictError
from resolver.flagsfile import FLAGS_FILE_KIND, FlagsFile, load_flags_file
from resolver.golden import load_scenario

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
#: Golden scenarios that pass resolve() a value of the wrong Python type on purpose: a flags file
#: refuses these when it is read (naming the file, line and key) instead of resolving them.
WRONG_TYPES = {"devices-boolean", "flags-plugins-not-a-list"}


def write(tmp_path: Path, text: str, name: str = "train.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_the_file_gives_the_flags_and_explain_says_so(tmp_path, gpu_box):
    path = write(tmp_path, '[flags]\nstrategy = "ddp"\ndevices = 2\nprecision = "bf16-mixed"\n')
    config = resolve(config_file=path, environment=gpu_box)
    assert (config.strategy, config.num_devices, config.precision) == ("ddp", 2, "bf16-mixed")
    for field, written in (("strategy", "strategy='ddp'"), ("num_devices", "devices=2"), ("precision", "bf16-mixed")):
        provenance = config.provenance[field]
        assert provenance.kind == FLAGS_FILE_KIND
        assert provenance.source.startswith(f"{path}: ") and written in provenance.source
        assert provenance.describe().startswith(f"flags file {path}: ")


def test_a_keyword_wins_over_the_file(tmp_path, gpu_box):
    path = write(tmp_path, '[flags]\nstrategy = "ddp"\ndevices = 2\n')
    config = resolve(devices=4, config_file=path, environment=gpu_box)
    assert config.num_devices == 4 and config.provenance["num_devices"].kind == "flag"
    assert config.strategy == "ddp" and config.provenance["strategy"].kind == FLAGS_FILE_KIND


def test_a_bare_flags_table_is_accepted(tmp_path, gpu_box):
    path = write(tmp_path, 'strategy = "fsdp"\ndevices = [0, 2]\n')
    config = resolve(config_file=str(path), environment=gpu_box)
    assert (config.strategy, config.device_ids) == ("fsdp", (0, 2))


def test_a_loaded_file_less_some_flags(tmp_path, gpu_box):
    """What the CLI does: flags given on the command line are taken out of the file, even at their default."""
    file = load_flags_file(write(tmp_path, '[flags]\nstrategy = "ddp"\ndevices = 2\n'))
    assert isinstance(file, FlagsFile) and file.flags == {"strategy": "ddp", "devices": 2}
    config = resolve(config_file=file.without(["strategy"]), environment=gpu_box)
    assert config.strategy == "ddp"  # auto: 2 devices give ddp, but decided by the rules now
    assert config.provenance["strategy"].kind == "rule"


def test_a_conflict_names_the_file_as_one_side(tmp_path, gpu_box):
    path = write(tmp_path, '[flags]\nstrategy = "ddp"\n')
    with pytest.raises(ConflictError) as info:
        resolve(config_file=path, environment=Environment(variables={"RESOLVER_STRATEGY": "fsdp"}))
    assert any(side.provenance.kind == FLAGS_FILE_KIND for side in info.value.sides)
    assert str(path) in info.value.diagnostic()


@pytest.mark.parametrize(
    "text, message",
    [
        ('[flags]\nstratgy = "ddp"\n', "train.toml:2: unknown flag 'flags.stratgy'; did you mean 'strategy'?"),
        ('stratgy = "ddp"\n', "train.toml:1: unknown flag 'stratgy'; did you mean 'strategy'?"),
        ("[flags]\nnum-nodes = 2\n", "did you mean 'num_nodes'?"),
        ('[flag]\nstrategy = "ddp"\n', "train.toml:1: unknown flag 'flag'; did you mean 'flags'?"),
        ("[flags]\n[extra]\n", "train.toml:2: unknown key 'extra'"),
        (
            "[flags]\nnum_nodes = 1.5\n",
            "train.toml:2: flags.num_nodes = 1.5 has the wrong type; num_nodes takes an integer or text",
        ),
        (
            "[flags]\ndevices = true\n",
            "flags.devices = True has the wrong type; devices takes an integer, text or a list of values",
        ),
        # what a device list may hold is parse_devices' rule, as for resolve(devices=["0"])
        ('[flags]\ndevices = ["0"]\n', "devices=['0'] holds '0', which is text: a list of device ids holds integers"),
        ("[flags]\nplugins = 5\n", "plugins takes text or a list of texts"),
        ("flags = 5\n", "train.toml:1: `flags` must be a table"),
        ("[flags]\ngpus = 2\n", "train.toml:2: flags.gpus: gpus=2 was removed"),
        ("[flags\n", "train.toml: malformed TOML"),
    ],
)
def test_mistakes_in_the_file_name_the_file_line_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ResolutionError) as info:
        resolve(config_file=path, environment=Environment())
    assert message in info.value.message
    assert info.value.hint


@pytest.mark.parametrize("wrong", [5, ["a.toml"], b"train.toml"])
def test_a_config_file_that_is_not_a_path_is_a_resolution_error(wrong):
    with pytest.raises(ResolutionError, match="is not a path"):
        resolve(config_file=wrong, environment=Environment())


def test_a_file_that_is_not_there_or_a_folder(tmp_path):
    with pytest.raises(ResolutionError, match="cannot read flags file .*missing.toml"):
        resolve(config_file=tmp_path / "missing.toml", environment=Environment())
    with pytest.raises(ResolutionError, match="is a folder"):
        resolve(config_file=tmp_path, environment=Environment())
    (tmp_path / "latin1.toml").write_bytes(b'strategy = "\xe9"\n')
    with pytest.raises(ResolutionError, match="not UTF-8"):
        resolve(config_file=tmp_path / "latin1.toml", environment=Environment())


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.toml")), ids=lambda p: p.stem)
def test_every_golden_scenario_is_a_flags_file(path):
    """Its [flags] resolve through config_file= exactly as through keywords (description etc. skipped)."""
    scenario = load_scenario(path)
    if path.stem in WRONG_TYPES:
        with pytest.raises(ResolutionError, match="has the wrong type"):
            load_flags_file(path)
        return

    def outcome(**flags):
        try:
            return resolve(**flags, environment=scenario.environment)
        except ResolutionError as error:
            return (type(error), error.rule, error.message)

    assert outcome(config_file=path) == outcome(**scenario.flags)
