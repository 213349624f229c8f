"""The ``resolver`` command: explain a resolution, run a script under it, check golden files."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from resolver.api import builtin_table, load_rules, removed_flag_error, resolve
from resolver.config import ResolvedConfig
from resolver.environment import Environment
from resolver.errors import ResolutionError, RuleTableError
from resolver.explain import explain_json, explain_text
from resolver.integers import parse_int
from resolver.reporter import RecordingReporter
from resolver.simulate import SIMULATE_HELP, simulate

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

_EXIT_CODES = "exit codes: 0 resolved, 1 resolution error (conflict or invalid input), 2 usage error."

_EPILOG = f"""\
{_EXIT_CODES}

examples:
  resolver explain --devices 2 --strategy ddp
  resolver explain --devices 8 --simulate cuda=8,slurm
  resolver explain --simulate my-cluster-node.toml --format json
  resolver run --devices 2 --strategy ddp train.py --epochs 3
  resolver env
  resolver golden tests/golden
  resolver rules --output docs/rules.md

`resolver COMMAND --help` describes each command, with examples.
"""

#: Each subcommand's examples (its --help ends with them; a test parses every one).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "explain": (
        "resolver explain --devices 2 --strategy ddp",
        "resolver explain --devices 8 --simulate cuda=8,slurm",
        "resolver explain --simulate my-cluster-node.toml,interactive --verbose",
        "resolver explain --devices 2 --format json --verbose",
        "resolver explain --devices 4 --simulate cuda=8,slurm --format dot > decision.dot",
    ),
    "run": (
        "resolver run --devices 2 --strategy ddp train.py --epochs 3",
        "resolver run --devices 2 --timeout 600 train.py",
    ),
    "env": (
        "resolver env",
        "resolver env --format json",
    ),
    "golden": (
        "resolver golden tests/golden",
        "resolver golden --update my-cluster/",
        "resolver golden --rules site.toml my-cluster/",
    ),
    "rules": (
        "resolver rules --output docs/rules.md",
        "resolver rules --output docs/rules.md --check",
        "resolver rules --rules site.toml",
    ),
}


def _epilog(command: str, extra: str = "") -> str:
    examples = "\n".join(f"  {line}" for line in EXAMPLES[command])
    return (extra + "\n\n" if extra else "") + f"examples:\n{examples}\n"


def _devices(text: str) -> int | str:
    number = parse_int(text)
    return text.strip() if number is None else number


def _add_flags(parser: argparse.ArgumentParser, *, can_simulate: bool = True) -> None:
    flags = parser.add_argument_group("flags (as for resolver.resolve)")
    flags.add_argument("--accelerator", default="auto", help="auto, cpu, cuda, gpu, mps, xla or tpu (default: auto)")
    flags.add_argument(
        "--devices", default="auto", type=_devices, help="auto, N, -1 (all), '0,1' or '1,' (ids) (default: auto)"
    )
    flags.add_argument(
        "--strategy",
        default="auto",
        help="auto, single_device, ddp, ddp_spawn, ddp_fork, ddp_notebook, fsdp, deepspeed, xla, "
        "single_xla, horovod, or a registered name (default: auto)",
    )
    flags.add_argument(
        "--precision",
        default=None,
        help="32-true, 16-mixed, bf16-mixed, 16-true, bf16-true, 64-true (legacy 16, 32, 64, bf16); default: 32-true",
    )
    flags.add_argument("--num-nodes", default=1, type=int, help="number of machines (default: 1)")
    flags.add_argument(
        "--cluster-environment",
        default="auto",
        help="auto, local, torchelastic, slurm, lsf, mpi, kubeflow or xla (default: auto, detected)",
    )
    flags.add_argument(
        "--plugin",
        action="append",
        default=[],
        dest="plugins",
        metavar="NAME",
        help="a cluster environment or precision given as a plugin (repeatable)",
    )
    where = parser.add_argument_group("rules and machine")
    where.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="FILE",
        help="an extra rule file (or folder) on top of the built-in table (repeatable)",
    )
    if can_simulate:
        where.add_argument(
            "--simulate",
            metavar="SPEC",
            help="resolve for a machine you are not on instead of probing this one: " + SIMULATE_HELP,
        )
    for name in builtin_table().removed:  # removed flags are data (rules/90-removed.toml)
        parser.add_argument(f"--{name.replace('_', '-')}", dest=f"removed_{name}", default=None, help=argparse.SUPPRESS)


class _VersionAction(argparse.Action):
    """``--version``, reading the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from resolver.envreport import resolver_version

        print(f"resolver {resolver_version()}")
        parser.exit()


def _subcommand(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str, description: str, extra: str = ""
) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=summary,
        description=textwrap.fill(description, 88),
        epilog=_epilog(name, extra),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="resolver",
        description="Resolve distributed-training flags against a machine, and say why.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    explain = _subcommand(
        sub,
        "explain",
        "print each resolved field, its value and why",
        "Resolve the flags for this machine (or a simulated one) and print each resolved field, its "
        "value and why; on failure, a diagnostic naming both sides and the fix. --format json gives "
        "the same as data, --format dot the decision graph for Graphviz.",
        _EXIT_CODES,
    )
    _add_flags(explain)
    explain.add_argument(
        "--format",
        choices=("text", "json", "dot"),
        default="text",
        help="text (default), json (schema_version, environment, config or error), or dot (the decision "
        "graph, for Graphviz: dot -Tsvg)",
    )
    explain.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also show every intermediate decision (text: extra rows; json: a `decisions` list; dot: all nodes)",
    )

    run = _subcommand(
        sub,
        "run",
        "resolve, then start a script under the resolved launcher (like torchrun)",
        "Resolve the flags, print a one-line summary, and start SCRIPT once per local device with "
        "torchrun-compatible variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).",
        _EXIT_CODES + " Otherwise the script's own exit code.",
    )
    _add_flags(run, can_simulate=False)
    run.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                     help="stop every rank (and fail) if the run takes longer than this")
    run.add_argument("script", help="the Python script to run")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")

    env = _subcommand(
        sub,
        "env",
        "print this machine's versions, devices, cluster and variables, for a bug report",
        "Print what a bug report needs: resolver, Python and OS versions; torch (with its CUDA, cuDNN and "
        "NCCL versions), torch_xla, horovod and deepspeed versions or 'not installed'; the devices "
        "and the cluster detected; the relevant environment variables, with secret-like values "
        "(tokens, passwords, keys) masked. Imports torch only when it is installed.",
    )
    env.add_argument("--format", choices=("text", "json"), default="text", help="text to paste (default), or json")

    golden = _subcommand(
        sub,
        "golden",
        "check golden scenario files against the rules (or --update them)",
        "Resolve each golden scenario (TOML: [flags], [environment], [expect]) and compare the "
        "outcome with its [expect] table; --update rewrites [expect] from the current rules "
        "(review the diff). Exit code 1 when a scenario fails.",
    )
    golden.add_argument("paths", nargs="+", help="scenario files or folders of them")
    golden.add_argument("--update", action="store_true", help="rewrite each [expect] from the current rules")
    golden.add_argument("--rules", action="append", default=[], metavar="FILE", help="an extra rule file (repeatable)")

    rules = _subcommand(
        sub,
        "rules",
        "write the rule table as Markdown (docs/rules.md)",
        "Write every rule of the table as Markdown, with the stage pipeline and the slot dependency "
        "graph as Mermaid diagrams; --check exits 1 when --output is stale.",
    )
    rules.add_argument("--rules", action="append", default=[], metavar="FILE", help="an extra rule file (repeatable)")
    rules.add_argument("--output", metavar="FILE", help="write here instead of standard output")
    rules.add_argument("--check", action="store_true", help="exit 1 if --output differs from what would be written")
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; an unknown option is reported with the usage of the subcommand it was given to."""
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _environment(spec: str | None, rules: list[str]) -> Environment:
    """The simulated machine, or the real one probed for every variable the rules (with ``rules``) read."""
    if spec is not None:
        return simulate(spec)
    return Environment.probe(table=load_rules(rules) if rules else builtin_table())


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "accelerator": args.accelerator,
        "devices": args.devices,
        "strategy": args.strategy,
        "precision": args.precision,
        "num_nodes": args.num_nodes,
        "cluster_environment": args.cluster_environment,
        "plugins": tuple(args.plugins),
    }


def _check_removed(args: argparse.Namespace) -> None:
    for name in builtin_table().removed:
        value = getattr(args, f"removed_{name}")
        if value is not None:
            error = removed_flag_error(builtin_table(), name, value, cli=True)
            if error is not None:
                raise error


def _explain(args: argparse.Namespace) -> int:
    trace = RecordingReporter()
    environment: Environment | None = None
    config: ResolvedConfig | None = None
    failure: ResolutionError | None = None
    try:
        environment = _environment(args.simulate, args.rules)
        _check_removed(args)
        config = resolve(**_flags(args), environment=environment, rules=args.rules or None, reporter=trace)
    except ResolutionError as error:
        failure = error
    if args.format == "json":
        print(explain_json(config, trace, failure, environment=environment, verbose=args.verbose))
    elif args.format == "dot":
        from resolver.decision_graph import decision_graph

        table = load_rules(args.rules) if args.rules else builtin_table()
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
        _check_removed(args)
        config = resolve(**_flags(args), environment=_environment(None, args.rules), rules=args.rules or None)
    except ResolutionError as error:
        print(error.diagnostic(), file=sys.stderr)
        return EXIT_ERROR
    if not Path(args.script).is_file():
        print(f"error: script {args.script!r} not found", file=sys.stderr)
        return EXIT_USAGE
    print(f"resolver: {config.summary()}", file=sys.stderr, flush=True)
    try:
        import runtime
    except ImportError as exc:
        print(
            f"error: `resolver run` needs the runtime (torch): {exc}\n  = help: pip install 'resolver[runtime]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        return runtime.run_script(config, args.script, list(args.script_args), timeout=args.timeout)
    except (runtime.PortInUseError, runtime.RuntimeConfigError, runtime.MissingDependencyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


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
    out = Path(args.output)
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is stale: regenerate it with `resolver rules --output {out}`", file=sys.stderr)
            return EXIT_ERROR
        return EXIT_OK
    out.write_text(text)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    handlers = {"explain": _explain, "run": _run, "env": _env, "golden": _golden, "rules": _rules}
    try:
        code = handlers[args.command](args)
        sys.stdout.flush()  # here, so that a closed pipe is seen below and not at exit
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
