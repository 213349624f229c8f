"""Entry point of one rank of ``resolver run``: ``python runtime/_rank/main.py SCRIPT ARGS...`` or
``python runtime/_rank/main.py -m MODULE ARGS...``.

Runs ``SCRIPT`` as ``__main__`` (``sys.argv`` and ``sys.path[0]`` as if it had been started
directly), or ``MODULE`` as ``python -m MODULE`` would (``sys.argv[0]`` the module's file,
``sys.path[0]`` the current folder). A script that never calls the runtime still has its exception
reported to ``run_script``, which shows it once instead of "exited without reporting an error".
Run by path, not imported: it uses the standard library only, so a plain script pays no import of
torch.
"""

import os
import sys

_MODULE = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "-m" else ""
_SCRIPT = "" if _MODULE else (os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "")
sys.argv = sys.argv[2:] if _MODULE else sys.argv[1:]  # for a module, runpy sets argv[0] to its file
# as `python SCRIPT` / `python -m MODULE` would have it (not this file's folder)
sys.path[0] = os.getcwd() if _MODULE else os.path.dirname(_SCRIPT)

import json  # noqa: E402
import runpy  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from types import TracebackType  # noqa: E402

_INTERRUPTED_EXIT_CODE = 130
_OURS = {os.path.abspath(__file__), os.path.abspath(runpy.__file__)}


def _is_ours(filename: str) -> bool:
    """A frame of this file, of runpy or of the import machinery (``<frozen importlib._bootstrap>``)."""
    return filename.startswith("<frozen ") or os.path.abspath(filename) in _OURS


def _from_script(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the script's (or module's) first frame on (this file's and runpy's dropped).

    None when the exception never reached the user's code (``-m`` naming a module that is not there).
    """
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _raised_in_torch_distributed(tb: TracebackType | None) -> bool:
    package = sys.modules.get("torch.distributed")
    folders = list(getattr(package, "__path__", []))
    frames = traceback.extract_tb(tb)
    if not folders or not frames:
        return False
    return os.path.realpath(frames[-1].filename).startswith(os.path.join(os.path.realpath(folders[0]), ""))


def _report(exc: BaseException) -> None:
    """Write the report ``runtime._protocol.rank_files.RankFiles.read_error`` reads (unless the runtime did)."""
    directory = os.environ.get("RUNTIME_REPORT_DIR")
    if not directory or not os.path.isdir(directory):
        return
    path = os.path.join(directory, f"rank-{os.environ.get('RANK', '0')}.error.json")
    if os.path.exists(path):
        return
    tb = _from_script(exc.__traceback__)
    summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    if hasattr(exc, "hint"):  # an error of the runtime's or the resolver's, which are imported: rendered as
        # the runtime renders a rank's error (its fix as "  = help: ..." when it carries one as data)
        try:
            from runtime._protocol.rank_files import describe_exception
        except ImportError:
            pass
        else:
            summary = describe_exception(exc)[0]
    data = {
        "rank": int(os.environ.get("RANK", "0")),
        "time": float(getattr(exc, "_runtime_failure_time", time.time())),
        "summary": summary,
        # an error of runpy's own (no such module) is the summary alone, as `python -m` prints it
        "traceback": "".join(traceback.format_exception(type(exc), exc, tb)) if tb is not None else "",
        # gloo's own errors name their source file, also when raised in DDP's backward (autograd's frames last)
        "communication": _raised_in_torch_distributed(exc.__traceback__) or "/gloo/transport/" in summary,
    }
    partial = f"{path}.partial"
    with open(partial, "w") as handle:
        json.dump(data, handle)
    os.replace(partial, path)


def main() -> None:
    if not (_SCRIPT or _MODULE):
        sys.exit("usage: runtime/_rank/main.py SCRIPT [ARGS...] | -m MODULE [ARGS...]")
    try:
        if _MODULE:
            runpy.run_module(_MODULE, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(_SCRIPT, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:
        _report(exc)
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(_INTERRUPTED_EXIT_CODE if isinstance(exc, KeyboardInterrupt) else 1)


if __name__ == "__main__":
    main()
