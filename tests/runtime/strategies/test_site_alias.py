"""An alias a site file adds with one case line runs: FSDP with the alias's options, 2 real gloo
processes on CPU (the options reach torch's fully_shard, as those of the built-in fsdp_cpu_offload)."""

from __future__ import annotations

import attrs
import pytest
from sharded_workers import wrapped_with

import resolver
import runtime

pytestmark = pytest.mark.timeout(240)

SITE = (
    '[cases."strategy"]\n'
    'my_fsdp_offload = { set = { strategy = "fsdp", strategy_options = { const = { cpu_offload = true, '
    'min_num_params = 1000 } } }, why = "our FSDP: offloaded, only large layers sharded" }\n'
)


def test_a_site_alias_runs_with_its_options(tmp_path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(SITE)
    # this machine, probed (as a user runs it): each rank gets its share of the cores
    config = resolver.resolve(strategy="my_fsdp_offload", devices=2, accelerator="cpu", rules=[site])
    assert config.strategy == "fsdp"
    assert config.provenance["strategy_options"].rule == "strategy.my_fsdp_offload"

    result = runtime.build(attrs.evolve(config, launcher="fork"), timeout=120).launch(wrapped_with)
    assert result["policies"]["offload_policy"] == "CPUOffloadPolicy"
    assert result["units"] == ["", "2"]  # min_num_params=1000: only the 32x32 layer, and the root
    assert result["losses"][-1] < result["losses"][0]
