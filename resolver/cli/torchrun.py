"""torchrun's options on ``resolver run``: a torchrun command line works with torchrun's meaning.

Each option is read into the flags (``--nproc-per-node 2`` is ``--devices 2``, ``--nnodes 2`` is
``--num-nodes 2``, ``--rdzv-endpoint host:port`` is ``--master-addr host --master-port port``), and
``resolver run`` prints what it read each one as, so the flags' provenance in the summary and in
``resolver explain`` is the whole story. An option of torchrun's that has no equivalent here is an
error that says so: nothing a torchrun user passes is silently ignored.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from resolver._domain.flags import FLAG_DEFAULTS

__all__ = ["TorchrunOptionError", "add_torchrun_options", "apply_torchrun_options"]

#: torchrun's default port for a c10d rendezvous endpoint given without one.
_C10D_DEFAULT_PORT = 29400

#: torchrun options with no equivalent in ``resolver run``, and what to do instead.
_NO_EQUIVALENT: dict[str, str] = {
    "monitor-interval": "resolver run watches its ranks by events, it does not poll: drop it",
    "event-log-handler": "resolver run writes no torchelastic events: drop it",
    "local-addr": "each rank's address comes from the flags and the cluster: drop it",
    "logs-specs": "use --log-dir, --tee and --redirects",
    "numa-binding": "bind ranks yourself (numactl in the script's command) or drop it",
    "signals-to-handle": "resolver run stops every rank on SIGINT and SIGTERM: drop it",
    "shutdown-timeout": "resolver run stops ranks itself: drop it",
    "virtual-local-rank": "every rank sees its own LOCAL_RANK: drop it",
    "duplicate-stdout-filters": "use --log-dir with --tee and grep the logs",
    "duplicate-stderr-filters": "use --log-dir with --tee and grep the logs",
}
_FLAG_OPTIONS = ("nproc-per-node", "nnodes", "rdzv-endpoint", "rdzv-backend", "rdzv-id", "max-restarts",
                 "start-method", "role")  # fmt: skip


class TorchrunOptionError(ValueError):
    """A torchrun option that cannot be read as torchrun means it: ``message``, and the fix as ``hint``
    (the command line renders both with :func:`~resolver._engine.errors.diagnostic`)."""

    def __init__(self, message: str, *, hint: str) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message}\n  hint: {hint}")


def _spellings(name: str) -> tuple[str, str]:
    return f"--{name}", f"--{name.replace('-', '_')}"


def add_torchrun_options(parser: argparse.ArgumentParser) -> None:
    """torchrun's spellings, in their own group of ``resolver run --help``."""
    group = parser.add_argument_group("torchrun's options (read as the flags above; resolver run prints how)")
    group.add_argument(
        *_spellings("nproc-per-node"),
        dest="torchrun_nproc_per_node",
        metavar="N",
        help="processes per node: a number (--devices N), gpu (every GPU), cpu (one per CPU "
        "core) or auto (gpu where there are GPUs, else cpu)",
    )
    group.add_argument(
        "--nnodes",
        dest="torchrun_nnodes",
        metavar="N",
        help="number of nodes (--num-nodes N); with --max-restarts the nodes restart together; MIN:MAX: "
        "elastic membership through torch's c10d rendezvous (--num-nodes MAX; each round runs on the nodes "
        "there, at least MIN: one lost leaves the others, one started later joins at the next round)",
    )
    group.add_argument(
        "--standalone",
        action="store_true",
        dest="torchrun_standalone",
        help="one node, rendezvous on this host at a free port (what resolver run does on one node)",
    )
    group.add_argument(
        *_spellings("rdzv-endpoint"),
        dest="torchrun_rdzv_endpoint",
        metavar="HOST[:PORT]",
        help="rank 0's host and port (--master-addr HOST --master-port PORT; port 29400 if left out)",
    )
    group.add_argument(
        *_spellings("rdzv-backend"),
        dest="torchrun_rdzv_backend",
        metavar="NAME",
        help="static or c10d: both meet at the endpoint here; nodes that restart together (--nnodes above 1 with "
        "--max-restarts) join torch's c10d rendezvous there",
    )
    group.add_argument(
        *_spellings("rdzv-conf"),
        dest="torchrun_rdzv_conf",
        metavar="KEY=VALUE,...",
        help="settings of the c10d rendezvous that nodes restarting together join (--nnodes above 1 with "
        "--max-restarts, or MIN:MAX), e.g. join_timeout=120,is_host=1; with MIN:MAX, unless given here: "
        "last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=4 (torch's: 30, 5, 3)",
    )
    group.add_argument(
        *_spellings("rdzv-id"),
        dest="torchrun_rdzv_id",
        metavar="ID",
        help="the job's id: the ranks see it as TORCHELASTIC_RUN_ID",
    )
    group.add_argument(
        *_spellings("max-restarts"),
        dest="torchrun_max_restarts",
        metavar="N",
        help="after a rank fails, stop the others and start every rank again, at most N times "
        "(the ranks see the attempt in TORCHELASTIC_RESTART_COUNT; default 0)",
    )
    group.add_argument(
        *_spellings("start-method"),
        dest="torchrun_start_method",
        metavar="METHOD",
        help="spawn only: every rank is a new interpreter running the script",
    )
    group.add_argument(
        "--role", dest="torchrun_role", metavar="NAME", help="the workers' role: the ranks see it as ROLE_NAME"
    )
    group.add_argument(
        *_spellings("no-python"),
        action="store_true",
        dest="torchrun_no_python",
        help="SCRIPT is a program to execute, not a Python file (no -m)",
    )
    group.add_argument(
        *_spellings("run-path"),
        action="store_true",
        dest="torchrun_run_path",
        help="run SCRIPT by its path in a Python interpreter (what resolver run always does)",
    )
    group.add_argument(
        "-r",
        "--redirects",
        dest="torchrun_redirects",
        metavar="STREAMS",
        help="streams that go to the log files only, not the console: 0 none, 1 stdout, 2 stderr, 3 both",
    )
    for name in _NO_EQUIVALENT:
        group.add_argument(
            *_spellings(name),
            dest=f"torchrun_unsupported_{name.replace('-', '_')}",
            nargs="?",
            const="",
            default=None,
            help=argparse.SUPPRESS,
        )


def _count(option: str, text: str) -> int:
    value = text.strip()
    if value.isascii() and value.isdigit() and int(value) >= 1:
        return int(value)
    extra = ", or gpu, cpu or auto" if option == "--nproc-per-node" else ""
    raise TorchrunOptionError(f"{option} {text!r}: expected a whole number of at least 1{extra}",
                              hint=f"e.g. {option} 2")  # fmt: skip


def _nodes(text: str) -> tuple[int, int]:
    """``--nnodes N`` or ``MIN:MAX``: (least, most) nodes."""
    low, sep, high = text.partition(":")
    least = _count("--nnodes", low)
    most = _count("--nnodes", high) if sep else least
    if most < least:
        raise TorchrunOptionError(
            f"--nnodes {text}: the least number of nodes ({least}) is above the most ({most})",
            hint=f"write MIN:MAX with MIN at most MAX, e.g. --nnodes {most}:{least}",
        )
    return least, most


def _processes(text: str) -> tuple[str | None, int]:
    """``--nproc-per-node``: (accelerator or None, devices) as torchrun reads the value."""
    value = text.strip().lower()
    if value == "gpu":
        return "gpu", -1
    if value == "cpu":
        return "cpu", os.cpu_count() or 1
    if value == "auto":
        from resolver._snapshot.environment import Environment

        return ("gpu", -1) if Environment.probe().cuda_device_count > 0 else ("cpu", os.cpu_count() or 1)
    return None, _count("--nproc-per-node", text)


def _endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or "]" in port:  # no port (or a bare IPv6 address in brackets)
        return text.strip().strip("[]"), _C10D_DEFAULT_PORT
    if not host:
        raise TorchrunOptionError(
            f"--rdzv-endpoint {text!r}: expected HOST or HOST:PORT", hint="e.g. --rdzv-endpoint node0:29400"
        )
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise TorchrunOptionError(
            f"--rdzv-endpoint {text!r}: the port must be a number between 1 and 65535",
            hint="e.g. --rdzv-endpoint node0:29400",
        )
    return host.strip("[]"), int(port)


def _settings(text: str) -> dict[str, str]:
    """``--rdzv-conf key=value,key=value`` as torchrun writes it (which keys count is the runtime's to say)."""
    settings: dict[str, str] = {}
    for part in filter(None, (item.strip() for item in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise TorchrunOptionError(
                f"--rdzv-conf {text!r}: {part!r} is not KEY=VALUE", hint="e.g. --rdzv-conf join_timeout=120,is_host=1"
            )
        settings[key.strip()] = value.strip()
    return settings


def _streams(text: str) -> int:
    value = text.strip()
    if value in ("0", "1", "2", "3"):
        return int(value)
    raise TorchrunOptionError(
        f"--redirects {text!r}: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both); per-rank values "
        "(0:1,1:2) are not supported",
        hint="redirect the same streams for every rank",
    )


def _set(args: argparse.Namespace, flag: str, value: Any, option: str, notes: list[str]) -> None:
    """Set ``flag`` from a torchrun option, unless the flag was given another value on the command line."""
    default = FLAG_DEFAULTS.get(flag)
    current = getattr(args, flag)
    if current not in (default, value):
        raise TorchrunOptionError(
            f"{option} says {flag.replace('_', '-')}={value}, but --{flag.replace('_', '-')} says {current}",
            hint="give one of them",
        )
    setattr(args, flag, value)
    notes.append(f"{option} read as --{flag.replace('_', '-')} {value}")


def apply_torchrun_options(args: argparse.Namespace) -> list[str]:
    """Read the torchrun options in ``args`` into its flags, and into ``args.role``/``args.run_id``
    (what the ranks see as ROLE_NAME/TORCHELASTIC_RUN_ID; None: the defaults), ``args.min_nodes`` (the least
    number of nodes of ``--nnodes MIN:MAX``; None: a fixed count), ``args.no_python`` and
    ``args.redirects``; return one line per option saying what it was read as. Raises
    :class:`TorchrunOptionError` for an option with no equivalent or a value that disagrees with a flag."""
    notes: list[str] = []
    for name in _NO_EQUIVALENT:
        if getattr(args, f"torchrun_unsupported_{name.replace('-', '_')}") is not None:
            raise TorchrunOptionError(
                f"torchrun's --{name} has no equivalent in resolver run", hint=_NO_EQUIVALENT[name]
            )
    args.role = args.run_id = args.min_nodes = None
    args.rendezvous_conf = None if args.torchrun_rdzv_conf is None else _settings(args.torchrun_rdzv_conf)
    args.rendezvous_backend = None if args.torchrun_rdzv_backend is None else args.torchrun_rdzv_backend.strip().lower()
    args.no_python = bool(args.torchrun_no_python)
    args.redirects = 0 if args.torchrun_redirects is None else _streams(args.torchrun_redirects)
    if args.no_python and args.module:
        raise TorchrunOptionError(
            "--no-python and -m cannot go together: -m runs a Python module", hint="drop one of them"
        )
    if args.torchrun_nproc_per_node is not None:
        accelerator, devices = _processes(args.torchrun_nproc_per_node)
        option = f"--nproc-per-node {args.torchrun_nproc_per_node}"
        if accelerator is not None:
            _set(args, "accelerator", accelerator, option, notes)
        _set(args, "devices", devices, option, notes)
    if args.torchrun_nnodes is not None:
        least, most = _nodes(args.torchrun_nnodes)
        _set(args, "num_nodes", most, f"--nnodes {args.torchrun_nnodes}", notes)
        if least < most:
            args.min_nodes = least
            notes.append(f"--nnodes {args.torchrun_nnodes}: each round runs on the nodes the c10d rendezvous gathers, "
                         f"at least {least}; world size and ranks are placed again each round")  # fmt: skip
    if args.torchrun_standalone:
        if args.num_nodes not in (None, 1):
            raise TorchrunOptionError(
                f"--standalone runs one node, but the run asks for {args.num_nodes} nodes",
                hint="drop --standalone on a multi-node run and give rank 0's address "
                "(--rdzv-endpoint or --master-addr)",
            )
        if args.torchrun_rdzv_endpoint is not None or args.master_addr is not None:
            raise TorchrunOptionError(
                "--standalone picks the rendezvous itself (this host, a free port), but an endpoint was given too",
                hint="give one of them",
            )
        notes.append("--standalone: one node, rendezvous on this host at a free port")
        if args.torchrun_rdzv_id is None:
            import uuid

            args.run_id = str(uuid.uuid4())  # as torchrun's standalone run
    backend = (args.torchrun_rdzv_backend or "static").strip().lower()
    if backend not in ("static", "c10d"):
        raise TorchrunOptionError(
            f"--rdzv-backend {args.torchrun_rdzv_backend}: resolver run meets at rank 0's address (static or c10d), "
            f"it has no {backend} rendezvous",
            hint="use --rdzv-backend c10d with --rdzv-endpoint HOST:PORT",
        )
    if args.torchrun_rdzv_endpoint is not None:
        host, port = _endpoint(args.torchrun_rdzv_endpoint)
        option = f"--rdzv-endpoint {args.torchrun_rdzv_endpoint}"
        _set(args, "master_addr", host, option, notes)
        _set(args, "master_port", port, option, notes)
    if args.torchrun_rdzv_id is not None:
        args.run_id = args.torchrun_rdzv_id
        notes.append(f"--rdzv-id {args.torchrun_rdzv_id}: the ranks see TORCHELASTIC_RUN_ID={args.torchrun_rdzv_id}")
    args.max_restarts = 0
    if args.torchrun_max_restarts is not None:
        text = args.torchrun_max_restarts.strip()
        if not text.isdigit():
            raise TorchrunOptionError(
                f"--max-restarts {args.torchrun_max_restarts}: not a number of restarts",
                hint="pass a whole number, 0 or more (e.g. --max-restarts 2)",
            )
        args.max_restarts = int(text)
    if args.torchrun_start_method is not None and args.torchrun_start_method.strip() != "spawn":
        raise TorchrunOptionError(
            f"--start-method {args.torchrun_start_method}: every rank of resolver run is a new interpreter running "
            "the script (spawn)",
            hint="drop it, or use runtime.launch(..., strategy='ddp_fork') in the script",
        )
    if args.torchrun_role is not None:
        args.role = args.torchrun_role
        notes.append(f"--role {args.torchrun_role}: the ranks see ROLE_NAME={args.torchrun_role}")
    return notes
