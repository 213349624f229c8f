"""Every file a user names is read within bounds: a file nested a thousand deep, ``/dev/zero``,
``/dev/urandom`` or a file past the size limit is refused with an error that names the file, the
limit and the fix; never a traceback from the command line, a ``RecursionError`` from Python, or a
read that goes on until memory runs out.

Each reader is run in a real subprocess limited in memory (``RLIMIT_AS``) and time, so a reader
that lost its bound fails the test instead of taking the machine down: the flags file of
``--config``/``config_file=``, rule files and folders of ``--rules``/``rules=[...]``, the environment
file of ``--simulate``/``Environment.from_toml``, golden scenarios and ``resolver rules --check``'s
``--output``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resolver
from resolver._engine.input_files import MAX_FILE_BYTES, MAX_NESTING, InputFileError, loads_toml
from tests.support.cli_support import resolver_command

pytestmark = pytest.mark.skipif(os.name == "nt", reason="/dev/zero, FIFOs and RLIMIT_AS")

DEEP = 1000
#: The files each case names: TOML nested a thousand deep three ways (brackets, braces, dotted
#: keys, which nest tables without a bracket), endless devices, and a regular file one byte too big.
INPUTS = {
    "deep-arrays": ("a = " + "[" * DEEP + "]" * DEEP + "\n", "nested too deep"),
    "deep-inline-tables": ("a = " + "{b = " * DEEP + "1" + "}" * DEEP + "\n", "nested too deep"),
    "deep-dotted-keys": ("[flags]\nplugins." + "a." * DEEP + "b = 1\n", "nested too deep"),
    "dev-zero": ("/dev/zero", "too large"),
    "dev-urandom": ("/dev/urandom", "too large"),
    "too-big": (None, "too large"),
}
LIMIT_SAID = {"nested too deep": f"more than {MAX_NESTING} levels", "too large": "at most 16 MiB"}
#: Memory a subprocess may map: far more than resolver needs, far less than an unbounded read takes.
MEMORY = 2 << 30
TIMEOUT = 120


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RESOLVER_CACHE_DIR="off")
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=_bounded,
        check=False,
    )


def _input(tmp_path: Path, case: str) -> Path:
    """The file of ``case``, named ``*.toml`` (``--simulate`` takes a path by that suffix): a
    device through a link of that name."""
    content, _ = INPUTS[case]
    path = tmp_path / f"{case}.toml"
    if content is None:
        path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    elif content.startswith("/dev/"):
        path.symlink_to(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


#: A command per reader; FILE is replaced by the case's file.
COMMANDS = {
    "explain --config": ["explain", "--config", "FILE"],
    "explain --rules": ["explain", "--rules", "FILE"],
    "explain --simulate": ["explain", "--simulate", "FILE"],
    "golden": ["golden", "FILE"],
    "rules --output --check": ["rules", "--output", "FILE", "--check"],
}


@pytest.mark.parametrize("case", list(INPUTS))
@pytest.mark.parametrize("reader", list(COMMANDS))
def test_the_command_line_refuses_the_file_with_a_rendered_error(tmp_path, reader, case):
    if reader.startswith("rules") and INPUTS[case][1] != "too large":
        pytest.skip("--check compares --output as text: it parses nothing")
    path = _input(tmp_path, case)
    named = INPUTS[case][0] if case.startswith("dev-") and reader != "explain --simulate" else str(path)
    result = _run([str(resolver_command()), *(named if a == "FILE" else a for a in COMMANDS[reader])], tmp_path)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 1, result.stderr[-2000:]
    said = INPUTS[case][1]
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: ") and named in first and said in first, result.stderr
    assert LIMIT_SAID[said] in first, result.stderr
    assert "help: " in result.stderr or "; " in first, "the fix is given"


#: Calls each Python reader on the path in argv[1]; prints, per reader, the error's class, whether
#: it is the project's error, and its text.
PYTHON_READERS = """
import json, sys
import resolver
from resolver import golden
from resolver.flagsfile import load_flags_file

path = sys.argv[1]
readers = {
    "resolve(config_file=)": lambda: resolver.resolve(config_file=path, environment=resolver.Environment()),
    "load_flags_file": lambda: load_flags_file(path),
    "resolve(rules=[])": lambda: resolver.resolve(rules=[path], environment=resolver.Environment()),
    "load_rules": lambda: resolver.load_rules([path]),
    "Environment.from_toml": lambda: resolver.Environment.from_toml(path),
    "golden.load_scenario": lambda: golden.load_scenario(path),
}
found = {}
for name, read in readers.items():
    try:
        read()
        found[name] = None
    except BaseException as error:
        found[name] = [type(error).__name__, isinstance(error, (resolver.ResolutionError, resolver.RuleTableError)),
                       isinstance(error, resolver.ResolutionError), str(error)]
print(json.dumps(found))
"""


@pytest.mark.parametrize("case", list(INPUTS))
def test_python_readers_raise_the_project_s_error(tmp_path, case):
    """A flags, environment or scenario file: a ResolutionError with the hint; a rule file: the
    RuleTableError every other broken rule file raises, the fix in its text."""
    path = _input(tmp_path, case)
    named = INPUTS[case][0] if case.startswith("dev-") else str(path)
    result = _run([sys.executable, "-c", PYTHON_READERS, named], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout)
    said = INPUTS[case][1]
    for reader, error in found.items():
        assert error is not None, f"{reader} read {case} without an error"
        kind, projects, resolution, text = error
        assert projects, f"{reader}: {kind}: {text[:300]}"
        assert kind == ("RuleTableError" if "rules" in reader else "InputFileError"), (reader, kind)
        assert resolution == (kind == "InputFileError")
        assert named in text and said in text and LIMIT_SAID[said] in text, (reader, text)
        assert "hint: " in text or "you meant" in text, (reader, text)


def test_a_fifo_in_a_rule_folder_is_refused_without_waiting(tmp_path):
    """A folder's entries are read because of their name: one that is not a regular file is an
    error, not a read that waits for a writer forever."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "site.toml").write_text("", encoding="utf-8")
    os.mkfifo(folder / "stream.toml")
    result = _run([str(resolver_command()), "explain", "--rules", str(folder)], tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"error: {folder / 'stream.toml'}: not a regular file"), result.stderr


def test_a_fifo_in_a_folder_of_scenarios_is_refused_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "stream.toml")
    result = _run([str(resolver_command()), "golden", str(tmp_path)], tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"error: {tmp_path / 'stream.toml'}: not a regular file"), result.stderr


def test_a_stream_that_ends_in_time_is_still_read(tmp_path):
    """``--config <(command)``: a pipe is read (bounded), not refused for not being a regular file."""
    script = f"exec {resolver_command()} explain --config <(printf '[flags]\\nstrategy = \"ddp\"\\ndevices = 2\\n')"
    result = _run(["bash", "-c", script], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ddp" in result.stdout


def test_a_file_at_the_limit_and_nested_to_the_limit_is_read(tmp_path):
    """The limits are inclusive, and what a real file needs is far inside them."""
    nested = "[" * (MAX_NESTING - 2) + "]" * (MAX_NESTING - 2)  # in [flags] and plugins: 64 in all
    text = f'[flags]\nstrategy = "ddp"\nplugins = [{nested}]\n'
    text += "#" * (MAX_FILE_BYTES - len(text) - 1) + "\n"
    path = tmp_path / "flags.toml"
    path.write_text(text, encoding="utf-8")
    assert path.stat().st_size == MAX_FILE_BYTES
    result = _run([str(resolver_command()), "explain", "--config", str(path)], tmp_path)
    assert "too large" not in result.stderr and "nested too deep" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


# -- malformed and deep TOML, generated (hypothesis) -------------------------------------------------

EXAMPLES = int(os.environ.get("RESOLVER_FUZZ_EXAMPLES", "300"))


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=EXAMPLES <= 300,  # CI: the same inputs every run; a campaign explores
        database=None,  # nothing written into the checkout
    )


#: Pieces of TOML, whole and broken: brackets, quotes of every kind, escapes, keys of a rule file.
_PIECES = st.sampled_from(
    [
        "[",
        "]",
        "{",
        "}",
        "[[",
        "]]",
        '"',
        "'",
        '"""',
        "'''",
        "\\",
        "=",
        ".",
        ",",
        "#",
        "\n",
        " ",
        "\r",
        "\x00",
        "é",
        "rule",
        "slot",
        "when",
        "set",
        "x",
        "1",
        "true",
        "inf",
        "1979-05-27",
        '"a"',
        "'b'",
        "[rule.x]\n",
        "[slot.s]\n",
        'type = "int"\n',
        "stages = []\n",
        "[domain.d]\n",
        "values = [\n",
    ]
)
_MALFORMED = st.tuples(st.one_of(st.integers(0, 3 * MAX_NESTING), st.just(DEEP)), st.lists(_PIECES, max_size=40)).map(
    lambda deep_and_pieces: "a = " + "[" * deep_and_pieces[0] + "".join(deep_and_pieces[1])
)


@_settings(max(EXAMPLES // 10, 10))  # each resolve parses the built-in table again: about 0.3 s
@given(text=_MALFORMED)
def test_malformed_rule_files_give_the_project_s_error(tmp_path_factory, text):
    """resolve(rules=[file]) with a generated rule file: a config or the project's error, never
    another exception (RecursionError, UnicodeDecodeError, ...)."""
    path = tmp_path_factory.mktemp("rules") / "generated.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        resolver.resolve(rules=[path], environment=resolver.Environment())
    except (resolver.ResolutionError, resolver.RuleTableError):
        pass


#: Text that TOML strings may hold: brackets, braces, quotes and backslashes a scan could miscount.
_TRICKY = st.one_of(
    st.text(alphabet=st.sampled_from("[]{}\"'#\\\n\tab.="), max_size=12),
    st.sampled_from(["[" * 9, "{" * 9, '\\"' + "[" * 9, "'''" + "[" * 9, '"""' + "{" * 9, '""' + "[" * 9]),
)
_LEAVES = st.one_of(_TRICKY, st.integers(-3, 3), st.booleans())


_LAYER = st.tuples(st.booleans(), st.lists(_LEAVES, max_size=1), st.sampled_from(["k", "[x]", 'q"']))


def _nest(layers: list[tuple[bool, list[object], str]], leaf: object) -> dict[str, object]:
    """``leaf`` inside one container per layer (an array, or a table under its key), each with its
    leaves beside: as deep as there are layers, plus the top table."""
    value = leaf
    for is_array, side, key in layers:
        value = [*side, value] if is_array else {**{f"side{i}": v for i, v in enumerate(side)}, key: value}
    return {"top": value}


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@_settings(EXAMPLES)
@given(
    document=st.builds(_nest, st.lists(_LAYER, min_size=MAX_NESTING - 6, max_size=MAX_NESTING + 4), _LEAVES),
    multiline=st.booleans(),
    comment=_TRICKY.map(lambda t: "# " + t.replace("\n", " ") + "\n"),
)
def test_nesting_is_measured_as_the_parser_sees_it(document, multiline, comment):
    """Valid TOML with brackets, quotes and backslashes in its strings and comments: read exactly as
    tomllib reads it up to the limit, refused past it; the scan before parsing never miscounts."""
    text = comment + tomli_w.dumps(document, multiline_strings=multiline) + comment
    if _depth(document) <= MAX_NESTING:
        assert loads_toml(text, "generated.toml", "rule file") == document
    else:
        with pytest.raises(InputFileError, match="nested too deep"):
            loads_toml(text, "generated.toml", "rule file")


#: Strings whose ends a scan could misjudge, each holding more brackets than the limit: TOML's
#: multi-line strings may end in four or five quotes (one or two of them text), escapes hide quotes.
_EDGE_STRINGS = [
    '"' + "[" * 70 + '"',
    '"\\"' + "[" * 70 + '"',
    '"\\\\"',
    "'" + "[" * 70 + "'",
    '"""' + "[" * 70 + '""""',
    '"""' + "[" * 70 + '"""""',
    '"""\\"""' + "[" * 70 + '"""',
    "'''" + "[" * 70 + "''''",
    "'''" + "[" * 70 + "'''''",
    "'''\n" + "{" * 70 + "\n'''",
]


@pytest.mark.parametrize("string", _EDGE_STRINGS)
@pytest.mark.parametrize("deep", [MAX_NESTING - 1, MAX_NESTING])
def test_brackets_in_strings_and_comments_do_not_count(string, deep):
    """The string, then on its line an array nested ``deep`` inside the array ``a``, then a comment."""
    text = f"a = [{string}, {'[' * deep}{']' * deep}]  # {'[' * 70} ' \"\n"
    if deep < MAX_NESTING:
        assert loads_toml(text, "f.toml", "rule file") == tomllib.loads(text)
    else:
        with pytest.raises(InputFileError) as error:
            loads_toml(text, "f.toml", "rule file")
        assert error.value.line == string.count("\n") + 1, "found by the scan, which names the line"
