"""``docs/rules.md``, generated from the rule table (``resolver rules --output docs/rules.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resolver.compiler import CompiledRule, CompiledTable
from resolver.conditions import Call, Const, Ref, ValueExpr
from resolver.config import display

__all__ = ["rules_markdown"]


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


def rules_markdown(table: CompiledTable) -> str:
    lines = [
        "# The rule table",
        "",
        "Generated from `rules/*.toml` by `resolver rules --output docs/rules.md`; do not edit by hand",
        "(a test fails when this file is stale). See `docs/rule-format.md` for how rules are written.",
        "",
        f"{len(table.rules)} rules in {len(table.stages)} stages: "
        + " → ".join(f"`{p.name}`" for p in table.stages)
        + ".",
        "Within a stage, each slot takes the value of the first rule that fires (highest priority first);",
        "then the stage's checks run (errors and notes, highest priority first).",
    ]
    for plan in table.stages:
        rules = [r for r in table.rules.values() if r.stage == plan.name]
        if not rules:
            continue
        rules.sort(key=lambda r: (Path(r.file).name, r.line or 0, r.id))
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
