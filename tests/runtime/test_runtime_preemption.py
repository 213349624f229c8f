"""Pre-emption with real processes: a signal to one rank stops every rank at the same step.

``tests/runtime/scripts/preempt_training.py`` trains two ranks, checking ``strategy.preempted(step)`` at
every step, under ``resolver run --preemption-signal SIGUSR1`` and under ``runtime.launch(...,
strategy_options={"preemption_signal": "SIGUSR1"})`` (``ddp``, ``ddp_spawn``, ``fsdp``,
``deepspeed``). Once rank 1 has taken some steps the test sends ``SIGUSR1`` to rank 1 only. What must
hold: both ranks stop at the same step, a checkpoint of that step exists, the run ends with
"pre-empted at step N, checkpoint at PATH" and status 75 (``PreemptedError`` from ``launch``),
nothing is left behind, and a second run resumes at that step.
(The SLURM requeue: tests/runtime/cluster/test_slurm_preemption.py.)
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

import runtime
from runtime.checkpoint import latest_checkpoint
from runtime.preemption import PREEMPTED_EXIT_CODE

TRAINING = Path(__file__).parent / "scripts" / "preempt_training.py"
STEPS = 400
pytestmark = pytest.mark.timeout(240)

ENTRIES = {
    # with --max-restarts: a pre-empted run did not fail, so it is not restarted
    "resolver run": [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--devices", "2",
                     "--strategy", "ddp", "--max-restarts", "1", "--preemption-signal", "SIGUSR1", str(TRAINING),
                     "{out}", str(STEPS)],
    "launch ddp": [sys.executable, str(TRAINING), "{out}", str(STEPS), "ddp"],
    "launch ddp_spawn": [sys.executable, str(TRAINING), "{out}", str(STEPS), "ddp_spawn"],
    # FSDP and DeepSpeed save their checkpoints their own way: the PATH in the message is still the one saved
    "launch fsdp": [sys.executable, str(TRAINING), "{out}", str(STEPS), "fsdp"],
    "launch deepspeed": [sys.executable, str(TRAINING), "{out}", str(STEPS), "deepspeed"],
}  # fmt: skip


def environment(tmp: Path) -> dict[str, str]:
    drop = {"RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK",
            "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"}  # fmt: skip
    kept = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SLURM_")}
    return {**kept, "TMPDIR": str(tmp)}


def start(entry: str, out: Path, tmp: Path) -> subprocess.Popen[str]:
    command = [part.replace("{out}", str(out)) for part in ENTRIES[entry]]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(tmp))


def wait_for_step(out: Path, rank: int, step: int, process: subprocess.Popen[str]) -> None:
    progress, deadline = out / f"progress-{rank}", time.time() + 180
    while not (progress.exists() and int(progress.read_text() or 0) >= step):
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            pytest.fail(f"rank {rank} never reached step {step}:\n{process.communicate()[0]}")
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_signal_to_one_rank_stops_every_rank_at_the_same_step_with_a_checkpoint_and_status_75(
    entry: str, tmp_path: Path
) -> None:
    if entry == "launch deepspeed":
        pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    process = start(entry, out, tmp)
    wait_for_step(out, 1, 10, process)
    signalled = time.time()
    os.kill(int((out / "pid-1").read_text()), signal.SIGUSR1)  # one rank only
    output = process.communicate(timeout=120)[0]
    assert process.returncode == PREEMPTED_EXIT_CODE, output
    stopped = [json.loads((out / f"stopped-{rank}").read_text()) for rank in (0, 1)]
    step = stopped[0]["step"]
    assert stopped[1]["step"] == step, stopped  # the same step on both ranks
    assert 10 <= step < STEPS
    checkpoint = out / "checkpoints" / f"step-{step}"
    assert latest_checkpoint(out / "checkpoints") == checkpoint
    assert f"pre-empted at step {step}, checkpoint at {checkpoint}" in output, output
    if entry == "resolver run":
        assert output.count(f"pre-empted at step {step}") == 1, output  # rank 0 says it, once
        assert "resolver run: pre-empted: every rank stopped (exit status 75)" in output, output
        assert "Traceback" not in output, output
        assert "restarting" not in output, output
    else:
        assert f'"step": {step}' in output  # the PreemptedError the script caught
    # signal to every rank stopped: well within a second on an idle machine (the next step's check)
    assert max(s["time"] for s in stopped) - signalled < 30
    assert list(tmp.iterdir()) == [], "a report folder was left behind"
    assert all(gone(int(p.read_text())) for p in out.glob("pid-*")), "a rank outlived the run"
    if entry == "resolver run":  # run again: it resumes at the saved step and trains to the end
        for rank in (0, 1):
            (out / f"started-0-{rank}").unlink()
        again = start(entry, out, tmp)
        assert again.communicate(timeout=120)[0] is not None and again.returncode == 0
        assert [json.loads((out / f"started-0-{r}").read_text())["step"] for r in (0, 1)] == [step, step]
        assert (out / "final-0").read_text() == str(STEPS)


def test_sigterm_to_the_launching_process_still_stops_everything_at_once(tmp_path: Path) -> None:
    """Pre-emption is announced to the ranks; the launching process's SIGTERM ends the run (status 143)."""
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    process = start("launch ddp_spawn", out, tmp)
    wait_for_step(out, 1, 5, process)
    process.send_signal(signal.SIGTERM)
    began = time.time()
    output = process.communicate(timeout=60)[0]
    assert process.returncode == 143, output
    assert time.time() - began < 15, output
    assert not list(out.glob("stopped-*")), "a rank took the launcher's SIGTERM for pre-emption"
    assert all(gone(int(p.read_text())) for p in out.glob("pid-*")), "a rank outlived the run"
    assert list(tmp.iterdir()) == [], "a report folder was left behind"


@pytest.mark.parametrize(
    ("value", "said"),
    [("SIGUSR2", "stack-dump signal"), ("SIGNOPE", "names no signal"), ("SIGKILL", "no process can catch")],
)
def test_a_preemption_signal_that_cannot_work_is_refused_with_the_reason(value: str, said: str) -> None:
    with pytest.raises(runtime.RuntimeConfigError, match=said):
        runtime.launch(lambda strategy: None, accelerator="cpu", devices=1,
                       strategy_options={"preemption_signal": value})  # fmt: skip


def test_requeue_without_a_preemption_signal_is_refused_by_resolver_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--devices", "1", "--requeue", str(TRAINING)],
        capture_output=True, text=True, timeout=60, env=environment(Path("/tmp")),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--requeue requeues a pre-empted SLURM job, but no --preemption-signal is given" in done.stderr
    assert "\n  = help: add --preemption-signal SIGUSR1" in done.stderr


def _stop_at_step_7(strategy: runtime.Strategy, folder: Path) -> str:
    os.kill(os.getpid(), signal.SIGUSR1)  # delivered before the next bytecode: the check below sees it
    assert strategy.preempted(7)
    strategy.save_checkpoint(folder / "step-7", {"step": 7})
    return "returned"


def test_one_process_raises_preempted_error_and_says_why_a_requested_requeue_did_not_happen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    options = {"preemption_signal": "USR1", "requeue": True}
    with pytest.raises(runtime.PreemptedError) as caught:
        runtime.launch(_stop_at_step_7, tmp_path, accelerator="cpu", devices=1, strategy_options=options)
    error = caught.value
    assert (error.step, error.checkpoint, error.requeued, error.exit_code) == (7, str(tmp_path / "step-7"), None, 75)
    assert str(error).startswith(f"pre-empted at step 7, checkpoint at {tmp_path / 'step-7'}\n")
    assert "not requeued: requeue=True, but this is not a SLURM job (SLURM_JOB_ID is unset)" in str(error)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler lasted as long as the work
    assert not runtime.launch(lambda strategy: strategy.preempted(), accelerator="cpu", devices=1)  # option off
