"""``resolver run``: resolve, then start a script under the resolved launcher (like torchrun); with
:mod:`resolver.cli.check`, the only part of ``resolver`` that imports ``runtime`` (when it runs)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from resolver._engine.errors import ResolutionError, diagnostic
from resolver.cli.options import add_config, add_flags, timeout_option
from resolver.cli.shared import (
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_USAGE,
    as_typed,
    check_removed,
    environment_for,
    resolve_args,
    rule_files_for,
)

if TYPE_CHECKING:
    from resolver._domain.config import ResolvedConfig
    from resolver.cli.options import Parser

__all__ = ["add_options", "run"]

SUMMARY = "resolve, then start a script under the resolved launcher (like torchrun)"
DESCRIPTION = (
    "Resolve the flags, print a one-line summary, and start SCRIPT once per local device "
    "with torchrun-compatible variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). "
    "With -m, SCRIPT is a module, run as python -m would. Everything after SCRIPT (its --help "
    "too) is the script's own. Each line a rank prints is shown whole, prefixed with its rank "
    "([rank 1]: ...; --no-prefix leaves the prefix out); --log-dir also keeps one log file per rank."
)
EXAMPLES = (
    "resolver run --devices 2 --strategy ddp train.py --epochs 3",
    "resolver run --devices 2 --timeout 600 train.py",
    "resolver run --devices 2 -m mypackage.train --epochs 3",
    "resolver run --config train.toml train.py --help",
    "resolver run --devices 4 --log-dir logs --local-ranks-filter 0 train.py",
)
TRAILER = (
    EXIT_CODES + " Otherwise the script's own exit code: the first failing rank's (128+N when signal N killed it),"
    " 75 when every rank stopped on pre-emption, 124 when --timeout or --progress-timeout ran out, 130 after Ctrl-C."
)


def _progress_timeout(text: str) -> float:
    """``--progress-timeout``'s seconds: 0 (off) or a timeout in the usual range."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    return timeout_option("0 turns the progress watchdog off")(text)


def add_options(run: Parser) -> None:
    """``resolver run``'s options: the flags, ``--config``, the rank output, pre-emption, torchrun's options, SCRIPT."""
    add_flags(run, can_simulate=False)
    add_config(run)
    run.add_argument(
        "--timeout",
        type=timeout_option("leave --timeout out for no limit"),
        default=None,
        metavar="SECONDS",
        help="stop every rank (and fail) if the run takes longer than this",
    )
    run.add_argument(
        "--progress-timeout",
        type=_progress_timeout,
        default=None,
        metavar="SECONDS",
        help="the progress watchdog: once a rank made its first step, stop every rank (and fail, with each one's "
        "stack) when none made progress (an optimizer step, a collective, strategy.heartbeat()) for the larger of "
        "this and 10x the median step time; default: the strategy option progress_timeout, else 60; 0: off",
    )
    _add_rank_output_options(run)
    preemption = run.add_argument_group("pre-emption (docs/runtime.md, Surviving failures)")
    preemption.add_argument(
        "--preemption-signal",
        metavar="SIGNAL",
        default=None,
        help="the signal that announces pre-emption, e.g. SIGUSR1 (sbatch --signal=USR1@90): the ranks stop at "
        "the same strategy.preempted() check, the script saves and returns, and the run exits with status 75",
    )
    preemption.add_argument(
        "--requeue",
        action="store_true",
        help="with --preemption-signal, in a SLURM job: requeue the job (scontrol requeue) after the ranks saved",
    )
    from resolver.cli.torchrun import add_torchrun_options

    add_torchrun_options(run)
    run.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="run SCRIPT as a module, as `python -m SCRIPT` would (SCRIPT is then a module name)",
    )
    run.add_argument("script", metavar="SCRIPT", nargs="?", help="the Python script to run (or, with -m, the module)")
    run.add_argument(
        "script_args",
        metavar="ARGS",
        nargs=argparse.REMAINDER,
        help="arguments for the script, passed through untouched (everything after SCRIPT, --help too)",
    )


# --- each rank's output (runtime/launchers/rank_output.py does the work) ---


def _local_ranks(text: str) -> tuple[int, ...]:
    """``--local-ranks-filter 0,3`` (torchrun's spelling): local rank numbers, separated by commas."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(part.isascii() and part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of local rank numbers: expected numbers separated by commas, like 0,3"
        )
    return tuple(sorted({int(part) for part in parts}))


def _tee(text: str) -> int:
    """``--tee N`` (torchrun's values): 0 none, 1 stdout, 2 stderr, 3 both."""
    if text.strip() not in ("0", "1", "2", "3"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a stream selector: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)"
        )
    return int(text)


def _add_rank_output_options(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("rank output (every line is shown whole, prefixed with its rank: [rank 1]: ...)")
    output.add_argument(
        "--no-prefix",
        action="store_true",
        help="show each rank's lines without the [rank N]: prefix (still whole lines; the log files never have it)",
    )
    output.add_argument(
        "--log-dir",
        "--log_dir",
        metavar="DIR",
        default=None,
        help="also write each rank's output to DIR/rank_<N>.log (created; files are overwritten)",
    )
    output.add_argument(
        "-t",
        "--tee",
        metavar="STREAMS",
        type=_tee,
        default=None,
        help="streams that go to the log files as well as the console: 0 none, 1 stdout, 2 stderr, "
        "3 both (default: 3 with --log-dir; without --log-dir, a new folder is made and printed)",
    )
    output.add_argument(
        "--local-ranks-filter",
        "--local_ranks_filter",
        metavar="RANKS",
        type=_local_ranks,
        default=None,
        help="show only these local ranks on the console, e.g. 0,3 (the log files get every rank)",
    )


def run(args: argparse.Namespace) -> int:
    """Resolve, then start SCRIPT under the resolved launcher; its exit code (or 1 or 2 when it cannot start)."""
    try:
        check_removed(args)  # first: the flag may have taken the script's place as its value
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR
    from resolver.cli.torchrun import TorchrunOptionError, apply_torchrun_options

    try:
        read_as = apply_torchrun_options(args)
    except TorchrunOptionError as exc:
        print(diagnostic(exc), file=sys.stderr)
        return EXIT_USAGE
    problem = _target_problem(args.script, module=args.module, program=args.no_python)
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    for line in read_as:
        print(f"resolver: {line}", file=sys.stderr)
    try:
        rule_files = rule_files_for(args)
        environment = environment_for(None, rule_files)
        config = resolve_args(args, environment=environment, rules=args.rules or None)
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR
    print(f"resolver: {config.summary()}", file=sys.stderr, flush=True)
    try:
        import runtime
    except ImportError as exc:
        print(
            f"error: `resolver run` needs the runtime (torch): {exc}\n"
            "  = help: pip install 'training-flag-resolver[runtime]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        output = _rank_output(args, config)
        config = _with_preemption(args, config)
    except runtime.RuntimeConfigError as exc:
        print(diagnostic(exc), file=sys.stderr)
        return EXIT_USAGE
    if output.log_folder is not None:
        where = f"{output.log_folder}/rank_<N>.log"
        print(f"resolver: each rank's output is logged to {where}", file=sys.stderr, flush=True)
    try:
        return runtime.run_script(
            config,
            args.script,
            list(args.script_args),
            timeout=args.timeout,
            progress_timeout=args.progress_timeout,
            module=args.module,
            output=output,
            python=not args.no_python,
            role=args.role or "default",
            run_id=args.run_id,
            max_restarts=args.max_restarts,
            min_nodes=args.min_nodes,
            rendezvous_backend=args.rendezvous_backend,
            rendezvous_conf=args.rendezvous_conf,
            environment=environment,  # what a rank resolves a script's launch() flags against, with the rules
            # the flags file's and --rules' files (a rank reads RESOLVER_RULES itself, from its environment)
            rules=[rule_file.path for rule_file in rule_files if rule_file.kind != "variable"],
        )
    except runtime.PortInUseError as exc:  # its hint names the option typed, not resolve()'s keyword
        print(diagnostic(runtime.PortInUseError(exc.address, exc.port, as_typed(exc.source), exc.holder)),
              file=sys.stderr)  # fmt: skip
        return EXIT_ERROR
    except (runtime.RuntimeConfigError, runtime.MissingDependencyError) as exc:
        print(diagnostic(exc), file=sys.stderr)
        return EXIT_ERROR


def _rank_output(args: argparse.Namespace, config: ResolvedConfig) -> Any:
    """The ``RankOutput`` the options ask for; a ``RuntimeConfigError`` when a value cannot work for ``config``."""
    import tempfile

    from runtime import RankOutput

    output = RankOutput(
        prefix=not args.no_prefix,
        tee=3 if args.tee is None else args.tee,
        local_ranks_filter=args.local_ranks_filter,
        redirects=args.redirects,
    )
    output.check(config.num_devices)
    log_dir = args.log_dir
    if log_dir is None and (output.tee or output.redirects):
        if args.tee is None and not output.redirects:
            return output  # no --log-dir, no --tee, no --redirects: the console only
        log_dir = tempfile.mkdtemp(prefix="resolver-run-logs-")  # torchrun also makes one for --tee alone
    import attrs

    output = attrs.evolve(output, log_dir=log_dir)
    output.check(config.num_devices)
    return output


def _with_preemption(args: argparse.Namespace, config: ResolvedConfig) -> ResolvedConfig:
    """``config`` with ``--preemption-signal``/``--requeue`` as strategy options (the ranks read them there)."""
    if args.preemption_signal is None and not args.requeue:
        return config
    import attrs

    from runtime.errors import RuntimeConfigError
    from runtime.preemption import check_preemption_signal

    if args.preemption_signal is None:
        raise RuntimeConfigError(
            "--requeue requeues a pre-empted SLURM job, but no --preemption-signal is given",
            hint="add --preemption-signal SIGUSR1 (and submit with sbatch --signal=USR1@90 --requeue)",
        )
    try:
        check_preemption_signal(args.preemption_signal)
    except ValueError as exc:
        raise RuntimeConfigError(f"--preemption-signal: {exc}") from None
    options = {"preemption_signal": args.preemption_signal, "requeue": bool(args.requeue)}
    return attrs.evolve(config, strategy_options={**config.strategy_options, **options})


def _target_problem(target: str, *, module: bool, program: bool = False) -> str | None:
    """Why ``resolver run`` cannot start ``target`` (a script path, a module with ``-m``, or a program
    with ``--no-python``), or None."""
    if program:
        import shutil

        if shutil.which(target) is None:
            return (
                f"error: program {target!r} not found (--no-python runs SCRIPT as a program: a path, or a name "
                "on PATH)\n  = help: give the program's path, or drop --no-python to run a Python file"
            )
        return None
    if module:
        from resolver.cli.run_target import module_problem

        return module_problem(target)
    from resolver.cli.run_target import script_problem

    return script_problem(target)
