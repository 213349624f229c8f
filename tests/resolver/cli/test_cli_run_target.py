"""`resolver run`: a module with -m (as python -m), the script's own arguments untouched, bad paths explained."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.support.cli_support import run_resolver

#: Records what python -m would give the module, one JSON file per rank (the ranks' stdout may interleave).
SHOW = """\
import json, os, sys
report = {"rank": os.environ["RANK"], "name": __name__, "argv": sys.argv, "path0": sys.path[0]}
with open(f"report-{os.environ['RANK']}.json", "w") as handle:
    json.dump(report, handle)
if "--fail" in sys.argv:
    raise ValueError("boom in the module")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "show.py").write_text(SHOW)
    (tmp_path / "pkg" / "__main__.py").write_text(SHOW)
    (tmp_path / "show.py").write_text(SHOW)
    return tmp_path


def reports(folder: Path) -> list[dict[str, object]]:
    """What each rank recorded, by rank."""
    found = [json.loads(path.read_text()) for path in folder.glob("report-*.json")]
    return sorted(found, key=lambda r: str(r["rank"]))


def test_a_module_runs_on_every_rank_as_python_m_would(project):
    result = run_resolver("run", "--accelerator", "cpu", "--devices", "2", "-m", "pkg.show", "--lr", "1", cwd=project)
    assert result.returncode == 0, result.stderr
    ranks = reports(project)
    assert [r["rank"] for r in ranks] == ["0", "1"]
    for rank in ranks:
        assert rank["name"] == "__main__"
        assert rank["argv"] == [str(project / "pkg" / "show.py"), "--lr", "1"]
        assert os.path.realpath(str(rank["path0"])) == os.path.realpath(project)


def test_a_package_runs_its_main(project):
    result = run_resolver("run", "--module", "pkg", cwd=project)
    assert result.returncode == 0, result.stderr
    (rank,) = reports(project)
    assert rank["argv"] == [str(project / "pkg" / "__main__.py")]


def test_a_modules_exception_is_reported_like_a_scripts(project):
    result = run_resolver("run", "-m", "pkg.show", "--fail", cwd=project)
    assert result.returncode == 1
    assert "rank 0 failed (exit code 1): ValueError: boom in the module" in result.stderr
    assert f'File "{project / "pkg" / "show.py"}", line 6' in result.stderr
    assert "runpy" not in result.stderr and "_rank/main.py" not in result.stderr


def test_a_missing_submodule_is_one_line_not_a_traceback_of_runpy(project):
    result = run_resolver("run", "-m", "pkg.nothere", cwd=project)
    assert result.returncode == 1
    assert "No module named pkg.nothere" in result.stderr
    assert "runpy" not in result.stderr


@pytest.mark.parametrize(
    "args, message, fix",
    [
        (["-m", "nothere"], "error: no module named 'nothere'", "run from the folder that holds nothere"),
        (["-m", "show.py"], "error: -m takes a module name, not a file: 'show.py'", "resolver run show.py"),
        (["-m", "../x"], "error: -m takes a module name (dotted, like package.train), not '../x'", "-m package.module"),
    ],
)
def test_a_module_that_cannot_run_is_a_usage_error(project, args, message, fix):
    result = run_resolver("run", *args, cwd=project)
    assert result.returncode == 2
    assert message in result.stderr and fix in result.stderr
    assert "Traceback" not in result.stderr


def test_the_scripts_own_help_and_arguments_pass_through_untouched(project):
    args = ["--help", "--devices", "3", "-m", "x", "--config", "y.toml", "--", "-v"]
    result = run_resolver("run", "show.py", *args, cwd=project)
    assert result.returncode == 0, result.stderr
    (rank,) = reports(project)
    assert rank["argv"] == [str(project / "show.py"), *args]
    assert "usage: resolver" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "target, message, fix",
    [
        ("pkg", "error: 'pkg' is a folder, not a script", "resolver run pkg/__main__.py"),
        ("shwo.py", "error: script 'shwo.py' not found", "did you mean 'show.py'?"),
        ("train", "error: script 'train' not found", "to run the module 'train', add -m: resolver run -m train"),
        ("/dev/null", "error: '/dev/null' is not a regular file", "give the path of the Python file to run"),
    ],
)
def test_a_script_path_that_cannot_run_is_a_usage_error_with_the_fix(project, target, message, fix):
    result = run_resolver("run", target, cwd=project)
    assert result.returncode == 2
    assert message in result.stderr and fix in result.stderr


def test_a_folder_without_main_names_its_files_and_the_module_form(project):
    (project / "pkg" / "__main__.py").unlink()
    result = run_resolver("run", "pkg", cwd=project)
    assert result.returncode == 2
    assert "resolver run pkg/show.py (it holds show.py)" in result.stderr
    assert "resolver run -m pkg.show" in result.stderr


def test_the_path_is_checked_before_resolving(project):
    """A bad path is a usage error even when the flags would not resolve: the first thing to fix."""
    result = run_resolver("run", "--strategy", "dpp", textwrap.dedent("nothere.py"), cwd=project)
    assert result.returncode == 2 and "not found" in result.stderr


def test_no_script_says_what_is_missing():
    for args in ([], ["-m"], ["--devices", "2"]):
        result = run_resolver("run", *args)
        assert result.returncode == 2
        assert "the following argument is required: SCRIPT (a Python file, or a module name with -m)" in result.stderr
        assert result.stderr.startswith("usage: resolver run")
