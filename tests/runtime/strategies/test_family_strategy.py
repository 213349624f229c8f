"""A site file adds a multi-process strategy to the torch.distributed family with one line, and it
runs: launcher, collective and backend come from the family's rules, 2 real processes over gloo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import resolver

SITE = textwrap.dedent(
    """
    # site.toml: our DDP variant joins the torch.distributed family (and so the strategy domain).
    [domain.torch_distributed_strategy]
    values = ["my_ddp"]
    """
)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import runtime
    from runtime.strategies.ddp import DDPStrategy

    @runtime.register_strategy("my_ddp")
    class MyDDP(DDPStrategy):
        "Our DDP: the same, under our own name."

    def work(strategy):
        total = strategy.collective.all_reduce(__import__("torch").tensor([strategy.global_rank + 1.0]))
        return {"type": type(strategy).__name__, "world": strategy.world_size, "sum": float(total.item())}

    result = runtime.launch(work)
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)
    """
)


def test_one_family_line_makes_a_strategy_resolve_like_ddp(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(SITE)
    config = resolver.resolve(
        strategy="my_ddp", devices=2, accelerator="cpu", environment=resolver.Environment(), rules=[site]
    )
    assert (config.strategy, config.launcher, config.collective, config.process_group_backend) == (
        "my_ddp",
        "subprocess",
        "torch",
        "gloo",
    )
    assert config.provenance["collective"].rule == "collective.torch"


def test_the_family_strategy_runs_with_two_processes(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(SITE)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    command = [
        sys.executable,
        "-m",
        "resolver",
        "run",
        "--rules",
        str(site),
        "--strategy",
        "my_ddp",
        "--devices",
        "2",
        "--accelerator",
        "cpu",
        "--timeout",
        "120",
        str(script),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RESOLVER_CONFIG")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[3]), env.get("PYTHONPATH", "")])
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # ranks share stdout (lines may interleave): take every complete result object
    results = [json.loads(found) for found in re.findall(r"RESULT (\{[^{}]*\})", done.stdout)]
    assert results and all(result == {"type": "MyDDP", "world": 2, "sum": 3.0} for result in results), done.stdout
