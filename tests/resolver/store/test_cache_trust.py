"""Cache entries are code (a pickle, a marshalled code object that is executed): only entries that the
current user alone could have written are loaded. Each test plants a payload under the exact names a
resolve looks up, in a folder or entry that another user could have written, and checks that the
payload never runs, the resolve still succeeds (compiled afresh) and one warning line says why."""

from __future__ import annotations

import marshal
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_support import run_resolver

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX owners and modes")

#: Resolves until its code is generated: the first run loads the table entry, the last the
#: generated code's entry.
VICTIM = (
    "import resolver\n"
    "from resolver._engine.evaluator import GENERATE_AFTER\n"
    "for _ in range(GENERATE_AFTER + 1):\n"
    "    config = resolver.resolve(devices=2, strategy='ddp', environment=resolver.Environment())\n"
    "print('resolved', config.launcher)\n"
)
NOBODY = 65534
WARNING = "resolver: warning: not using the cache"


def _run(cache: Path, code: str = VICTIM) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RESOLVER_CACHE_DIR=str(cache))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )


class _Payload:
    """Unpickled, it runs ``exec(source)``: what a planted table entry could do."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return exec, (self.source,)


@pytest.fixture(scope="module")
def good_entries(tmp_path_factory) -> dict[str, bytes]:
    """The table, generated-code and plugin-list entries that VICTIM writes (and so looks up), by
    name; the plugin list names modules to import, so it is trusted as the others are (resolver.plugins)."""
    good = tmp_path_factory.mktemp("good") / "cache"
    result = _run(good)
    assert result.returncode == 0, result.stderr
    entries = {p.name: p.read_bytes() for p in sorted(good.iterdir())}
    assert [n.split("-")[0] for n in entries] == ["code", "plugins", "table"], list(entries)
    return entries


#: The generated code runs with a few builtins only (no ``open``, no ``__import__``): no sandbox, as
#: this payload, which reaches ``os`` through a class every process has, shows.
_ESCAPE = (
    "g = [c for c in type.__subclasses__(type.__base__) if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"
    "g['close'](g['open']({marker!r}, g['O_CREAT'] | g['O_WRONLY'], 0o600))\n"
)


#: What the planted plugin list names: a module of the standard library whose import prints this.
ZEN = "The Zen of Python"


def _plant(
    folder: Path, entries: dict[str, bytes], marker: Path, kinds: tuple[str, ...] = ("table", "code", "plugins")
) -> None:
    """The entries of ``kinds`` hold a payload, the others what resolver wrote: the table a pickle
    that creates ``marker`` when loaded, the generated code the very entry resolver wrote (what it
    was made from, which a load compares) with that payload as its code, the plugin list (data:
    modules to import) the entry resolver wrote naming the module ``this`` as a plugin, whose
    import prints ``ZEN``."""
    folder.mkdir(exist_ok=True)
    source = f"open({str(marker)!r}, 'w').write('the cache entry ran')"
    for name, data in entries.items():
        kind = name.split("-")[0]
        if kind == "code" and kind in kinds:
            material, _ = marshal.loads(data)
            data = marshal.dumps((material, compile(_ESCAPE.format(marker=str(marker)), material[2], "exec")))
        elif kind == "table" and kind in kinds:
            data = pickle.dumps(_Payload(source))
        elif kind == "plugins" and kind in kinds:
            key, folders, _ = marshal.loads(data)
            data = marshal.dumps((key, folders, (("zen", "this", "zen-payload", "1.0"),)))
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o600)


def _ran(result: subprocess.CompletedProcess[str], marker: Path) -> bool:
    """Whether a planted payload ran: the marker file was made, or the planted plugin imported."""
    return marker.exists() or ZEN in result.stdout


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")


@pytest.mark.parametrize("kind", ["table", "code", "plugins"])
def test_a_private_folder_s_entries_are_loaded(tmp_path, good_entries, kind):
    """The control: each payload alone, in a folder and files of the user's own, does run (so the
    tests below, where they must not, would notice)."""
    folder, marker = tmp_path / "cache", tmp_path / "marker"
    _plant(folder, good_entries, marker, kinds=(kind,))
    folder.chmod(0o700)
    result = _run(folder)
    assert _ran(result, marker), result.stderr
    assert (ZEN in result.stdout) == (kind == "plugins")


@pytest.mark.parametrize(
    ("owner", "mode", "said", "fix"),
    [
        (NOBODY, 0o700, f"it belongs to uid {NOBODY}, not to you", "point RESOLVER_CACHE_DIR at a folder of your own"),
        (None, 0o770, "it is writable by its group (mode 0770)", "`chmod 700 "),
        (None, 0o707, "it is writable by others (mode 0707)", "`chmod 700 "),
        (None, 0o1777, "it is writable by its group and others (mode 0777)", "`chmod 700 "),
    ],
    ids=["other-owner", "group-writable", "others-writable", "shared-scratch"],
)
def test_a_folder_another_user_could_write_is_not_used(tmp_path, good_entries, owner, mode, said, fix):
    if owner is not None:
        _needs_root()
    folder, marker = tmp_path / "cache", tmp_path / "marker"
    _plant(folder, good_entries, marker)
    folder.chmod(mode)
    if owner is not None:
        os.chown(folder, owner, -1)
    result = _run(folder)
    assert not _ran(result, marker), "a planted cache entry ran"
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["resolved", "subprocess"]
    warnings = [line for line in result.stderr.splitlines() if line.startswith(WARNING)]
    assert len(warnings) == 1, result.stderr  # once, though both entries were skipped
    assert f"folder {folder} (RESOLVER_CACHE_DIR): {said}" in warnings[0]
    assert fix in warnings[0]
    assert warnings[0].endswith(("a folder only you can write", "turns the cache off)")), "one whole line"
    assert folder.stat().st_mode & 0o7777 == mode, "the user's folder was changed behind their back"
    assert sorted(p.name for p in folder.iterdir()) == list(good_entries)  # nothing written there either


@pytest.mark.parametrize(
    ("owner", "mode", "said"),
    [(NOBODY, 0o600, f"it belongs to uid {NOBODY}, not to you"), (None, 0o620, "writable by its group (mode 0620)")],
    ids=["other-owner", "group-writable"],
)
def test_an_entry_another_user_could_write_is_not_used_and_is_replaced(tmp_path, good_entries, owner, mode, said):
    if owner is not None:
        _needs_root()
    folder, marker = tmp_path / "cache", tmp_path / "marker"
    _plant(folder, good_entries, marker)
    folder.chmod(0o700)
    for name in good_entries:
        (folder / name).chmod(mode)
        if owner is not None:
            os.chown(folder / name, owner, -1)
    result = _run(folder)
    assert not _ran(result, marker), "a planted cache entry ran"
    assert result.stdout.split() == ["resolved", "subprocess"], result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith(WARNING)]
    assert len(warnings) == 1, result.stderr
    assert f"entry {folder}/" in warnings[0] and said in warnings[0]
    for name in good_entries:  # compiled afresh and written over the foreign entry, as the user's own
        st = (folder / name).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (os.getuid(), 0o600)
    assert WARNING not in _run(folder).stderr  # the next process trusts its own entries


@pytest.mark.parametrize("kind", ["table", "code", "plugins"])
def test_an_entry_that_is_a_link_is_not_followed_and_is_replaced(tmp_path, good_entries, kind):
    """A link points wherever its writer chose: the entry is not loaded, one warning line names it,
    and the entry compiled now takes the link's place (the file it pointed at is left alone)."""
    elsewhere, marker = tmp_path / "elsewhere", tmp_path / "marker"
    _plant(elsewhere, good_entries, marker, kinds=(kind,))
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    for name, data in good_entries.items():
        if name.startswith(kind + "-"):
            (folder / name).symlink_to(elsewhere / name)
            linked = name
        else:  # the other entries are the user's own: only the link is refused
            (folder / name).write_bytes(data)
            (folder / name).chmod(0o600)
    planted = (elsewhere / linked).read_bytes()
    result = _run(folder)
    assert not _ran(result, marker), "a linked cache entry ran"
    assert result.stdout.split() == ["resolved", "subprocess"], result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith(WARNING)]
    assert warnings == [
        f"{WARNING} entry {folder / linked} (RESOLVER_CACHE_DIR): it is a symbolic link, so another user could "
        "have written code into it; compiling instead. Fix: none needed: it is replaced by the one compiled now"
    ], result.stderr
    assert not (folder / linked).is_symlink() and (folder / linked).stat().st_mode & 0o777 == 0o600
    assert (elsewhere / linked).read_bytes() == planted, "the file the link pointed at was written through it"
    assert WARNING not in _run(folder).stderr  # the next process trusts the entry written in its place


def test_an_entry_that_is_a_fifo_is_refused_without_waiting(tmp_path, good_entries):
    """Opening a FIFO for reading would wait for a writer: the entry is opened without waiting, then
    refused as not a plain file."""
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    for name, data in good_entries.items():
        if name.startswith("table-"):
            os.mkfifo(folder / name, 0o600)
        else:
            (folder / name).write_bytes(data)
            (folder / name).chmod(0o600)
    result = _run(folder)  # bounded: a wait for a writer would fail the test, not hang it
    assert result.stdout.split() == ["resolved", "subprocess"], result.stderr
    assert f"entry {folder}/table-" in result.stderr and "it is not a plain file" in result.stderr


def test_resolver_explain_ignores_a_group_writable_cache(tmp_path, good_entries):
    """The command line, as the issue found it: a planted table entry in a shared folder."""
    folder, marker = tmp_path / "cache", tmp_path / "marker"
    _plant(folder, {n: data for n, data in good_entries.items() if n.startswith("table-")}, marker)
    folder.chmod(0o775)
    result = run_resolver("explain", "--devices", "2", "--strategy", "ddp", env={"RESOLVER_CACHE_DIR": str(folder)})
    assert not marker.exists(), "a planted cache entry ran"
    assert result.returncode == 0, result.stderr
    assert "launcher" in result.stdout
    assert result.stderr.count(WARNING) == 1, result.stderr


def test_the_folder_is_made_private_and_entries_too_whatever_the_umask(tmp_path, good_entries):
    folder = tmp_path / "parent" / "cache"
    result = _run(folder, "import os; os.umask(0)\n" + VICTIM)
    assert result.returncode == 0, result.stderr
    assert folder.stat().st_mode & 0o777 == 0o700
    entries = sorted(folder.iterdir())
    assert [p.name for p in entries] == list(good_entries)  # no temporary file left
    assert {p.stat().st_mode & 0o777 for p in entries} == {0o600}
    shutil.rmtree(tmp_path / "parent")
