"""``resolver check``: resolve, then prove the setup works (``runtime.preflight``); with
:mod:`resolver.cli.run`, the only part of ``resolver`` that imports ``runtime`` (when it runs)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from resolver._engine.errors import ResolutionError, diagnostic
from resolver.cli.options import add_config, add_flags, timeout_option
from resolver.cli.shared import (
    EXIT_ERROR,
    EXIT_OK,
    as_typed,
    check_removed,
    environment_for,
    resolve_args,
    rule_files_for,
)

if TYPE_CHECKING:
    from resolver.cli.options import Parser

__all__ = ["add_options", "run"]

SUMMARY = "prove the resolved setup works: rendezvous, agreement, collectives, speed"
DESCRIPTION = (
    "Resolve the flags, start the ranks (or, under srun, mpirun or torchrun -m resolver check, "
    "run as this rank) and "
    "check, each step bounded by --timeout: every rank reaches rank 0's address and port; all ranks resolved "
    "the same config on the same software; barrier, all_reduce, broadcast and all_gather give the right "
    "values; each rank reaches the next (a ring, so a broken pair of hosts is named); and how fast each "
    "collective is. One line per check; a failure names the rank, host and fix."
)
EXAMPLES = (
    "resolver check --devices 2",
    "resolver check --devices 4 --timeout 5 --format json",
    "resolver check --num-nodes 2 --node-rank 1 --master-addr node-0 --master-port 29500",
)
TRAILER = (
    "exit codes: 0 every check passed, 1 a check failed (the report says which), 2 usage error, "
    "130 interrupted (Ctrl-C), 143 stopped by SIGTERM."
)
#: The exit status after Ctrl-C, as a shell reports a process that SIGINT ended.
EXIT_INTERRUPTED = 130


def add_options(check: Parser) -> None:
    """``resolver check``'s options: the flags, ``--config``, ``--timeout``, ``--format``."""
    add_flags(check, can_simulate=False)
    add_config(check)
    check.add_argument(
        "--timeout",
        type=timeout_option("leave --timeout out for 10 s"),
        default=10.0,
        metavar="SECONDS",
        help="the longest any step may take before the check names who it waits for (default: 10)",
    )
    check.add_argument("--format", choices=("text", "json"), default="text", help="text (default), or json")


def run(args: argparse.Namespace) -> int:
    """``resolver check``: resolve, then prove the setup works (``runtime.preflight``)."""
    try:
        check_removed(args)
        config = resolve_args(args, environment=environment_for(None, rule_files_for(args)), rules=args.rules or None)
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR
    try:
        import runtime
        from runtime.preflight import check_config
        from runtime.preflight.prestart import quiet_torch_log
    except ImportError as exc:
        print(
            f"error: `resolver check` needs the runtime (torch): {exc}\n"
            "  = help: pip install 'training-flag-resolver[runtime]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    # before torch loads here (a rank under srun, torchrun) or in the ranks started here: the check
    # reports each failure itself, without c10d's retry warnings and their C++ stacks
    quiet_torch_log(os.environ)
    try:
        given = config.provenance.get("main_port") if config.main_port else None
        port_source = as_typed("master_port") if given is not None and given.kind == "flag" else None
        report = check_config(config, timeout=args.timeout, port_source=port_source, reporter=_show_step)
    except (runtime.RuntimeConfigError, runtime.MissingDependencyError) as exc:
        print(diagnostic(exc), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl-C: the ranks were stopped and the check's folder removed on the way out
        print("resolver check: interrupted; every rank was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    if config.launcher is None and config.global_rank != 0:
        # a rank of a job someone else started: rank 0 prints the run's report; this rank only its failures
        if not report.ok:
            for check in report.failed:
                print(f"resolver check: rank {config.global_rank}: {check.name}: {check.detail}", file=sys.stderr)
                if check.fix:
                    print(f"  = help: {check.fix}", file=sys.stderr)
        return EXIT_OK if report.ok else EXIT_ERROR
    print(report.to_json() if args.format == "json" else report.to_text())
    return EXIT_OK if report.ok else EXIT_ERROR


def _show_step(check: Any, seconds: float) -> None:
    """Each step on stderr as it passes (the report, on stdout, follows at the end)."""
    from runtime.preflight.progress import progress_line

    print(progress_line(check, seconds), file=sys.stderr, flush=True)
