"""Site rules that apply by default: the RESOLVER_RULES variable and a flags file's `rules` key, in
`resolve()` and the commands, shown by `resolver explain` with what named each; the errors for a
path that cannot be used; the stage a too-early rule should have; the slot-to-stage table of
docs/rule-format.md."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

import resolver
from resolver import Environment, ResolutionError, RuleTableError, resolve
from tests.support.cli_support import ROOT, run_resolver

NOTE = "our cluster: checkpoint to /scratch"


def _rule_file(path: Path, rule_id: str = "site.reminder", note: str = NOTE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'[[rule]]\nid = "{rule_id}"\nstage = "planned"\nwhen = {{ strategy = "ddp" }}\nnote = "{note}"\n',
        encoding="utf-8",
    )
    return path


def _ddp(**keywords: object) -> resolver.ResolvedConfig:
    return resolve(strategy="ddp", devices=2, environment=Environment(), **keywords)  # type: ignore[arg-type]


# -- RESOLVER_RULES ---------------------------------------------------------------------------------


def test_the_variable_adds_its_files_and_folders_to_every_resolve(tmp_path, monkeypatch):
    site = _rule_file(tmp_path / "site.toml")
    _rule_file(tmp_path / "team" / "deep" / "team.toml", "team.reminder", "team note")
    assert _ddp().notes == ()
    monkeypatch.setenv("RESOLVER_RULES", os.pathsep.join([str(site), str(tmp_path / "team")]))
    assert _ddp().notes == (NOTE, "team note")
    mine = _rule_file(tmp_path / "mine.toml", "mine", "mine")
    assert sorted(_ddp(rules=[mine]).notes) == sorted([NOTE, "mine", "team note"])
    monkeypatch.setenv("RESOLVER_RULES", "")  # empty: no site rules
    assert _ddp().notes == ()


def test_a_compiled_table_is_the_whole_table(tmp_path, monkeypatch):
    monkeypatch.setenv("RESOLVER_RULES", str(_rule_file(tmp_path / "site.toml")))
    assert _ddp(rules=resolver.load_rules()).notes == ()


def test_a_file_named_by_the_variable_and_a_flags_file_is_read_once(tmp_path, monkeypatch):
    site = _rule_file(tmp_path / "site.toml")
    flags = tmp_path / "train.toml"
    flags.write_text('rules = ["site.toml"]\nstrategy = "ddp"\ndevices = 2\n', encoding="utf-8")
    monkeypatch.setenv("RESOLVER_RULES", str(site))
    assert resolve(config_file=flags, environment=Environment()).notes == (NOTE,)


def test_the_probe_reads_the_variables_a_site_rule_reads(tmp_path, monkeypatch):
    site = tmp_path / "pbs.toml"
    site.write_text(
        '[[rule]]\nid = "site.pbs"\nstage = "normalized"\nwhen = { "var.PBS_JOBID" = { set = true } }\n'
        'note = "PBS job {var.PBS_JOBID}"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("PBS_JOBID", "18")
    monkeypatch.setenv("RESOLVER_RULES", str(site))
    assert Environment.probe().variables.get("PBS_JOBID") == "18"
    assert resolve().notes[-1] == "PBS job 18"


# -- a flags file's `rules` ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["bare", "table"])
def test_a_flags_file_adds_rule_files_relative_to_its_folder(tmp_path, monkeypatch, layout):
    _rule_file(tmp_path / "rules" / "site.toml")
    conf = tmp_path / "conf"
    conf.mkdir()
    body = 'rules = ["../rules/site.toml"]\nstrategy = "ddp"\ndevices = 2\n'
    (conf / "train.toml").write_text(body if layout == "bare" else "[flags]\n" + body, encoding="utf-8")
    monkeypatch.chdir(tmp_path / "rules")  # the paths are the flags file's, not the current folder's
    config = resolve(config_file=conf / "train.toml", environment=Environment())
    assert config.notes == (NOTE,) and config.strategy == "ddp"


# -- resolver explain shows them ------------------------------------------------------------------------


def test_explain_lists_each_rule_file_with_what_named_it(tmp_path):
    _rule_file(tmp_path / "site.toml")
    _rule_file(tmp_path / "conf" / "extra.toml", "extra", "extra note")
    _rule_file(tmp_path / "mine.toml", "mine", "mine")
    (tmp_path / "conf" / "train.toml").write_text('strategy = "ddp"\nrules = ["extra.toml"]\n', encoding="utf-8")
    args = ["explain", "--config", "conf/train.toml", "--devices", "2", "--rules", "mine.toml", "--simulate", ""]
    env = {"RESOLVER_RULES": "site.toml"}

    text = run_resolver(*args, cwd=tmp_path, env=env)
    assert text.returncode == 0, text.stderr
    listed = text.stdout.split("rule files (added to the built-in table):\n")[1].splitlines()
    assert [line.split() for line in listed] == [
        ["site.toml", "variable", "RESOLVER_RULES"],
        ["conf/extra.toml", "flags", "file", "conf/train.toml:2", "(rules)"],
        ["mine.toml", "argument", "--rules"],
    ]
    assert f"  - {NOTE}" in text.stdout and "  - extra note" in text.stdout

    data = json.loads(run_resolver(*args, "--format", "json", cwd=tmp_path, env=env).stdout)
    assert data["rule_files"] == [
        {"path": "site.toml", "kind": "variable", "source": "RESOLVER_RULES"},
        {"path": "conf/extra.toml", "kind": "flags_file", "source": "conf/train.toml:2"},
        {"path": "mine.toml", "kind": "argument", "source": "--rules"},
    ]
    assert NOTE in data["config"]["notes"]

    failed = run_resolver(*args[:-2], "--accelerator", "cuda", "--simulate", "", cwd=tmp_path, env=env)
    assert failed.returncode == 1
    assert failed.stderr.startswith("error[accelerator.cuda.unavailable]")
    assert re.search(r"\n  site.toml +variable RESOLVER_RULES\n", failed.stderr)  # on failure too: the table held it


def test_explain_without_site_rules_lists_none():
    result = run_resolver("explain", "--simulate", "", "--format", "json")
    assert json.loads(result.stdout)["rule_files"] == []
    assert "rule files" not in run_resolver("explain", "--simulate", "").stdout


def test_resolver_run_applies_the_site_rules(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        '[[rule]]\nid = "site.no_ddp"\nstage = "planned"\nwhen = { strategy = "ddp" }\n'
        'conflict = "this cluster runs fsdp only"\nhint = "pass --strategy fsdp"\n',
        encoding="utf-8",
    )
    (tmp_path / "train.py").write_text("print('ran')\n", encoding="utf-8")
    result = run_resolver("run", "--strategy", "ddp", "train.py", cwd=tmp_path, env={"RESOLVER_RULES": str(site)})
    assert result.returncode == 1
    assert result.stderr.startswith("error[site.no_ddp]: this cluster runs fsdp only"), result.stderr
    assert "ran" not in result.stdout


def test_help_lists_a_strategy_the_site_rules_add(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[cases."strategy"]\nour_fsdp = { set = { strategy = "fsdp" }, why = "ours" }\n')
    result = run_resolver("explain", "--help", env={"RESOLVER_RULES": str(site)})
    assert "our_fsdp" in result.stdout


# -- errors: each names where the path came from and the fix ---------------------------------------------


def _explain_error(tmp_path: Path, variable: str | None = None, config: str | None = None) -> str:
    args = ["explain", "--simulate", ""] + (["--config", config] if config else [])
    result = run_resolver(*args, cwd=tmp_path, env={"RESOLVER_RULES": variable} if variable is not None else {})
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    return result.stderr


def test_errors_of_the_variable(tmp_path):
    _rule_file(tmp_path / "site.toml")
    (tmp_path / "plugin.py").write_text("print('never run')\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "train.toml").write_text('strategy = "ddp"\n')
    sep = os.pathsep
    fix = f"= help: correct the entry in RESOLVER_RULES (rule files and folders separated by {sep!r}, as in PATH)"

    said = _explain_error(tmp_path, "absent.toml")
    assert said.startswith("error: cannot read rule file absent.toml (from variable RESOLVER_RULES): No such file")
    assert fix in said
    said = _explain_error(tmp_path, f"site.toml{sep}{sep}site.toml")
    assert f"RESOLVER_RULES='site.toml{sep}{sep}site.toml': entry 2 of 3 is empty" in said
    assert f"remove the extra {sep!r}" in said
    assert "entry 2 of 2 is empty" in _explain_error(tmp_path, f"site.toml{sep}")
    said = _explain_error(tmp_path, "plugin.py")
    assert said.startswith("error: not a rule file: plugin.py (from variable RESOLVER_RULES)") and fix in said
    said = _explain_error(tmp_path, "empty")
    assert said.startswith("error: not a rule folder: empty (from variable RESOLVER_RULES): it holds no *.toml")
    said = _explain_error(tmp_path, "train.toml")  # TOML, but a flags file: the rule file's error, and who named it
    assert "train.toml: unknown key(s) strategy" in said
    assert "(a rule file from variable RESOLVER_RULES: fix the file, or take it out of RESOLVER_RULES)" in said


def test_errors_of_a_flags_file(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    cases = {
        'rules = ["absent.toml"]': "cannot read rule file absent.toml (from flags file train.toml:2 (rules)): No such",
        'rules = [""]': "train.toml:2: entry 1 of rules is empty",
        "rules = [1]": "train.toml:2: rules = [1] is not a list of paths",
        'rules = ["notes.txt"]': "not a rule file: notes.txt (from flags file train.toml:2 (rules))",
    }
    for line, message in cases.items():
        (tmp_path / "train.toml").write_text(f'strategy = "ddp"\n{line}\n')
        said = _explain_error(tmp_path, config="train.toml")
        assert message in said.splitlines()[0], said
        assert "help: " in said
    (tmp_path / "broken.toml").write_text('[[rule]]\nid = "x"\nstage = "planed"\nnote = "n"\n')
    (tmp_path / "train.toml").write_text('rules = ["broken.toml"]\n')
    said = _explain_error(tmp_path, config="train.toml")
    assert "unknown stage 'planed'" in said and "take it out of `rules` at train.toml:1" in said
    (tmp_path / "train.toml").write_text('rules = ["site.toml"]\n[flags]\nstrategy = "ddp"\n')
    assert "put the flags and rules in the [flags] table" in _explain_error(tmp_path, config="train.toml")


def test_resolve_raises_the_project_s_error_for_a_bad_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("RESOLVER_RULES", str(tmp_path / "absent.toml"))
    with pytest.raises(ResolutionError, match=r"from variable RESOLVER_RULES\): No such file") as caught:
        resolve(environment=Environment())
    assert "correct the entry in RESOLVER_RULES" in str(caught.value.hint)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_site_file(tmp_path, monkeypatch):
    site = _rule_file(tmp_path / "site.toml")
    site.chmod(0)
    monkeypatch.setenv("RESOLVER_RULES", str(site))
    with pytest.raises(ResolutionError, match="Permission denied") as caught:
        resolve(environment=Environment())
    assert "chmod a+r" in str(caught.value.hint)


# -- a rule that reads a slot too early ---------------------------------------------------------------------


def _load(tmp_path: Path, text: str) -> str:
    path = tmp_path / "early.toml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(RuleTableError) as caught:
        resolver.load_rules([path])
    return str(caught.value)


def test_a_rule_reading_a_later_slot_is_told_the_stage_to_write(tmp_path):
    said = _load(
        tmp_path,
        """
        [[rule]]
        id = "site.early"
        stage = "placed"
        when = { strategy = "ddp", num_nodes = { gt = 1 } }
        note = "several machines"
        """,
    )
    # strategy is decided at `planned`, num_nodes at `clustered`: the earliest stage with both is `planned`
    assert "reads slot 'num_nodes', which stage 'clustered' decides after this rule's stage 'placed'" in said
    assert 'write stage = "planned", the earliest stage that has every slot it reads' in said


def test_a_rule_that_sets_a_slot_of_its_stage_is_told_it_cannot_move(tmp_path):
    said = _load(
        tmp_path,
        """
        [[rule]]
        id = "site.early"
        stage = "placed"
        when = { strategy = "ddp" }
        set = { num_devices = 3 }
        why = "x"
        """,
    )
    assert "the stage to read it from is 'planned', but the rule sets 'num_devices' of stage 'placed'" in said


# -- the slot-to-stage table of docs/rule-format.md ------------------------------------------------------------


def test_the_doc_table_of_slot_stages_is_the_table_s_own():
    from resolver.cli.rules import slot_stages_markdown

    expected = slot_stages_markdown(resolver.load_rules(plugins=False))
    text = (ROOT / "docs" / "rule-format.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- slot stages: begin -->\n(.*?)<!-- slot stages: end -->", text, re.S)
    assert found is not None, "docs/rule-format.md lost its slot stages markers"
    assert found.group(1) == expected, f"docs/rule-format.md's slot-to-stage table is stale; it is now:\n{expected}"
    for stage in ("placed", "planned"):  # the table says what the engine checks
        assert f"| `{stage}` |" in expected
    assert "`strategy`" in expected.split("| `planned` |")[1].splitlines()[0]
