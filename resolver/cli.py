"""The ``resolver`` command: explain a resolution, run a script under it, check golden files.

Each command is a function here; its options and the parsing (one command's parser per process,
help written only when printed) are :mod:`resolver.cli_parser`'s.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

# before the engine: a `resolver explain` process runs without the garbage collector (see the module)
import resolver.cli_process  # noqa: F401
from resolver.api import builtin_table, load_rules, removed_flag_error, resolve
from resolver.cli_parser import _given_flags, _parse, removed_flags_given
from resolver.environment import Environment
from resolver.errors import ResolutionError, RuleTableError
from resolver.flags import FLAGS, collect_flags

if TYPE_CHECKING:
    from resolver.config import ResolvedConfig

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _rank_output(args: argparse.Namespace, config: ResolvedConfig) -> Any:
    """The ``RankOutput`` the options ask for; a ``RuntimeConfigError`` when a value cannot work for ``config``."""
    import tempfile

    from runtime.launchers.rank_output import RankOutput

    output = RankOutput(
        tee=3 if args.tee is None else args.tee, local_ranks_filter=args.local_ranks_filter, redirects=args.redirects
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
            "--requeue requeues a pre-empted SLURM job, but no --preemption-signal is given\n"
            "  hint: add --preemption-signal SIGUSR1 (and submit with sbatch --signal=USR1@90 --requeue)"
        )
    try:
        check_preemption_signal(args.preemption_signal)
    except ValueError as exc:
        raise RuntimeConfigError(f"--preemption-signal: {exc}") from None
    options = {"preemption_signal": args.preemption_signal, "requeue": bool(args.requeue)}
    return attrs.evolve(config, strategy_options={**config.strategy_options, **options})


def _resolve(args: argparse.Namespace, **keywords: Any) -> ResolvedConfig:
    """``resolve()`` with the command line's flags, over the flags file of ``--config`` if any."""
    flags = _flags(args)
    if args.config is None:
        return resolve(**flags, **keywords)
    from resolver.flagsfile import load_flags_file

    given = _given_flags(args.argv, args.command) & set(flags)
    file = load_flags_file(args.config).without(given)
    return resolve(**{k: v for k, v in flags.items() if k in given}, config_file=file, **keywords)


def _environment(spec: str | None, rules: list[str]) -> Environment:
    """The simulated machine, or the real one probed for every variable the rules (with ``rules``) read."""
    if spec is not None:
        from resolver.simulate import simulate

        return simulate(spec)
    return Environment.probe(table=load_rules(rules) if rules else builtin_table())


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags = collect_flags(vars(args))
    flags.update({flag.name: tuple(flags[flag.name]) for flag in FLAGS if flag.repeatable})
    return flags


def _check_removed(args: argparse.Namespace) -> None:
    """A removed flag on the command line (either spelling, with or without a value) is an error
    with the replacement, as ``resolve()`` gives it."""
    for name, spelling, value in removed_flags_given(args):
        error = removed_flag_error(builtin_table(), name, value, cli=True, spelling=spelling)
        if error is not None:
            raise error


def _explain(args: argparse.Namespace) -> int:
    from resolver.explain import explain_json, explain_text
    from resolver.reporter import RecordingReporter

    # every decision is recorded only for what shows it: the plain table needs the fields alone
    trace = RecordingReporter() if args.verbose or args.format == "dot" else None
    environment: Environment | None = None
    config: ResolvedConfig | None = None
    failure: ResolutionError | None = None
    try:
        environment = _environment(args.simulate, args.rules)
        _check_removed(args)
        config = _resolve(args, environment=environment, rules=args.rules or None, reporter=trace)
    except ResolutionError as error:
        failure = error
    if args.format == "json":
        print(explain_json(config, trace, failure, environment=environment, verbose=args.verbose))
    elif args.format == "dot":
        from resolver.decision_graph import decision_graph

        table = load_rules(args.rules) if args.rules else builtin_table()
        assert trace is not None
        sys.stdout.write(decision_graph(trace, table, error=failure, everything=args.verbose))
        if failure is not None:
            print(failure.diagnostic(), file=sys.stderr)
    elif failure is not None:
        print(failure.diagnostic(), file=sys.stderr)
    else:
        assert config is not None
        print(explain_text(config, trace, verbose=args.verbose))
    return EXIT_OK if failure is None else EXIT_ERROR


def _env(args: argparse.Namespace) -> int:
    from resolver.envreport import collect

    report = collect()
    print(report.to_json() if args.format == "json" else report.to_text())
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    try:
        _check_removed(args)  # first: the flag may have taken the script's place as its value
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR
    from resolver.cli_torchrun import TorchrunOptionError, apply_torchrun_options

    try:
        read_as = apply_torchrun_options(args)
    except TorchrunOptionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = _target_problem(args.script, module=args.module, program=args.no_python)
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    for line in read_as:
        print(f"resolver: {line}", file=sys.stderr)
    try:
        config = _resolve(args, environment=_environment(None, args.rules), rules=args.rules or None)
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
        print(f"error: {exc}", file=sys.stderr)
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
            module=args.module,
            output=output,
            python=not args.no_python,
            role=args.role or "default",
            run_id=args.run_id,
            max_restarts=args.max_restarts,
        )
    except (runtime.PortInUseError, runtime.RuntimeConfigError, runtime.MissingDependencyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _check(args: argparse.Namespace) -> int:
    """``resolver check``: resolve, then prove the setup works (``runtime.preflight``)."""
    if not args.timeout > 0:
        print(f"error: --timeout must be a positive number of seconds, got {args.timeout:g}", file=sys.stderr)
        return EXIT_USAGE
    try:
        _check_removed(args)
        config = _resolve(args, environment=_environment(None, args.rules), rules=args.rules or None)
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR
    try:
        import runtime
        from runtime.preflight import check_config
    except ImportError as exc:
        print(
            f"error: `resolver check` needs the runtime (torch): {exc}\n"
            "  = help: pip install 'training-flag-resolver[runtime]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        report = check_config(config, timeout=args.timeout)
    except (runtime.RuntimeConfigError, runtime.MissingDependencyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if config.launcher is None and config.global_rank != 0:
        # a rank of a job someone else started: rank 0 prints the run's report; this rank only its failures
        if not report.ok:
            for check in report.failed:
                print(f"resolver check: rank {config.global_rank}: {check.name}: {check.detail}", file=sys.stderr)
        return EXIT_OK if report.ok else EXIT_ERROR
    print(report.to_json() if args.format == "json" else report.to_text())
    return EXIT_OK if report.ok else EXIT_ERROR


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
        from resolver.runtarget import module_problem

        return module_problem(target)
    from resolver.runtarget import script_problem

    return script_problem(target)


def _golden(args: argparse.Namespace) -> int:
    from resolver import golden

    failures = 0
    paths = golden.scenario_paths(args.paths)
    for path in paths:
        scenario = golden.load_scenario(path)
        if args.update:
            if golden.update(scenario, args.rules or None):
                print(f"updated {path}")
            continue
        problems = golden.check(scenario, args.rules or None)
        if problems:
            failures += 1
            print(f"FAIL {path}")
            for problem in problems:
                print(f"  {problem}")
    if not args.update:
        print(f"{len(paths) - failures} passed, {failures} failed")
    return EXIT_ERROR if failures else EXIT_OK


def _rules(args: argparse.Namespace) -> int:
    from resolver.ruledoc import rules_markdown

    text = rules_markdown(load_rules(args.rules))
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    from pathlib import Path

    out = Path(args.output)
    try:
        if args.check:
            if not out.exists() or out.read_text(encoding="utf-8") != text:
                state = "is stale" if out.exists() else "does not exist"
                print(f"{out} {state}: regenerate it with `resolver rules --output {out}`", file=sys.stderr)
                return EXIT_ERROR
            return EXIT_OK
        out.write_text(text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        print(
            f"error: cannot {'read' if args.check else 'write'} {out}: {reason}\n"
            "  = help: pass --output a file in a folder that exists and that you can write",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_OK


def _before_exit() -> None:
    """This process exits next: spare the interpreter its final garbage collection of everything
    it made (every module, class and function, and the rule table: tens of thousands of objects in
    reference cycles, which takes longer than explaining). The memory goes back to the OS with the
    process. Only for ``explain``, whose objects hold no open file and no finalizer."""
    import gc

    gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (default: this process's command line, which then exits)."""
    handlers = {"explain": _explain, "run": _run, "check": _check, "env": _env, "golden": _golden, "rules": _rules}
    try:
        args = _parse(argv)  # inside: the options come from the rule table, which a broken plugin breaks
        code = handlers[args.command](args)
        sys.stdout.flush()  # here, so that a closed pipe is seen below and not at exit
        if argv is None and args.command == "explain":
            _before_exit()
        if argv is None and args.command == "check":
            # The report is out: end without the interpreter's shutdown, where gloo's threads can
            # abort a rank ("terminate called without an active exception": exit 134 under mpirun,
            # after a check that passed; seen once in CI's run).
            sys.stderr.flush()
            os._exit(code)
        return code
    except BrokenPipeError:
        # the reader stopped early (`resolver explain | head`): say nothing more, like `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except RuleTableError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
