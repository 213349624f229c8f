"""The compiled rule table, cached on disk so a new process skips parsing and compiling.

An entry is keyed by everything the table is compiled from: the cache format, the engine version,
the Python version, the flag declarations (:func:`resolver._domain.flags.flags_fingerprint`) and every rule
file's name and text, so editing any rule file, a flag or upgrading makes a new entry. The entry
holds that key material itself and a load compares it exactly; the file name only needs a short
checksum of it (``zlib``, where ``hashlib`` would load OpenSSL into every process: about 4 ms).
Entries are written to a temporary file and renamed into place, so readers never see half a file;
an entry that cannot be read (truncated, corrupt, from an incompatible build) is ignored and the
table compiled again.

The folder is ``$RESOLVER_CACHE_DIR`` if set, else the user cache folder (``$XDG_CACHE_HOME``
or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) +
``/resolver``. ``RESOLVER_CACHE_DIR=off`` (or an unwritable folder) disables it.

Loading an entry runs code (``pickle``; :mod:`resolver._engine.codegen` ``exec``-s its ``code-*.marshal``
entries), so only what the current user alone could have written is loaded, as ssh treats its key
files: the folder is created ``0700`` and each entry written ``0600``; before a load the folder and
the opened entry (``fstat`` of the open file, so what is checked is what is read) must belong to the
current user and not be writable by group or others, and the entry be a plain file, not a symbolic
link. Otherwise the cache is ignored with a one-line warning (once per process) naming the folder or
entry and why, and the table compiled: a folder of the user's that is too open is not
``chmod``-ed behind their back, the warning says what to do. One ``stat`` per folder and process,
one ``fstat`` per entry. On Windows (no POSIX owner and mode) the folder is not checked.

Paths are handled with ``os.path`` here: this runs in every process, and ``pathlib`` costs a few
milliseconds to import.
"""

from __future__ import annotations

import copyreg
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from stat import S_ISREG
from typing import TYPE_CHECKING, Any, BinaryIO

from resolver._engine.compiled import CompiledRule, CompiledTable, Template
from resolver._engine.function_registry import FUNCTIONS

if TYPE_CHECKING:
    import types
    from pathlib import Path

    from resolver._engine.table import RuleSource

__all__ = ["cache_dir", "cache_key", "cached_table", "compile_code", "open_entry", "private_folder", "write_entry"]

#: Bump when the pickled shape of a compiled table changes.
CACHE_FORMAT = 5
#: Entries kept per folder; older ones (edited rule files, upgrades) are removed when one is written.
MAX_ENTRIES = 32
_OFF = ("off", "0", "none", "false")


def cache_dir() -> Path | None:
    """Where compiled tables are kept, or None when caching is off. The folder is used only when
    the current user alone can write it (:func:`private_folder`)."""
    folder = _cache_folder()
    if folder is None:
        return None
    from pathlib import Path

    return Path(folder)


def _cache_folder() -> str | None:
    """The configured folder (trusted or not), or None when caching is off."""
    configured = os.environ.get("RESOLVER_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in _OFF or not configured.strip() else configured
    home = os.path.expanduser("~")
    if sys.platform == "darwin":
        base = os.path.join(home, "Library", "Caches")
    elif os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "resolver")


#: Folders already checked in this process, and whether each is trusted.
_CHECKED: dict[str, bool] = {}
#: Opened without following a symbolic link where the platform can (an entry is a plain file), and
#: without waiting for a writer should it be a FIFO (refused once open: not a plain file).
_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
#: The fix an ignored entry's warning gives.
_REPLACED = "none needed: it is replaced by the one compiled now"
_warned = False


def _untrusted(st: os.stat_result) -> str | None:
    """Why a file or folder with status ``st`` may hold what another user wrote, or None."""
    if os.name == "nt":  # no POSIX owner and mode: the user's profile folder is private by default
        return None
    uid = os.getuid()
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not to you (uid {uid})"
    if st.st_mode & 0o022:
        who = " and ".join(name for bit, name in ((0o020, "its group"), (0o002, "others")) if st.st_mode & bit)
        return f"it is writable by {who} (mode {st.st_mode & 0o777:04o})"
    return None


def _warn(what: str, path: str, reason: str, fix: str) -> None:
    """One line on stderr, once per process: an ignored cache only costs time, but the user should know."""
    global _warned
    if _warned:
        return
    _warned = True
    origin = "RESOLVER_CACHE_DIR" if "RESOLVER_CACHE_DIR" in os.environ else "the user cache folder"
    sys.stderr.write(
        f"resolver: warning: not using the cache {what} {path} ({origin}): {reason}, so another user could "
        f"have written code into it; compiling instead. Fix: {fix}\n"
    )


def private_folder(*, create: bool = False) -> str | None:
    """The cache folder when caching is on and only the current user can write it, else None.

    A missing folder is None, or created ``0700`` with ``create`` (None if it cannot be). A folder
    that someone else owns or that group or others can write is never used, with a warning (once
    per process); the verdict is kept, so a process stats its folder once."""
    directory = _cache_folder()
    if directory is None:
        return None
    trusted = _CHECKED.get(directory)
    if trusted is not None:
        return directory if trusted else None
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        if not create:
            return None
        try:  # the umask can only take bits away from 0700; parents get the usual mode
            os.makedirs(directory, mode=0o700, exist_ok=True)
            st = os.stat(directory)
        except OSError:
            return None
    except OSError:
        return None
    reason = _untrusted(st)
    _CHECKED[directory] = reason is None
    if reason is not None:
        fix = (
            f"`chmod 700 {directory}`, or point RESOLVER_CACHE_DIR at a folder only you can write"
            if st.st_uid == os.getuid()
            else "point RESOLVER_CACHE_DIR at a folder of your own (RESOLVER_CACHE_DIR=off turns the cache off)"
        )
        _warn("folder", directory, reason, fix)
        return None
    return directory


def open_entry(path: str) -> BinaryIO | None:
    """``path`` opened for reading if it is a plain file of the current user that only they can
    write (checked on the open file), else None: missing, a link, or possibly another user's."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP (O_NOFOLLOW) for a link: it points wherever its writer chose
        if os.path.islink(path):
            _warn("entry", path, "it is a symbolic link", _REPLACED)
        return None
    if not _NOFOLLOW and os.path.islink(path):  # a platform that opened the link's target
        os.close(fd)
        _warn("entry", path, "it is a symbolic link", _REPLACED)
        return None
    f = open(fd, "rb")  # noqa: SIM115 - returned open
    try:
        st = os.fstat(fd)
        reason = "it is not a plain file" if not S_ISREG(st.st_mode) else _untrusted(st)
    except OSError:
        reason = "it cannot be examined"
    if reason is None:
        return f
    f.close()
    _warn("entry", path, reason, _REPLACED)
    return None


def write_entry(directory: str, path: str, data: Callable[[BinaryIO], None], pattern: str, keep: int) -> None:
    """Write ``path`` in ``directory`` through ``data``: created ``0600`` under a temporary name and
    renamed into place (readers never see half an entry), then all but the newest ``keep`` entries
    matching ``pattern`` removed. Raises OSError (and what ``data`` raises); the temporary file is removed."""
    import glob
    import tempfile  # mkstemp creates the file 0600 whatever the umask

    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb") as f:
            data(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    entries = sorted(glob.glob(os.path.join(glob.escape(directory), pattern)), key=os.path.getmtime)
    for old in entries[: max(0, len(entries) - keep)]:
        try:
            os.unlink(old)
        except FileNotFoundError:
            pass


def _key_material(sources: Sequence[RuleSource], fingerprint: str) -> tuple[str, ...]:
    """Everything a compiled table depends on, as the entry stores it."""
    from resolver._version import __version__

    parts = [f"format={CACHE_FORMAT}", f"engine={__version__}", f"python={sys.version}", f"flags={fingerprint}"]
    for source in sources:
        parts += (source.name, source.text)
    return tuple(parts)


def cache_key(sources: Sequence[RuleSource], fingerprint: str = "") -> str:
    """The entry name for ``sources`` (a checksum: the entry itself is compared in full on load)."""
    return _name(_key_material(sources, fingerprint))


def _name(material: tuple[str, ...]) -> str:
    import zlib

    crc, size = 0, 0
    for part in material:
        data = part.encode("utf-8", "surrogatepass") + b"\0"
        crc, size = zlib.crc32(data, crc), size + len(data)
    return f"{crc:08x}-{size:x}"


class _Templates(Mapping[str, Template]):
    """A rule's messages (``why``, ``conflict``, ``hint``, ``note``) as written, each parsed on first
    use: a process that resolves once renders a few dozen of the table's hundreds of messages, and
    unpickling a parsed one costs an attrs object per part. Unpickled without a Python call (its
    ``__dict__`` is restored directly)."""

    def __init__(self, texts: dict[str, str]) -> None:
        self._texts = texts
        self._parsed: dict[str, Template] = {}

    def __getitem__(self, key: str) -> Template:
        found = self._parsed.get(key)
        if found is None:
            found = self._parsed[key] = Template.parse(self._texts[key])
        return found

    def get(self, key: str, default: Any = None) -> Any:
        """As ``Mapping.get``, without raising and catching a KeyError for each absent message."""
        return self[key] if key in self._texts else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)


class _Pickler:
    """A rule's messages are pickled as text. Rules, slots, conditions and value expressions are
    dict classes pickled as their fields (a condition leaves out its closures), so loading an entry
    restores them without a Python call: about 4 us a rule, where a call per object cost 12."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is CompiledRule and obj.templates:
            state: dict[str, Any] = obj.__getstate__()  # type: ignore[assignment]  # a new dict (the rule keeps its parsed messages), usual values left out
            state["templates"] = _Templates({key: template.text for key, template in obj.templates.items()})
            return copyreg.__newobj__, (CompiledRule,), state  # type: ignore[attr-defined]  # what pickle does
        return NotImplemented


def _load(path: str, material: tuple[str, ...]) -> CompiledTable | None:
    import gc

    try:
        from _pickle import load  # what pickle.load is: pickle.py itself would only add import time
    except ImportError:  # an interpreter without the C accelerator
        from pickle import load

    f = open_entry(path)
    if f is None:
        return None
    enabled = gc.isenabled()
    gc.disable()  # unpickling makes many objects and no cycles: collecting meanwhile only costs time
    try:
        with f:
            stored, table = load(f)
    except Exception:  # a corrupt or foreign entry is not an error: compile instead
        return None
    finally:
        if enabled:
            gc.enable()
    if stored != material:
        return None  # another table whose checksum is the same: compile, and the entry is replaced
    if not isinstance(table, CompiledTable) or not table.functions <= FUNCTIONS.keys():
        return None  # a function the table calls is not registered here: compiling says so
    return table


def _store(directory: str, path: str, material: tuple[str, ...], table: CompiledTable) -> None:
    import io
    import pickle
    import pickletools

    class Pickler(_Pickler, pickle.Pickler):
        def __init__(self, file: Any) -> None:
            pickle.Pickler.__init__(self, file, protocol=pickle.HIGHEST_PROTOCOL)

    def dump(f: BinaryIO) -> None:
        # Without the memo entries no later part refers to (most of them: a rule's own strings and
        # tuples), a load keeps a smaller memo: 10% faster for the built-in table, over 20% for a
        # table a hundred times its size. It costs the write (once per table) about a fifth of compiling.
        written = io.BytesIO()
        Pickler(written).dump((material, table))
        f.write(pickletools.optimize(written.getvalue()))

    try:
        write_entry(directory, path, dump, "table-*.pickle", MAX_ENTRIES)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # a cache that cannot be written only costs time


def cached_table(
    sources: Sequence[RuleSource],
    compile_sources: Callable[[Sequence[RuleSource]], CompiledTable],
    *,
    fingerprint: str = "",
) -> CompiledTable:
    """The compiled table for ``sources``: from the disk cache when an entry matches, else compiled
    and stored. ``fingerprint`` stands for what else ``compile_sources`` compiles (the flags' rules)."""
    directory = private_folder(create=True)
    if directory is None:  # off, or a folder another user could write
        return compile_sources(sources)
    material = _key_material(sources, fingerprint)
    path = os.path.join(directory, f"table-{_name(material)}.pickle")
    table = _load(path, material)
    if table is None:
        table = compile_sources(sources)
        _store(directory, path, material, table)
    return table


#: Compiled code kept per cache folder (``code-*.marshal``); the oldest are removed past this.
MAX_CODE_ENTRIES = 32


def compile_code(source: str, filename: str) -> types.CodeType:
    """The generated evaluation's ``source`` (:mod:`resolver._engine.codegen`) compiled, through the cache
    folder: compiling costs far more than writing the source, and the same table always writes the
    same source. An entry is executed, so it is read only from a folder and file that only this
    user can write (:func:`open_entry`). As a table's entry does, it holds what it was made from
    (the source, the file name, the Python version) and is used only when that matches exactly, so
    its name needs only a short checksum (``hashlib`` would cost the process about 4 ms)."""
    directory = private_folder(create=True)
    if directory is None:  # off, or a folder another user could write
        return compile(source, filename, "exec")
    import marshal  # here, not at the top: a process that resolves a few times never generates code
    from types import CodeType

    material = (f"format={CACHE_FORMAT}", f"python={sys.version}", filename, source)
    path = os.path.join(directory, f"code-{_name(material)}.marshal")
    f = open_entry(path)
    if f is not None:
        try:
            with f:
                stored, code = marshal.load(f)
            if stored == material and isinstance(code, CodeType):
                return code
        except (OSError, ValueError, EOFError, TypeError):
            pass  # truncated or foreign: compile again
    code = compile(source, filename, "exec")
    try:
        write_entry(
            directory, path, lambda out: marshal.dump((material, code), out), "code-*.marshal", MAX_CODE_ENTRIES
        )
    except OSError:
        pass  # a cache that cannot be written only costs time
    return code
