"""Launchers start the ranks, bring rank 0's result back, and leave no process behind."""

from __future__ import annotations

import importlib.machinery
import json
import os
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from runtime_configs import ddp_config
from runtime_workers import (
    fail_on_rank,
    gather_identities,
    hang_on_rank,
    process_is_gone,
    recorded_pids,
    return_rank_tensor,
)

import runtime
from runtime.cluster import LocalEnvironment
from runtime.launchers import SpawnLauncher
from runtime.launchers.subprocess import script_command

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "launch_ranks.py"

pytestmark = pytest.mark.timeout(120)


def test_spawn_returns_rank_0s_result_to_the_caller() -> None:
    result = runtime.build(ddp_config(2, launcher="spawn"), timeout=60).launch(return_rank_tensor, 2.0)
    assert result["rank"] == 0
    assert torch.equal(result["tensor"], torch.tensor([0.0, 2.0, 4.0]))
    assert not result["process"].startswith(f"{os.getpid()}:") and process_is_gone(result["process"])


def test_fork_ranks_see_torchrun_variables_and_their_own_config() -> None:
    identities = runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(gather_identities)

    for rank, seen in enumerate(identities):
        assert (seen["global_rank"], seen["local_rank"], seen["config_rank"]) == (rank, rank, rank)
        assert seen["world_size"] == 2
        assert seen["env"] == {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "NODE_RANK": "0",
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
        }
    assert "RANK" not in os.environ and "MASTER_PORT" not in os.environ  # the caller's environment is untouched


def test_fork_runs_closures() -> None:
    offset = 40
    assert runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(lambda s: s.world_size + offset) == 42


def test_spawn_explains_that_the_function_must_be_picklable() -> None:
    with pytest.raises(TypeError, match="define .* at module level"):
        runtime.build(ddp_config(2, launcher="spawn"), timeout=60).launch(lambda s: None)


def test_a_failing_rank_raises_in_the_caller_with_its_traceback_and_no_rank_survives(tmp_path: Path) -> None:
    strategy = runtime.build(ddp_config(2, launcher="spawn"), timeout=60)

    with pytest.raises(runtime.RankFailedError) as error:
        strategy.launch(fail_on_rank, 1, str(tmp_path))

    assert error.value.rank == 1
    assert "ValueError: rank 1 cannot go on: bad batch 42" in str(error.value)
    assert "in fail_on_rank\n    raise ValueError" in error.value.traceback
    pids = recorded_pids(tmp_path)
    assert len(pids) == 2 and all(process_is_gone(pid) for pid in pids)


def test_a_hanging_rank_is_stopped_at_the_timeout_and_named(tmp_path: Path) -> None:
    strategy = runtime.build(ddp_config(2, launcher="fork"), timeout=3)
    start = time.monotonic()

    with pytest.raises(runtime.LaunchTimeoutError) as error:
        strategy.launch(hang_on_rank, 1, str(tmp_path))

    assert time.monotonic() - start < 15
    assert isinstance(error.value, TimeoutError)
    assert error.value.ranks == (1,)
    assert str(error.value).startswith("rank 1 did not finish within the 3 s launch timeout")
    assert "hang_on_rank" in error.value.stacks[1]  # where it was stuck
    assert all(process_is_gone(pid) for pid in recorded_pids(tmp_path))


def test_a_busy_master_port_is_an_error_naming_the_port_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        monkeypatch.setenv("MASTER_PORT", str(port))  # read by the resolver, as master_port
        with pytest.raises(runtime.PortInUseError) as error:
            runtime.launch(gather_identities, accelerator="cpu", devices=2, strategy="ddp_fork")
    message = str(error.value)
    assert f"port {port} on 127.0.0.1 (from MASTER_PORT) is already in use" in message
    assert "set MASTER_PORT to a free port, or unset it" in message


def test_without_master_port_a_free_port_is_picked_per_launch() -> None:
    config = ddp_config(2, launcher="fork")
    ports = {LocalEnvironment(config).main_port for _ in range(3)}
    assert len(ports) >= 2  # fresh picks, so two launches do not collide


def test_inside_a_launched_rank_a_launcher_runs_the_function_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ddp_config(2, launcher="spawn", global_rank=1, local_rank=1)
    monkeypatch.setenv("RESOLVER_CONFIG", config.to_json())
    launcher = SpawnLauncher(config, LocalEnvironment(config))
    assert launcher.launch(os.getpid) == os.getpid()
    assert runtime.launched_config() == config


def test_a_launched_rank_decodes_its_config_as_the_configs_own_codec_does() -> None:
    import resolver

    config = resolver.resolve(devices=2, strategy="ddp", master_port=29123, environment=resolver.Environment())
    text = config.to_json()
    launched = runtime.launched_config({"RESOLVER_CONFIG": text})
    assert launched == resolver.ResolvedConfig.from_json(text) == config
    assert launched is not None and dict(launched.provenance) == dict(config.provenance)
    assert launched.to_json() == text
    with pytest.raises(ValueError, match="RESOLVER_CONFIG is set but does not hold a resolved config"):
        runtime.launched_config({"RESOLVER_CONFIG": '{"accelerator": "cpu"}'})


def run_script(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "RESOLVER_CONFIG"},
    )


def test_the_subprocess_launcher_reruns_the_script_as_rank_1(tmp_path: Path) -> None:
    done = run_script(str(tmp_path), "identities")

    assert done.returncode == 0, done.stderr
    assert done.stdout.count("script started") == 2  # the script ran top to bottom in each rank
    identities = json.loads(done.stdout.split("IDENTITIES ", 1)[1])
    assert [(i["global_rank"], i["env"]["RANK"], i["config_rank"]) for i in identities] == [(0, "0", 0), (1, "1", 1)]
    assert identities[0]["pid"] != identities[1]["pid"]


def test_the_subprocess_launcher_reports_a_failing_child_and_stops_everything(tmp_path: Path) -> None:
    done = run_script(str(tmp_path), "fail")

    assert done.returncode != 0
    assert "RankFailedError: rank 1 failed" in done.stderr
    assert "ValueError: rank 1 cannot go on: bad batch 42" in done.stderr
    pids = recorded_pids(tmp_path)
    assert len(pids) == 2 and all(process_is_gone(pid) for pid in pids)


def test_the_subprocess_launcher_stops_a_hanging_child_at_the_timeout(tmp_path: Path) -> None:
    # The timeout covers start-up too: long enough for both ranks to start on a loaded machine (a
    # rank 0 still starting at the deadline is named as well, as it would be under ddp_spawn).
    done = run_script(str(tmp_path), "hang", "15")

    assert done.returncode != 0
    assert "LaunchTimeoutError: rank 1 did not finish within the 15 s launch timeout" in done.stderr
    assert all(process_is_gone(pid) for pid in recorded_pids(tmp_path))


def test_the_subprocess_launcher_reruns_the_same_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.setattr(sys, "argv", [str(script), "--epochs", "3"])
    assert script_command() == [sys.executable, str(script), "--epochs", "3"]

    module_main = types.ModuleType("__main__")
    module_main.__spec__ = importlib.machinery.ModuleSpec("trainer.__main__", None)
    monkeypatch.setitem(sys.modules, "__main__", module_main)
    assert script_command() == [sys.executable, "-m", "trainer", "--epochs", "3"]


def test_the_subprocess_launcher_needs_a_script_to_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.setattr(sys, "argv", ["-c"])
    with pytest.raises(runtime.RuntimeConfigError, match="(?s)not started from a script file.*'ddp_fork'"):
        runtime.build(ddp_config(2, launcher="subprocess")).launch(gather_identities)


def test_the_process_group_is_really_gone_after_a_ddp_run() -> None:
    # torch.distributed.nn.functional binds group.WORLD as a default argument when imported; if DDP
    # imports it while the group exists, the group (and its gloo threads) outlives teardown, and
    # those threads can abort the process at exit.
    done = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "ddp_leftovers.py")],
        capture_output=True,
        text=True,
        timeout=90,
        env={k: v for k, v in os.environ.items() if k != "RESOLVER_CONFIG"},
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("GLOO-THREADS"))
    assert line.endswith("after=0") and "during=0" not in line


def test_a_worker_that_reaches_another_launch_first_fails_fast_instead_of_hanging(tmp_path: Path) -> None:
    done = run_script(str(tmp_path), "two_launches")
    assert done.returncode != 0
    assert "SPAWN 2" in done.stdout
    assert "rank 1 failed" in done.stderr
    assert "reached launch(devices=2, strategy='ddp_fork') first" in done.stderr


def test_a_worker_that_never_reaches_launch_fails_fast_instead_of_hanging(tmp_path: Path) -> None:
    done = run_script(str(tmp_path), "skip_launch")
    assert done.returncode != 0
    assert "rank 1 exited before reaching this launch() call" in done.stderr


def rank_threads_seen(strategy: runtime.Strategy) -> list[tuple[int, str | None]]:
    """Every rank's intra-op thread count and OMP_NUM_THREADS, by rank."""
    return strategy.collective.all_gather_object((torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")))


@pytest.mark.parametrize("launcher", ["fork", "spawn"])
def test_each_rank_runs_with_the_resolved_threads_per_rank(launcher: str) -> None:
    before = torch.get_num_threads()
    config = ddp_config(2, launcher=launcher, threads_per_rank=1)
    assert runtime.build(config, timeout=60).launch(rank_threads_seen) == [(1, "1"), (1, "1")]
    assert torch.get_num_threads() == before  # the caller's own setting is untouched


def test_the_num_threads_option_overrides_threads_per_rank() -> None:
    config = ddp_config(2, launcher="fork", threads_per_rank=1)
    assert runtime.build(config, timeout=60, num_threads=2).launch(rank_threads_seen) == [(2, "2"), (2, "2")]
    with pytest.raises(runtime.RuntimeConfigError, match="num_threads must be at least 1"):
        runtime.build(config, num_threads=0)


def test_threads_per_rank_is_resolved_from_the_cores_and_shown_by_explain() -> None:
    import resolver

    environment = resolver.Environment(cpu_count=8)
    config = resolver.resolve(accelerator="cpu", devices=4, strategy="ddp", environment=environment)
    assert config.threads_per_rank == 2
    assert "8 CPU core(s) shared by 4 local rank(s)" in config.provenance["threads_per_rank"].describe()
    explained = subprocess.run(
        [sys.executable, "-m", "resolver", "explain", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OMP_NUM_THREADS": "3"},
    )
    assert explained.returncode == 0, explained.stderr
    line = next(line for line in explained.stdout.splitlines() if line.startswith("threads_per_rank"))
    assert line.split()[1] == "3" and "variable OMP_NUM_THREADS=3" in line


WORKER_IMPORTS = """
import json, sys
import runtime

def loaded(strategy):
    # No graph library, no rule-file structuring; no rule table loaded or compiled.
    rule_engine = ("networkx", "cattrs", "tomli_w")
    engine_modules = (
        "resolver._engine.schema", "resolver.api", "resolver._domain.rule_tables", "resolver._engine.evaluator",
        "resolver._engine.compiled", "resolver._store.cache",
    )
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in rule_engine or m in engine_modules)
    tables = sys.modules.get("resolver._domain.rule_tables")
    evaluator = getattr(tables, "_builtin_evaluator", None)
    if evaluator is not None and hasattr(evaluator, "cache_info") and evaluator.cache_info().currsize:
        loaded.append("the built-in rule table")
    return loaded

print("LOADED " + json.dumps(runtime.launch(loaded, accelerator="cpu", devices=1, strategy="ddp", timeout=60)))
"""


def test_a_worker_that_receives_a_resolved_config_loads_no_rule_engine(tmp_path: Path) -> None:
    import resolver
    from runtime._protocol.ports import find_free_port
    from runtime._protocol.rank_environment import rank_variables

    # What the launching process of `runtime.launch(loaded, accelerator="cpu", devices=1, strategy="ddp")`
    # hands a worker: its config, which records those flags (a fresh interpreter, as the subprocess
    # launcher starts).
    config = resolver.resolve(accelerator="cpu", devices=1, strategy="ddp", environment=resolver.Environment())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESOLVER_", "RUNTIME_"))}
    env.update(rank_variables(config, "127.0.0.1", find_free_port()))
    script = tmp_path / "worker.py"
    script.write_text(WORKER_IMPORTS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90, env=env)

    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED "))
    assert json.loads(line.removeprefix("LOADED ")) == []
