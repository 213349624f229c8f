"""`resolver config`: writes the flags file `--config` reads, from flags or (on a terminal) answers, and
only a set that resolves (issue 39, point 14a). Run as a user runs it: the installed command, a real
terminal (a pseudo-terminal) for the questions."""

from __future__ import annotations

import os
import pty
import subprocess
import tomllib
from pathlib import Path

from resolver.flagsfile import load_flags_file
from tests.support.cli_support import resolver_command, run_resolver

CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}


def test_the_flags_given_are_written_and_read_back_by_config(tmp_path: Path) -> None:
    done = run_resolver(
        "config", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--plugin", "bf16-mixed",
        "train.toml", cwd=tmp_path, env=CPU_ONLY,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    written = tmp_path / "train.toml"
    flags = tomllib.loads(written.read_text())["flags"]
    assert flags == {"accelerator": "cpu", "devices": 2, "strategy": "ddp", "plugins": ["bf16-mixed"]}
    assert load_flags_file(written).flags == flags  # what --config reads, without a complaint
    assert "wrote train.toml; use it with resolver run --config train.toml SCRIPT" in done.stderr
    explained = run_resolver("explain", "--config", "train.toml", cwd=tmp_path, env=CPU_ONLY)
    assert "flags file train.toml: strategy='ddp'" in explained.stdout, explained.stderr


def test_an_existing_file_is_kept_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "train.toml").write_text("# mine\n")

    kept = run_resolver("config", "--devices", "2", "train.toml", cwd=tmp_path, env=CPU_ONLY)
    assert kept.returncode == 1
    assert "error: train.toml exists; resolver config does not overwrite it" in kept.stderr
    assert "pass --force to overwrite it" in kept.stderr
    assert (tmp_path / "train.toml").read_text() == "# mine\n"

    forced = run_resolver("config", "--devices", "2", "--force", "train.toml", cwd=tmp_path, env=CPU_ONLY)
    assert forced.returncode == 0, forced.stderr
    assert tomllib.loads((tmp_path / "train.toml").read_text())["flags"] == {"devices": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["train.toml"]  # no temporary file left


def test_a_conflicting_set_is_refused_with_the_conflict_and_nothing_is_written(tmp_path: Path) -> None:
    flags = ("--accelerator", "cpu", "--devices", "3", "--strategy", "single_device")
    explained = run_resolver("explain", *flags, cwd=tmp_path, env=CPU_ONLY)

    done = run_resolver("config", *flags, "train.toml", cwd=tmp_path, env=CPU_ONLY)

    assert done.returncode == 1
    assert done.stderr.startswith("error[strategy.single_device.many_devices]: ")
    # the ConflictError's text, as resolver explain gives it, the file named as the flags' source
    assert explained.stderr.replace("from flag ", "from flags file train.toml: ").strip() in done.stderr
    assert "resolver config: train.toml not written" in done.stderr
    assert not (tmp_path / "train.toml").exists()


def test_a_machine_given_with_simulate_is_the_one_resolved_for(tmp_path: Path) -> None:
    flags = ("--devices", "8", "--no-prompt", "cluster.toml")
    here = run_resolver("config", "--accelerator", "cuda", *flags, cwd=tmp_path, env=CPU_ONLY)
    assert here.returncode == 1 and "add --simulate" in here.stderr

    there = run_resolver("config", "--accelerator", "cuda", "--simulate", "cuda=8,slurm", *flags, cwd=tmp_path)
    assert there.returncode == 0, there.stderr
    assert tomllib.loads((tmp_path / "cluster.toml").read_text())["flags"] == {"accelerator": "cuda", "devices": 8}


def test_dash_prints_the_file(tmp_path: Path) -> None:
    done = run_resolver("config", "--accelerator", "cpu", "--devices", "2", "-", cwd=tmp_path, env=CPU_ONLY)

    assert done.returncode == 0, done.stderr
    assert tomllib.loads(done.stdout) == {"flags": {"accelerator": "cpu", "devices": 2}}
    assert list(tmp_path.iterdir()) == []


def test_without_a_terminal_nothing_is_asked(tmp_path: Path) -> None:
    """Answers on a pipe are not read: a script's stdin is not a user."""
    piped = subprocess.run(
        [str(resolver_command()), "config", "train.toml"],
        input="cpu\n2\n", capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert piped.returncode == 2
    assert "error: no flag to write" in piped.stderr and "[auto]:" not in piped.stderr
    assert not (tmp_path / "train.toml").exists()

    given = subprocess.run(
        [str(resolver_command()), "config", "--devices", "2", "train.toml"],
        input="cpu\n", capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert given.returncode == 0, given.stderr
    assert tomllib.loads((tmp_path / "train.toml").read_text())["flags"] == {"devices": 2}


def on_a_terminal(tmp_path: Path, *args: str, answers: str) -> subprocess.CompletedProcess[str]:
    """``resolver config ARGS`` with a terminal as its stdin, on which ``answers`` were typed."""
    terminal, its_end = pty.openpty()
    try:
        process = subprocess.Popen(
            [str(resolver_command()), "config", *args],
            stdin=its_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env={**os.environ, **CPU_ONLY},
        )  # fmt: skip
        os.close(its_end)
        os.write(terminal, answers.encode())
        try:
            out, err = process.communicate(timeout=60)
        finally:
            process.kill()
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)
    finally:
        os.close(terminal)


def test_on_a_terminal_each_flag_not_given_is_asked_with_its_default(tmp_path: Path) -> None:
    answers = [
        "",  # accelerator: Enter keeps auto (not written)
        "dpp",  # strategy: a typo, asked again with the closest name
        "ddp",
        "bf16-mixed",  # precision
        "two",  # num_nodes: not a number, asked again
        "",
        *[""] * 5,  # cluster_environment, plugins, node_rank, master_addr, master_port
    ]
    done = on_a_terminal(tmp_path, "--devices", "2", "train.toml", answers="\n".join(answers) + "\n")

    assert done.returncode == 0, done.stderr
    assert tomllib.loads((tmp_path / "train.toml").read_text())["flags"] == {
        "devices": 2,  # given on the command line: not asked
        "strategy": "ddp",
        "precision": "bf16-mixed",
    }
    asked = done.stderr
    assert "accelerator [auto]: " in asked and "devices [" not in asked
    assert "unknown strategy 'dpp' (did you mean 'ddp'?)" in asked
    assert "  one of: auto, cpu, cuda, gpu, mps, tpu, xla" in asked
    assert asked.count("strategy [auto]: ") == 2 and asked.count("num_nodes [1]: ") == 2
    assert "num_nodes takes a whole number" in asked
    assert "precision [not set]: " in asked and "master_port [not set]: " in asked


def test_on_a_terminal_input_that_ends_writes_nothing(tmp_path: Path) -> None:
    terminal_eof = "\x04"  # Ctrl-D at the start of a line: the end of the input
    done = on_a_terminal(tmp_path, "train.toml", answers="cpu\n" + terminal_eof)

    assert done.returncode == 1
    assert "the input ended before devices was answered; train.toml not written" in done.stderr
    assert not (tmp_path / "train.toml").exists()


def test_rules_given_are_written_relative_to_the_file_and_apply_when_it_is_read(tmp_path: Path) -> None:
    """`--rules` is written as the file's `rules` key (relative to the file's folder), so `--config`
    applies the same site rules; a rule file that cannot be read writes nothing."""
    (tmp_path / "site.toml").write_text('[[rule]]\nid = "site.note"\nstage = "placed"\nnote = "site rule seen"\n')
    (tmp_path / "conf").mkdir()

    done = run_resolver(
        "config", "--rules", "site.toml", "--devices", "2", "conf/train.toml", cwd=tmp_path, env=CPU_ONLY
    )

    assert done.returncode == 0, done.stderr
    assert tomllib.loads((tmp_path / "conf" / "train.toml").read_text())["flags"] == {
        "devices": 2,
        "rules": ["../site.toml"],
    }
    explained = run_resolver("explain", "--config", "conf/train.toml", cwd=tmp_path, env=CPU_ONLY)
    assert explained.returncode == 0, explained.stderr
    assert "site rule seen" in explained.stdout
    assert "site.toml  flags file conf/train.toml:" in explained.stdout

    missing = run_resolver("config", "--rules", "nope.toml", "--devices", "2", "other.toml", cwd=tmp_path, env=CPU_ONLY)
    assert missing.returncode == 1
    assert "Traceback" not in missing.stderr
    assert "cannot read rule file nope.toml (from argument --rules)" in missing.stderr
    assert not (tmp_path / "other.toml").exists()
