"""What ``resolver --help`` and ``resolver COMMAND --help`` say: one entry per command.

Every command has a one-line summary (in the top-level list), a description and examples (the end
of its ``--help``); a test parses every example, so they stay valid usage.
"""

from __future__ import annotations

import textwrap

import attrs

__all__ = ["COMMANDS", "EXIT_CODES", "TOP_DESCRIPTION", "TOP_EPILOG", "CommandHelp"]

EXIT_CODES = "exit codes: 0 resolved, 1 resolution error (conflict or invalid input), 2 usage error."

TOP_DESCRIPTION = "Resolve distributed-training flags against a machine, and say why."

TOP_EPILOG = f"""\
{EXIT_CODES}

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


@attrs.frozen
class CommandHelp:
    summary: str
    description: str
    examples: tuple[str, ...]
    trailer: str = ""

    def epilog(self) -> str:
        examples = "\n".join(f"  {line}" for line in self.examples)
        return (self.trailer + "\n\n" if self.trailer else "") + f"examples:\n{examples}\n"

    def wrapped_description(self) -> str:
        return textwrap.fill(self.description, 88)


COMMANDS: dict[str, CommandHelp] = {
    "explain": CommandHelp(
        summary="print each resolved field, its value and why",
        description="Resolve the flags for this machine (or a simulated one) and print each resolved field, "
        "its value and why; on failure, a diagnostic naming both sides and the fix. --format json gives "
        "the same as data, --format dot the decision graph for Graphviz.",
        examples=(
            "resolver explain --devices 2 --strategy ddp",
            "resolver explain --devices 8 --simulate cuda=8,slurm",
            "resolver explain --simulate my-cluster-node.toml,interactive --verbose",
            "resolver explain --devices 2 --format json --verbose",
            "resolver explain --devices 4 --simulate cuda=8,slurm --format dot > decision.dot",
            "resolver explain --config train.toml --devices 4",
        ),
        trailer=EXIT_CODES,
    ),
    "run": CommandHelp(
        summary="resolve, then start a script under the resolved launcher (like torchrun)",
        description="Resolve the flags, print a one-line summary, and start SCRIPT once per local device "
        "with torchrun-compatible variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). "
        "With -m, SCRIPT is a module, run as python -m would. Everything after SCRIPT (its --help "
        "too) is the script's own. Each line a rank prints is shown whole, prefixed with its rank "
        "([rank 1]: ...); --log-dir also keeps one log file per rank.",
        examples=(
            "resolver run --devices 2 --strategy ddp train.py --epochs 3",
            "resolver run --devices 2 --timeout 600 train.py",
            "resolver run --devices 2 -m mypackage.train --epochs 3",
            "resolver run --config train.toml train.py --help",
            "resolver run --devices 4 --log-dir logs --local-ranks-filter 0 train.py",
        ),
        trailer=EXIT_CODES + " Otherwise the script's own exit code.",
    ),
    "check": CommandHelp(
        summary="prove the resolved setup works: rendezvous, agreement, collectives, speed",
        description="Resolve the flags, start the ranks (or, under srun, mpirun or torchrun -m resolver check, "
        "run as this rank) and "
        "check, each step bounded by --timeout: every rank reaches rank 0's address and port; all ranks resolved "
        "the same config on the same software; barrier, all_reduce, broadcast and all_gather give the right "
        "values; each rank reaches the next (a ring, so a broken pair of hosts is named); and how fast each "
        "collective is. One line per check; a failure names the rank, host and fix.",
        examples=(
            "resolver check --devices 2",
            "resolver check --devices 4 --timeout 5 --format json",
            "resolver check --num-nodes 2 --node-rank 1 --master-addr node-0 --master-port 29500",
        ),
        trailer="exit codes: 0 every check passed, 1 a check failed (the report says which), 2 usage error.",
    ),
    "env": CommandHelp(
        summary="print this machine's versions, devices, cluster and variables, for a bug report",
        description="Print what a bug report needs: resolver, Python and OS versions; torch (with its CUDA, "
        "cuDNN and NCCL versions), torch_xla, horovod and deepspeed versions or 'not installed'; the "
        "devices and the cluster detected; the relevant environment variables, with secret-like values "
        "(tokens, passwords, keys) masked. Imports torch only when it is installed.",
        examples=("resolver env", "resolver env --format json"),
    ),
    "golden": CommandHelp(
        summary="check golden scenario files against the rules (or --update them)",
        description="Resolve each golden scenario (TOML: [flags], [environment], [expect]) and compare the "
        "outcome with its [expect] table; --update rewrites [expect] from the current rules (review the "
        "diff). Exit code 1 when a scenario fails.",
        examples=(
            "resolver golden tests/golden",
            "resolver golden --update my-cluster/",
            "resolver golden --rules site.toml my-cluster/",
        ),
    ),
    "rules": CommandHelp(
        summary="write the rule table as Markdown (docs/rules.md)",
        description="Write every rule of the table as Markdown, with the stage pipeline and the slot "
        "dependency graph as Mermaid diagrams; --check exits 1 when --output is stale.",
        examples=(
            "resolver rules --output docs/rules.md",
            "resolver rules --output docs/rules.md --check",
            "resolver rules --rules site.toml",
        ),
    ),
}
