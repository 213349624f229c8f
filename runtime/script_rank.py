"""Entry point of one rank of ``resolver run``: ``python script_rank.py SCRIPT ARGS...``.

Runs ``SCRIPT`` as ``__main__`` (``sys.argv`` and ``sys.path[0]`` as if it had been started
directly). A script that never calls the runtime still has its exception reported to
``run_script``, which shows it once instead of "exited without reporting an error". Run by path,
not imported: it uses the standard library only, so a plain script pays no import of torch.
"""

import os
import sys

_SCRIPT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else ""
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(_SCRIPT)  # as `python SCRIPT` would have it (not this file's folder)

import json  # noqa: E402
import runpy  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from types import TracebackType  # noqa: E402

_INTERRUPTED_EXIT_CODE = 130


def _from_script(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the script's first frame on (this file's and runpy's frames dropped)."""
    while tb is not None and tb.tb_frame.f_code.co_filename != _SCRIPT:
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
    """Write the report ``runtime.launchers.reports.RankReports.read_error`` reads (unless the runtime did)."""
    directory = os.environ.get("RUNTIME_REPORT_DIR")
    if not directory or not os.path.isdir(directory):
        return
    path = os.path.join(directory, f"rank-{os.environ.get('RANK', '0')}.error.json")
    if os.path.exists(path):
        return
    tb = _from_script(exc.__traceback__) or exc.__traceback__
    data = {
        "rank": int(os.environ.get("RANK", "0")),
        "time": float(getattr(exc, "_runtime_failure_time", time.time())),
        "summary": "".join(traceback.format_exception_only(type(exc), exc)).strip(),
        "traceback": "".join(traceback.format_exception(type(exc), exc, tb)),
        "communication": _raised_in_torch_distributed(exc.__traceback__),
    }
    partial = f"{path}.partial"
    with open(partial, "w") as handle:
        json.dump(data, handle)
    os.replace(partial, path)


def main() -> None:
    if not _SCRIPT:
        sys.exit("usage: script_rank.py SCRIPT [ARGS...]")
    try:
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
