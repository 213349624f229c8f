"""Runs that survive: restarts after a rank dies, resuming from the newest complete checkpoint.

Real processes throughout: ``resolver run --max-restarts`` on a training script whose rank is
``SIGKILL``-ed, and ``runtime.launch(..., max_restarts=...)`` under each local launcher. ``TMPDIR``
points at an empty folder so that a report folder left behind shows, and every rank of every
attempt records its process, which must be gone at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from runtime_configs import ddp_config
from runtime_workers import process_is_gone, recorded_pids

import resolver
import runtime
from runtime.checkpoint import COMPLETE_MARKER, TorchCheckpointIO, latest_checkpoint
from runtime.cluster.base import ClusterEnvironment
from runtime.registry import CLUSTER_ENVIRONMENTS

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TRAINING = SCRIPTS / "resume_training.py"

pytestmark = pytest.mark.timeout(280)


def environment(tmp: Path, **extra: str) -> dict[str, str]:
    drop = {"RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK",
            "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"}  # fmt: skip
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TMPDIR": str(tmp), **extra}


def resolver_run(tmp_path: Path, name: str, *arguments: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``resolver run ARGUMENTS`` with an out folder (the last argument's ``{out}``) and an empty TMPDIR."""
    out, tmp = tmp_path / name, tmp_path / f"{name}-tmp"
    out.mkdir()
    tmp.mkdir()
    command = [sys.executable, "-m", "resolver", "run", *(a.replace("{out}", str(out)) for a in arguments)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment(tmp))
    assert list(tmp.iterdir()) == [], "a report folder was left behind"
    assert all(process_is_gone(pid) for pid in recorded_pids(out)), "a rank outlived the run"
    return done, out


def same_weights(first: Path, second: Path) -> bool:
    a, b = torch.load(first / "final.pt"), torch.load(second / "final.pt")
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", pytest.param("deepspeed", marks=pytest.mark.deepspeed)])
def test_a_rank_killed_mid_epoch_is_restarted_and_the_run_ends_with_the_weights_of_a_run_without_the_fault(
    strategy: str, tmp_path: Path
) -> None:
    if strategy == "deepspeed":
        pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")
    flags = ("--accelerator", "cpu", "--devices", "2", "--strategy", strategy)
    clean, clean_out = resolver_run(tmp_path, "clean", *flags, str(TRAINING), "{out}")
    faulty, faulty_out = resolver_run(tmp_path, "faulty", *flags, "--max-restarts", "2", str(TRAINING), "{out}", "1:2")

    assert clean.returncode == 0, clean.stderr
    assert faulty.returncode == 0, faulty.stderr
    assert "resolver run: rank 1 failed (exit code -9): killed by signal 9" in faulty.stderr
    assert "restarting every local rank (restart 1 of 2" in faulty.stderr
    assert (faulty_out / "died").exists()
    assert sorted(p.name for p in faulty_out.glob("pid-1-*")) == ["pid-1-0", "pid-1-1"]  # a second attempt ran
    assert same_weights(clean_out, faulty_out)


def test_under_torchrun_max_restarts_a_restarted_rank_meets_its_own_attempt_not_the_dead_one(tmp_path: Path) -> None:
    # torchrun's agent keeps its store across restarts: each attempt's rendezvous keys have their own prefix.
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file():
        pytest.skip("torchrun is not installed next to this interpreter")
    outs = []
    for name, kill in (("clean", ()), ("faulty", ("1:2",))):
        out, tmp = tmp_path / name, tmp_path / f"{name}-tmp"
        out.mkdir()
        tmp.mkdir()
        command = [str(torchrun), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", str(TRAINING),
                   str(out), *kill]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=240,
                              env=environment(tmp, RESUME_STRATEGY="ddp"))  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert all(process_is_gone(pid) for pid in recorded_pids(out)), "a rank outlived the run"
        outs.append(out)
    assert (outs[1] / "died").exists() and (outs[1] / "first-step-1").exists()
    assert same_weights(*outs)


@pytest.mark.parametrize("strategy", ["ddp", pytest.param("deepspeed", marks=pytest.mark.deepspeed)])
def test_a_rank_killed_while_writing_a_checkpoint_leaves_the_previous_one_to_resume_from(
    strategy: str, tmp_path: Path
) -> None:
    # ddp: rank 0 writes one file (half written when it dies); deepspeed: rank 1 dies in its partition.
    if strategy == "deepspeed":
        pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")
    flags = ("--accelerator", "cpu", "--devices", "2", "--strategy", strategy)
    cut, cut_out = resolver_run(tmp_path, "cut", *flags, str(TRAINING), "{out}", "save:1")

    assert cut.returncode == 137, cut.stderr
    folder = cut_out / "checkpoints"
    assert latest_checkpoint(folder) == folder / "epoch-0"  # the cut-short epoch-1 is not taken
    if strategy == "ddp":
        assert [p.name for p in folder.glob(".epoch-1.*.partial")]  # the half-written file, hidden
        assert set(TorchCheckpointIO().load(folder / "epoch-0")) == {"model", "optimizer", "epoch"}
    else:
        assert not (folder / "epoch-1" / COMPLETE_MARKER).exists()

    clean, clean_out = resolver_run(tmp_path, "clean", *flags, str(TRAINING), "{out}")
    resumed, resumed_out = resolver_run(tmp_path, "resumed", *flags, "--max-restarts", "1", str(TRAINING), "{out}",
                                        "save:1")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert same_weights(clean_out, resumed_out)
    assert not list((resumed_out / "checkpoints").glob(".*.partial"))  # the rewrite removed the stale part


def test_the_last_failure_is_the_one_a_run_without_restarts_reports(tmp_path: Path) -> None:
    script = tmp_path / "always_dies.py"
    script.write_text(
        "import os, signal\n"
        "print('attempt', os.environ['TORCHELASTIC_RESTART_COUNT'], 'of', os.environ['TORCHELASTIC_MAX_RESTARTS'],"
        " 'rank', os.environ['RANK'], flush=True)\n"
        "if os.environ['RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done, _ = resolver_run(tmp_path, "out", "--accelerator", "cpu", "--devices", "2", "--max-restarts", "2",
                           str(script))  # fmt: skip

    assert done.returncode == 137, done.stderr
    assert done.stderr.count("rank 1 failed (exit code -9)") == 3  # each restart's cause, then the last
    assert "restart 2 of 2" in done.stderr and "restart 3" not in done.stderr
    assert done.stderr.strip().splitlines()[-2] == "resolver run: rank 1 failed (exit code -9): killed by signal 9"
    for attempt in range(3):
        assert f"attempt {attempt} of 2 rank 0" in done.stdout


def test_resolver_run_restarts_a_rank_that_raised_a_checkpoint_exception(tmp_path: Path) -> None:
    script = tmp_path / "checkpointing.py"
    script.write_text(
        "import runtime\n"
        "from torch.distributed.checkpoint.api import CheckpointException\n\n"
        "def work(strategy):\n"
        "    if strategy.global_rank == 1 and strategy.restart_count == 0:\n"
        "        raise CheckpointException('could not save epoch-1', {1: OSError('disk quota exceeded')})\n"
        "    strategy.collective.barrier()\n"
        "    print('attempt', strategy.restart_count, 'rank', strategy.global_rank, 'done', flush=True)\n\n"
        "runtime.launch(work)\n"
    )
    done, _ = resolver_run(tmp_path, "out", "--accelerator", "cpu", "--devices", "2", "--max-restarts", "1",
                           str(script))  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert ("resolver run: rank 1 failed (exit code 1): torch.distributed.checkpoint.api.CheckpointException: "
            "('could not save epoch-1', {1: OSError('disk quota exceeded')})") in done.stderr  # fmt: skip
    assert "restarting every local rank (restart 1 of 1" in done.stderr
    assert "attempt 1 rank 0 done" in done.stdout and "attempt 1 rank 1 done" in done.stdout


def run_launch(tmp_path: Path, strategy: str, max_restarts: int, failures: int, **env: str) -> dict[str, object]:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    command = [sys.executable, str(SCRIPTS / "restart_script.py"), strategy, str(max_restarts), str(failures), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment(tmp, **env))
    lines = [line for line in done.stdout.splitlines() if line.startswith("OUTCOME ")]
    assert len(lines) == 1, done.stdout + done.stderr
    assert list(tmp.iterdir()) == [], "a report folder was left behind"
    assert all(process_is_gone(pid) for pid in recorded_pids(out)), "a rank outlived the run"
    outcome: dict[str, object] = json.loads(lines[0][len("OUTCOME ") :])
    outcome["stderr"] = done.stderr
    outcome["attempts"] = sorted(p.name for p in out.glob("pid-*"))
    return outcome


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp_fork"])
def test_launch_restarts_every_rank_and_returns_rank_0s_result_of_the_attempt_that_succeeded(
    strategy: str, tmp_path: Path
) -> None:
    outcome = run_launch(tmp_path, strategy, max_restarts=2, failures=1)

    assert outcome.get("result") == {"attempt": 1, "variable": "1", "sum": 3.0}, outcome
    assert "launch: rank 1 failed (exit code -9)" in str(outcome["stderr"])
    assert "restarting every local rank (restart 1 of 2" in str(outcome["stderr"])
    assert outcome["attempts"] == ["pid-0-0", "pid-0-1", "pid-1-0", "pid-1-1"]


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_launch_raises_todays_error_once_the_restarts_run_out(strategy: str, tmp_path: Path) -> None:
    outcome = run_launch(tmp_path, strategy, max_restarts=1, failures=5)

    assert (outcome.get("error"), outcome["rank"], outcome["exit_code"]) == ("RankFailedError", 1, -9), outcome
    assert str(outcome["stderr"]).count("restarting every local rank") == 1
    assert outcome["attempts"] == ["pid-0-0", "pid-0-1", "pid-1-0", "pid-1-1"]


# torch's CheckpointException derives from BaseException, not Exception: rank 0 of ``ddp`` raises it in the
# launching process itself, the other cases in a rank process.
@pytest.mark.parametrize(("strategy", "rank"), [("ddp", 0), ("ddp", 1), ("ddp_spawn", 1), ("ddp_fork", 0)])
def test_a_checkpoint_exception_is_a_rank_failure_and_is_restarted_like_any_other(
    strategy: str, rank: int, tmp_path: Path
) -> None:
    outcome = run_launch(tmp_path, strategy, max_restarts=1, failures=1, RESTART_SCRIPT_FAULT=f"checkpoint@{rank}")

    assert outcome.get("result") == {"attempt": 1, "variable": "1", "sum": 3.0}, outcome
    stderr = str(outcome["stderr"])
    assert f"launch: rank {rank} failed" in stderr
    assert f"CheckpointException: ('could not save epoch-1', {{{rank}: OSError('disk quota exceeded')}})" in stderr
    assert "restarting every local rank (restart 1 of 1" in stderr
    assert outcome["attempts"] == ["pid-0-0", "pid-0-1", "pid-1-0", "pid-1-1"]


def test_a_checkpoint_exception_in_the_launching_process_is_raised_as_its_rank_failure_once_restarts_run_out(
    tmp_path: Path,
) -> None:
    outcome = run_launch(tmp_path, "ddp", max_restarts=1, failures=5, RESTART_SCRIPT_FAULT="checkpoint@0")

    assert (outcome.get("error"), outcome["rank"], outcome["exit_code"]) == ("RankFailedError", 0, None), outcome
    assert str(outcome["message"]).startswith("rank 0 failed: torch.distributed.checkpoint.api.CheckpointException:")
    assert str(outcome["stderr"]).count("restarting every local rank") == 1


def test_ctrl_c_in_the_launching_process_still_stops_the_run_without_a_restart(tmp_path: Path) -> None:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    command = [sys.executable, str(SCRIPTS / "restart_script.py"), "ddp", "2", "1", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment(tmp, RESTART_SCRIPT_FAULT="sleep@0"))  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("pid-0-*"))) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        time.sleep(0.5)  # rank 0 (this process) sleeps, rank 1 waits for it in the barrier
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGINT, stderr
    assert "KeyboardInterrupt" in stderr
    assert "restarting" not in stderr and "rank 0 failed" not in stderr
    assert sorted(p.name for p in out.glob("pid-*")) == ["pid-0-0", "pid-0-1"]
    assert all(process_is_gone(pid) for pid in recorded_pids(out)), "a rank outlived the run"
    assert list(tmp.iterdir()) == [], "a report folder was left behind"


def test_a_timeout_is_not_restarted(tmp_path: Path) -> None:
    outcome = run_launch(tmp_path, "ddp_spawn", max_restarts=2, failures=1,
                         RESTART_SCRIPT_HANG="1", RESTART_SCRIPT_TIMEOUT="20")  # fmt: skip

    assert (outcome.get("error"), outcome["rank"]) == ("LaunchTimeoutError", None), outcome
    assert "restarting" not in str(outcome["stderr"])
    assert outcome["attempts"] == ["pid-0-0", "pid-0-1"]


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_sigterm_to_the_launching_process_stops_everything_at_once_without_a_restart(
    strategy: str, tmp_path: Path
) -> None:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    command = [sys.executable, str(SCRIPTS / "restart_script.py"), strategy, "2", "1", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment(tmp, RESTART_SCRIPT_HANG="1"))  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / "pid-0-1").exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        time.sleep(0.5)  # rank 1 is in its sleep, rank 0 waits for it in the barrier
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, stderr
    assert "restarting" not in stderr
    assert sorted(p.name for p in out.glob("pid-*")) == ["pid-0-0", "pid-0-1"]
    assert all(process_is_gone(pid) for pid in recorded_pids(out)), "a rank outlived the run"
    assert list(tmp.iterdir()) == [], "a report folder was left behind"


def test_under_torchrun_max_restarts_is_torchruns_to_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"TORCHELASTIC_RUN_ID": "job", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2",
                        "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29500"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RESOLVER_CONFIG", raising=False)

    with pytest.raises(runtime.RuntimeConfigError) as caught:
        runtime.launch(lambda strategy: None, accelerator="cpu", devices=2, strategy="ddp", max_restarts=2)
    message = str(caught.value)
    assert "started by 'torchelastic'" in message and "pass --max-restarts to torchrun" in message


def test_under_a_clusters_own_scheduler_max_restarts_is_refused_with_the_fix_that_cluster_gives() -> None:
    class BatchFarm(ClusterEnvironment):  # a site's scheduler, which starts the ranks and restarts them
        title = "the batch farm"
        restart_hint = "submit the job with `farm submit --retries N`"

    runtime.register_cluster_environment("test_batch_farm", BatchFarm, replace=True)
    config = ddp_config(2, launcher=None, cluster_environment="test_batch_farm", main_port=29500)
    try:
        with pytest.raises(runtime.RuntimeConfigError) as caught:
            runtime.build(config, max_restarts=1)
    finally:
        CLUSTER_ENVIRONMENTS.unregister("test_batch_farm")
    assert "started by 'test_batch_farm'" in str(caught.value)
    assert caught.value.hint == "drop max_restarts here and submit the job with `farm submit --retries N`"


def test_restarts_on_several_nodes_and_on_one_process_are_refused_with_the_fix() -> None:
    # runtime.launch runs several nodes through torch's rendezvous (tests/runtime/supervision/
    # test_two_hosts_launch.py); a strategy's own launch has none.
    config = resolver.resolve(accelerator="cpu", devices=2, num_nodes=2, node_rank=1, master_addr="127.0.0.1",
                              master_port=29500, strategy="ddp_spawn")  # fmt: skip
    with pytest.raises(runtime.RuntimeConfigError, match="2 nodes: a strategy's launch restarts one node") as caught:
        runtime.build(config, max_restarts=1).launch(lambda strategy: None)
    assert "resolver run --nnodes N --rdzv-endpoint HOST:PORT --max-restarts K" in str(caught.value.hint)
    assert "runtime.launch(fn, num_nodes=N, max_restarts=K, master_addr=HOST, master_port=PORT)" in str(
        caught.value.hint
    )
    with pytest.raises(runtime.RuntimeConfigError, match="a run of one process .* has no launcher to restart it"):
        runtime.launch(lambda strategy: None, accelerator="cpu", devices=1, max_restarts=1)


@pytest.mark.parametrize("nodes", [(2, 1), (0, 2), (1, 2, 3), (1.5, 2), ("1", "2")])
def test_a_range_of_nodes_that_is_not_min_max_is_refused_before_anything_starts(nodes: object) -> None:
    with pytest.raises(runtime.RuntimeConfigError, match=r"a range of nodes is \(MIN, MAX\)") as caught:
        runtime.launch(lambda strategy: None, accelerator="cpu", devices=1, num_nodes=nodes, max_restarts=1)
    assert str(caught.value).startswith(f"num_nodes={nodes!r}: ")
    assert caught.value.hint == "e.g. num_nodes=(1, 2), or a fixed number of nodes, num_nodes=2"


def test_several_nodes_with_restarts_and_no_address_do_not_resolve_and_say_what_to_pass() -> None:
    with pytest.raises(resolver.ConflictError, match="nothing says which machine runs rank 0") as caught:
        runtime.launch(lambda strategy: None, accelerator="cpu", devices=1, num_nodes=(1, 2), max_restarts=1)
    assert "pass master_addr" in str(caught.value.hint)


def test_latest_checkpoint_takes_the_newest_complete_one_and_skips_half_written_ones(tmp_path: Path) -> None:
    io = TorchCheckpointIO()
    io.save({"epoch": 0}, tmp_path / "epoch-0.ckpt")
    io.save({"epoch": 1}, tmp_path / "epoch-1.ckpt")
    (tmp_path / ".epoch-2.ckpt.x1y2.partial").write_bytes(b"half")  # a writer killed mid-write
    (tmp_path / "epoch-3").mkdir()  # a directory checkpoint whose ranks never all finished
    assert latest_checkpoint(tmp_path) == tmp_path / "epoch-1.ckpt"

    (tmp_path / "epoch-3" / COMPLETE_MARKER).write_text("")
    assert latest_checkpoint(tmp_path) == tmp_path / "epoch-3"
    assert latest_checkpoint(tmp_path / "missing") is None


def test_gloos_error_raised_in_ddps_backward_is_the_echo_of_a_peer_not_a_cause() -> None:
    from runtime._protocol.rank_files import is_communication_error

    def backward() -> None:  # DDP's all-reduce fails inside autograd: torch.distributed is not the last frame
        raise RuntimeError("[/src/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer")

    with pytest.raises(RuntimeError) as caught:
        backward()
    assert is_communication_error(caught.value)
    assert not is_communication_error(RuntimeError("loss is nan at step 12"))
