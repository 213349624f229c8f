"""The list of installed plugins is kept in the cache folder (``resolver.plugins``): a new process
reads it without ``importlib.metadata``, yet sees at once a plugin installed, upgraded or removed,
and a file written in a folder that holds no distribution (the current one) changes nothing.

A distribution here is what pip leaves in a site folder: the module and its ``*.dist-info`` folder
(``METADATA``, ``entry_points.txt``), written directly. Each step runs in a fresh process with the
site folder on ``PYTHONPATH`` and its own folder as the current one (``sys.path``'s first entry)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

#: Prints the plugins found and whether importlib.metadata was imported to find them.
_FOUND = """
import json, sys
from resolver.plugins import load_plugins
plugins = [(p.name, p.distribution, p.version, p.problem) for p in load_plugins()]
print(json.dumps({"plugins": plugins, "looked": "importlib.metadata" in sys.modules}))
"""


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    found = {name: tmp_path / name for name in ("site", "work", "cache")}
    for path in found.values():
        path.mkdir()
    return found


def _found(folders: dict[str, Path]) -> tuple[list[list[object]], bool]:
    env = {k: v for k, v in os.environ.items() if k not in ("RESOLVER_DISABLE_PLUGINS", "PYTHONPATH")}
    env.update(PYTHONPATH=str(folders["site"]), RESOLVER_CACHE_DIR=str(folders["cache"]))
    result = subprocess.run(
        [sys.executable, "-c", _FOUND], env=env, cwd=folders["work"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return data["plugins"], data["looked"]


def _install(site: Path, version: str) -> None:
    """What pip install leaves: the module and its metadata (an upgrade replaces the metadata folder)."""
    for old in site.glob("hello_plugin-*.dist-info"):
        shutil.rmtree(old)
    (site / "hello_plugin").mkdir(exist_ok=True)
    (site / "hello_plugin" / "__init__.py").write_text("")
    info = site / f"hello_plugin-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hello-plugin\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[resolver.plugins]\nhello = hello_plugin\n")


def test_an_install_an_upgrade_and_a_removal_are_seen_by_the_next_process(folders):
    assert _found(folders) == ([], True)  # found, and kept
    assert _found(folders) == ([], False)  # read from the cache folder
    _install(folders["site"], "0.1")
    assert _found(folders) == ([["hello", "hello-plugin", "0.1", None]], True)
    assert _found(folders) == ([["hello", "hello-plugin", "0.1", None]], False)
    _install(folders["site"], "0.2")
    assert _found(folders) == ([["hello", "hello-plugin", "0.2", None]], True)
    shutil.rmtree(folders["site"] / "hello_plugin")
    shutil.rmtree(folders["site"] / "hello_plugin-0.2.dist-info")
    assert _found(folders) == ([], True)


def test_a_file_written_where_no_distribution_is_keeps_the_list(folders):
    _install(folders["site"], "0.1")
    assert _found(folders)[1]
    (folders["work"] / "train.py").write_text("print('a new script')\n")  # the current folder changes
    assert _found(folders) == ([["hello", "hello-plugin", "0.1", None]], False)
    (folders["work"] / "hello_plugin-9.9.dist-info").mkdir()  # until it holds a distribution
    assert _found(folders)[1]


def test_a_folder_that_appears_on_the_path_is_looked_at(folders):
    later = folders["site"] = folders["site"].parent / "later"  # PYTHONPATH names a folder not there yet
    assert _found(folders) == ([], True)
    assert _found(folders) == ([], False)
    later.mkdir()
    _install(later, "0.1")
    assert _found(folders) == ([["hello", "hello-plugin", "0.1", None]], True)
