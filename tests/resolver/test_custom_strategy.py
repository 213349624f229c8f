"""A user adds a strategy without touching the library: a registered class plus a rule file."""

from __future__ import annotations

import textwrap

import attrs
import pytest

import resolver
from resolver.cli import main

runtime = pytest.importorskip("runtime")

RULES = textwrap.dedent(
    """
    # site.toml: our team's strategy, selectable by name.
    [domain.strategy]
    values = ["team_single"]

    [[rule]]
    id = "team.collective"
    stage = "planned"
    when = { strategy = "team_single" }
    set = { collective = "single_device" }
    why = "team_single runs one process"

    [[rule]]
    id = "team.one_device_only"
    stage = "planned"
    when = { strategy = "team_single", num_devices = { gt = 1 } }
    between = ["strategy", "num_devices"]
    conflict = "team_single runs on one device, but {num_devices} were selected"
    hint = "pass devices=1"
    """
)


@attrs.frozen(kw_only=True)
class GreetingOptions(runtime.StrategyOptions):
    greeting: str = "hello"


class TeamSingle(runtime.Strategy):
    """One process, and a greeting to show it is ours."""

    Options = GreetingOptions

    @property
    def greeting(self) -> str:
        return self.options.greeting


@pytest.fixture
def team_rules(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(RULES)
    runtime.register_strategy("team_single", TeamSingle)
    yield path
    from runtime.registry import STRATEGIES

    STRATEGIES.unregister("team_single")


def test_rule_file_selects_the_registered_strategy(team_rules):
    config = resolver.resolve(strategy="Team_Single", environment=resolver.Environment(), rules=[team_rules])
    assert (config.strategy, config.collective, config.launcher) == ("team_single", "single_device", None)
    assert config.provenance["collective"].rule == "team.collective"

    strategy = runtime.build(config, greeting="hi")
    assert type(strategy) is TeamSingle and strategy.greeting == "hi"
    assert strategy.launch(lambda s, x: (s.world_size, x + 1), 41) == (1, 42)


def test_its_own_checks_apply(team_rules):
    with pytest.raises(resolver.ConflictError, match="team_single runs on one device, but 2 were selected"):
        resolver.resolve(strategy="team_single", devices=2, environment=resolver.Environment(), rules=[team_rules])


def test_without_the_rule_file_the_name_is_unknown(capsys):
    with pytest.raises(resolver.ConflictError, match="unknown strategy 'team_single'"):
        resolver.resolve(strategy="team_single", environment=resolver.Environment())


def test_explain_shows_the_site_rule(team_rules, capsys):
    assert main(["explain", "--strategy", "team_single", "--simulate", "", "--rules", str(team_rules)]) == 0
    assert "rule team.collective: team_single runs one process" in capsys.readouterr().out
