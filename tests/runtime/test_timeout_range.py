"""Every timeout a user can set takes one range, 1 ms to 7 days (resolver._domain.timeouts), and a
value outside it (NaN, infinity, 1e400, negative, zero, less than 1 ms, more than a week, not a
number) is refused before anything starts, with that range in the message: ``resolver run`` and
``resolver check`` as a usage error (exit 2, no traceback), the Python API as a
``RuntimeConfigError``. The bounds themselves work end to end."""

from __future__ import annotations

import math
import os
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.cli_support import run_resolver

pytestmark = pytest.mark.timeout(300)

RANGE = "a timeout is a number of seconds from 0.001 (1 ms) to 604800 (7 days)"
#: Each bad value as typed, with why it is refused.
BAD_TEXT = {
    "nan": "is not a number",
    "inf": "is infinite",
    "1e400": "is infinite",
    "-1": "is not positive",
    "0": "is not positive",
    "1e-9": "is less than 1 ms (torch counts whole milliseconds: it would time out at once)",
    "604801": "is longer than 7 days",
    "soon": "is not a number of seconds",
}
BAD_VALUES = [math.nan, math.inf, float("1e400"), -1, 0, 1e-9, 604801, 10**400, "soon", True]


def _launch_target(strategy: object) -> int:
    return 7


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RESOLVER_", "MASTER_", "RUNTIME_"))}


@pytest.mark.parametrize("text", sorted(BAD_TEXT))
@pytest.mark.parametrize("command", ["run", "check"])
def test_the_command_line_refuses_a_timeout_out_of_range_as_a_usage_error(tmp_path: Path, command: str, text: str):
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    script = ["train.py"] if command == "run" else []
    done = run_resolver(command, "--accelerator", "cpu", f"--timeout={text}", *script, cwd=tmp_path, env=_env())
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"error: argument --timeout: {text!r} {BAD_TEXT[text]}; {RANGE}" in done.stderr
    assert not (tmp_path / "ran").exists()


def test_a_bad_rendezvous_timeout_variable_stops_resolver_run_before_any_rank(tmp_path: Path):
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    env = {**_env(), "RUNTIME_RENDEZVOUS_TIMEOUT": "inf"}
    done = run_resolver("run", "--accelerator", "cpu", "train.py", cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"RUNTIME_RENDEZVOUS_TIMEOUT='inf' is infinite; {RANGE}" in done.stderr
    assert not (tmp_path / "ran").exists()


def test_resolver_run_takes_the_longest_timeout(tmp_path: Path):
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    done = run_resolver("run", "--accelerator", "cpu", "--timeout", "604800", "train.py", cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").exists()


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_launch_refuses_a_timeout_out_of_range_before_starting_anything(value: object):
    import runtime

    started = time.monotonic()
    with pytest.raises(runtime.RuntimeConfigError) as caught:
        runtime.launch(_launch_target, accelerator="cpu", devices=2, strategy="ddp_spawn", timeout=value)
    message = str(caught.value)
    assert message.startswith(f"timeout={value!r} "), message
    assert RANGE in message
    assert "hint: give the seconds a run may take, e.g. timeout=3600, or leave it unset (None) for no limit" in message
    assert time.monotonic() - started < 10  # refused at once: no rank was started to time out


@pytest.mark.parametrize("option", ["timeout", "rendezvous_timeout"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1, 0, 1e-9, 604801], ids=repr)
def test_the_strategy_options_refuse_a_timeout_out_of_range(option: str, value: float):
    import runtime

    with pytest.raises(runtime.RuntimeConfigError) as caught:
        runtime.launch(_launch_target, accelerator="cpu", devices=2, strategy="ddp_spawn",
                       strategy_options={option: value})  # fmt: skip
    assert f"strategy 'ddp' got an invalid option: {option}=" in str(caught.value)
    assert RANGE in str(caught.value)


@pytest.mark.parametrize("text", ["nan", "inf", "1e400", "-1", "0", "1e-9", "604801", "soon"])
def test_the_rendezvous_timeout_variable_takes_the_same_range(text: str, monkeypatch: pytest.MonkeyPatch):
    import runtime

    monkeypatch.setenv("RUNTIME_RENDEZVOUS_TIMEOUT", text)
    with pytest.raises(runtime.RuntimeConfigError) as caught:
        runtime.launch(_launch_target, accelerator="cpu", devices=2, strategy="ddp_spawn")
    assert f"RUNTIME_RENDEZVOUS_TIMEOUT={text!r} {BAD_TEXT[text]}; {RANGE}" in str(caught.value)
    assert "hint: set it to e.g. 120, or unset it for the default (300 s)" in str(caught.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, 0, 1e-9, 604801], ids=repr)
def test_check_run_script_and_rendezvous_take_the_same_range(value: float, tmp_path: Path):
    import resolver
    import runtime
    from runtime.collectives import Rendezvous

    with pytest.raises(runtime.RuntimeConfigError, match="hint: give the seconds each step of the check") as caught:
        runtime.check(accelerator="cpu", devices=2, timeout=value)
    assert RANGE in str(caught.value)
    script = tmp_path / "train.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    config = resolver.resolve(accelerator="cpu", devices=1)
    with pytest.raises(runtime.RuntimeConfigError, match=RANGE.replace("(", r"\(").replace(")", r"\)")):
        runtime.run_script(config, str(script), timeout=value)
    assert not Path(f"{script}.ran").exists()
    for field in ("timeout", "rendezvous_timeout"):
        with pytest.raises(runtime.RuntimeConfigError, match=f"Rendezvous\\({field}="):
            Rendezvous(rank=0, world_size=1, **{field: value})
    with pytest.raises(runtime.RuntimeConfigError, match="is longer than 7 days"):
        Rendezvous(rank=0, world_size=1, timeout=timedelta(days=8))


def test_a_launch_takes_the_longest_timeouts_end_to_end():
    import runtime

    week = 7 * 24 * 3600
    result = runtime.launch(_launch_target, accelerator="cpu", devices=2, strategy="ddp_spawn", timeout=week,
                            strategy_options={"rendezvous_timeout": week})  # fmt: skip
    assert result == 7
