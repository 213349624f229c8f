"""``resolver rules``: ``docs/rules.md``, generated from the rule table (``resolver rules --output docs/rules.md``)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resolver._domain.config import display
from resolver._engine.compiled import CompiledRule, CompiledTable
from resolver._engine.conditions import Call, Const, Ref, ValueExpr
from resolver._engine.input_files import read_text
from resolver.api import load_rules
from resolver.cli.shared import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    import argparse

    from resolver.cli.options import Parser

__all__ = ["add_options", "rules_markdown", "run", "slot_stages_markdown"]

SUMMARY = "write the rule table as Markdown (docs/rules.md)"
DESCRIPTION = (
    "Write every rule of the table as Markdown, with the stage pipeline and the slot "
    "dependency graph as Mermaid diagrams; --check exits 1 when --output is stale."
)
EXAMPLES = (
    "resolver rules --output docs/rules.md",
    "resolver rules --output docs/rules.md --check",
    "resolver rules --rules site.toml",
)

#: The fix for an --output file too large to be the one ``--check`` compares.
_CHECK_HINT = "pass --output the Markdown file to check (docs/rules.md)"


def add_options(rules: Parser) -> None:
    """``resolver rules``'s options: ``--rules``, ``--output``, ``--check``."""
    rules.add_argument("--rules", action="append", default=[], metavar="FILE", help="an extra rule file (repeatable)")
    rules.add_argument("--output", metavar="FILE", help="write here instead of standard output")
    rules.add_argument("--check", action="store_true", help="exit 1 if --output differs from what would be written")


def run(args: argparse.Namespace) -> int:
    """Write the rule table as Markdown, or ``--check`` that ``--output`` is current; the exit code."""
    text = rules_markdown(load_rules(args.rules))
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    out = Path(args.output)
    try:
        if args.check:
            if not out.exists() or read_text(str(out), "--output file", hint=_CHECK_HINT) != text:
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


def _operand(value: Any) -> str:
    return f"`{value.slot}`" if isinstance(value, Ref) else display(value, quoted=True)


def _condition_text(rule: CompiledRule) -> str:
    parts = [text for condition in rule.when for text in condition.render()]
    return " and ".join(parts) if parts else "always"


def _expr(expr: ValueExpr) -> str:
    if isinstance(expr, Ref):
        return f"`{expr.slot}`"
    if isinstance(expr, Call):
        return f"{expr.fn}(" + ", ".join(_expr(a) for a in expr.args) + ")"
    assert isinstance(expr, Const)
    value = expr.value
    return _operand(value)


def _outcome(rule: CompiledRule) -> str:
    if rule.conflict is not None:
        return f"**error**: {rule.conflict} — fix: {rule.hint}"
    if rule.sets:
        text = ", ".join(f"`{name}` ← {_expr(expr)}" for name, expr in rule.sets)
        return text + (f"; note: {rule.note}" if rule.note else "")
    return f"note: {rule.note}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _mermaid_ids(names: list[str]) -> dict[str, str]:
    """Mermaid node ids (letters, digits, underscores), one per name, never colliding."""
    ids: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        base = "s_" + re.sub(r"[^A-Za-z0-9]", "_", name)
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base}_{n}"
        taken.add(candidate)
        ids[name] = candidate
    return ids


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _pipeline(table: CompiledTable) -> list[str]:
    lines = [
        "",
        "## Stage pipeline",
        "",
        "Each stage decides its slots from the slots of the stages before it, then runs its checks;",
        "its result is a frozen value, and a rule cannot read what a later stage decides.",
        "",
        "```mermaid",
        "flowchart LR",
    ]
    for plan in table.stages:
        rules = sum(1 for r in table.rules.values() if r.stage == plan.name)
        slots = sum(1 for s in table.slots.values() if s.stage == plan.name)
        detail = _count(slots, "slot") + (f", {_count(rules, 'rule')}" if rules else " (the inputs)")
        lines.append(f'  st_{plan.name}["{plan.name}<br/>{detail}"]')
    names = [f"st_{plan.name}" for plan in table.stages]
    lines += [f"  {a} --> {b}" for a, b in zip(names, names[1:], strict=False)]
    lines.append('  frozen(["ResolvedConfig"])')
    lines.append(f"  st_{table.stages[-1].name} --> frozen")
    lines.append("```")
    return lines


def _slot_graph(table: CompiledTable) -> list[str]:
    """Slot -> slot: a rule reads the first to decide the second (checks decide nothing: left out)."""
    edges: set[tuple[str, str]] = set()
    for rule in table.rules.values():
        for target, _ in rule.sets:
            edges.update((source, target) for source in rule.reads if source != target)
    used = sorted({name for edge in edges for name in edge})
    ids = _mermaid_ids(used)
    lines = [
        "",
        "## Slot dependency graph",
        "",
        "An arrow from one slot to another: some rule reads the first to decide the second. Slots are",
        f"grouped by the stage that decides them ({len(used)} slots, {len(edges)} arrows; checks, which",
        "decide nothing, are left out).",
        "",
        "```mermaid",
        "flowchart LR",
    ]
    for plan in table.stages:
        members = [name for name in used if table.slots[name].stage == plan.name]
        if not members:
            continue
        lines.append(f'  subgraph st_{plan.name} ["{plan.name}"]')
        lines += [f'    {ids[name]}["{name}"]' for name in members]
        lines.append("  end")
    lines += [f"  {ids[a]} --> {ids[b]}" for a, b in sorted(edges)]
    lines.append("```")
    return lines


def _file_name(file: str) -> str:
    """A built-in rule file as ``rules/...`` (where it lives in the source tree); any other as given."""
    from resolver._domain.rule_tables import builtin_rules_dir

    folder = str(builtin_rules_dir())
    if file.startswith(folder + os.sep):
        return "rules/" + Path(os.path.relpath(file, folder)).as_posix()
    return file


def _files(table: CompiledTable) -> list[str]:
    """Where the rules live: each file, in the order they load, with what it holds."""
    lines = [
        "",
        "## Where the rules live",
        "",
        'Rules are filed by concept (`docs/rule-format.md`, "Where rules live"): one file per accelerator,',
        "cluster environment and strategy, beside a file for what all of them share. The files load in",
        "this order (a folder's own files by name, then its subfolders'); the order decides nothing a",
        "rule means.",
        "",
        "| file | rules | slots declared | rules' stages |",
        "|---|---|---|---|",
    ]
    stage_index = {plan.name: i for i, plan in enumerate(table.stages)}
    for file in table.files:
        rules = [r for r in table.rules.values() if r.file == file]
        stages = sorted({r.stage for r in rules}, key=lambda s: stage_index.get(s, len(stage_index)))
        slots = sum(1 for slot in table.slots.values() if slot.file == file)
        named = ", ".join(f"`{s}`" for s in stages)
        lines.append(f"| `{_cell(_file_name(file))}` | {len(rules)} | {slots} | {named} |")
    return lines


def slot_stages_markdown(table: CompiledTable) -> str:
    """The stage that decides each slot, as the Markdown table of ``docs/rule-format.md`` (a test
    compares the two): a rule may read a slot only at that stage or a later one."""
    lines = ["| stage | the slots it decides (a rule reading one belongs to this stage or a later one) |", "|---|---|"]
    for index, plan in enumerate(table.stages):
        names = sorted(name for name, slot in table.slots.items() if slot.stage == plan.name)
        if index == 0:  # the inputs: any variable may be read, so their kinds, not the built-in names
            kinds = sorted({name.partition(".")[0] for name in names})
            cell = "the inputs, filled before any rule runs: " + ", ".join(f"`{kind}.*`" for kind in kinds)
        else:
            cell = ", ".join(f"`{name}`" for name in names)
        lines.append(f"| `{plan.name}` | {cell} |")
    return "\n".join(lines) + "\n"


def rules_markdown(table: CompiledTable) -> str:
    lines = [
        "# The rule table",
        "",
        "Generated from the files of `rules/` by `resolver rules --output docs/rules.md`; do not edit by hand",
        "(a test fails when this file is stale). See `docs/rule-format.md` for how rules are written.",
        "",
        f"{len(table.rules)} rules in {len(table.stages)} stages: "
        + " → ".join(f"`{p.name}`" for p in table.stages)
        + ".",
        "Within a stage, each slot takes the value of the first rule that fires (highest priority first);",
        "then the stage's checks run (errors and notes, highest priority first).",
        *_pipeline(table),
        *_slot_graph(table),
        *_files(table),
    ]
    order = {name: i for i, name in enumerate(table.files)}  # the stage tables list rules file by file
    for plan in table.stages:
        rules = [r for r in table.rules.values() if r.stage == plan.name]
        if not rules:
            continue
        rules.sort(key=lambda r: (order.get(r.file, len(order)), r.file, r.line or 0, r.id))
        lines += [
            "",
            f"## Stage `{plan.name}`",
            "",
            "| rule | when | outcome | why | priority |",
            "|---|---|---|---|---|",
        ]
        for rule in rules:
            lines.append(
                f"| `{rule.id}` | {_cell(_condition_text(rule))} | {_cell(_outcome(rule))} | "
                f"{_cell(rule.why)} | {rule.priority} |"
            )
    if table.removed:
        lines += ["", "## Removed flags", "", "| flag | why | use instead |", "|---|---|---|"]
        for flag, entry in sorted(table.removed.items()):
            lines.append(f"| `{flag}` | {_cell(str(entry.get('why', '')))} | `{_cell(str(entry.get('python', '')))}` |")
    return "\n".join(lines) + "\n"
