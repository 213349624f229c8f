"""Every code block of README.md and docs/*.md runs in the test suite, through Sybil.

The root ``conftest.py`` hands ``DOCS`` to pytest, so ``python -m pytest`` (whose ``testpaths``
name README.md and docs) collects each block as a test; ``python -m pytest docs/usage.md`` runs
one page. What a block does depends on its fence:

- a block whose first line names a file (``# train.toml``, ``# docs example: show_args.py``) is
  that file: every named file of a page is written into the page's own temporary folder before
  its first block runs (so a command may come before the file it reads), and the block itself is
  checked to be valid Python or TOML. The commands of the page run it.
- ``console``: each ``$ COMMAND`` line runs in bash in the page's folder; the lines below it are
  its output (stdout and stderr together), compared as doctest compares, with ``ELLIPSIS`` (``...``
  stands for any text, lines included) and ``NORMALIZE_WHITESPACE``. ``  # exit N`` after the
  command is its expected exit status (default 0). Lines of several ranks (``[rank N]: ``) may
  arrive in any order: each rank's lines are compared in their order, the ranks in rank order.
- ``bash``: the block runs in bash (``set -e``) in the page's folder and must succeed.
- ``python`` starting with ``>>>``: a doctest (Sybil's), in this process; other ``python``: a
  script, run in a fresh interpreter in the page's folder, as a user pastes it into a file. An
  invisible block (``<!-- invisible-code-block: python ... -->``) right before it is put before
  it (what a fragment leaves out), one right after it is put after it (what runs it), so the page
  shows only the part worth reading.
- ``toml``: must parse.
- ``mermaid``: a diagram, drawn by the page's viewer; not run.

Any other fence (one without a language included) fails: a block either runs or is preceded by
``<!-- skip: next "why" -->`` (Sybil's skip, which may be conditional: ``if(missing("deepspeed"),
reason="...")``), and the page says why in its text too.

Commands and scripts run as on a machine without GPUs (``CUDA_VISIBLE_DEVICES`` empty), with no
cluster or launcher variables, the project first on ``PYTHONPATH``, and this interpreter's folder
first on ``PATH`` (its ``python`` and ``resolver``): the machine the pages' outputs show.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.evaluators.doctest import DocTestEvaluator
from sybil.parsers.abstract.doctest import DocTestStringParser
from sybil.parsers.abstract.lexers import LexerCollection
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
NOT_CODE = {"mermaid"}
NAMED_FILE = re.compile(r"# (?:docs example: )?(?P<name>[\w.-]+(?:/[\w.-]+)*\.(?:py|toml))$")
EXIT_STATUS = re.compile(r"\s+# exit (?P<code>\d+)$")
RANK_LINE = re.compile(r"\[rank (?P<rank>\d+)\]: ")
TIMEOUT_S = 280
# What a launcher or a cluster sets: a block runs as a user's fresh shell would.
CLUSTER_PREFIXES = ("SLURM_", "LSB_", "JSM_", "OMPI_", "PMI_", "KUBERNETES_", "TORCHELASTIC_", "HOROVOD_")
DROPPED = {
    "RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "RUNTIME_DOORBELL_FD", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK",
    "GROUP_RANK", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RESOLVER_ACCELERATOR",
    "RESOLVER_DEVICES", "RESOLVER_STRATEGY", "RESOLVER_PRECISION", "RESOLVER_NUM_NODES",
    "RESOLVER_CLUSTER_ENVIRONMENT", "RESOLVER_RULES", "PJRT_DEVICE", "CPU_NUM_DEVICES", "OMP_NUM_THREADS",
    "FORCE_COLOR",  # the pages show plain text (a CI runner's FORCE_COLOR would colour the commands' output)
}  # fmt: skip


def user_environment() -> dict[str, str]:
    """The variables a block's commands and scripts run with (see the module docstring)."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if name not in DROPPED and not name.startswith(CLUSTER_PREFIXES)
    }
    environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environ.get("PATH", "")])
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH", "")]))
    environ["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleave as they were written
    environ["CUDA_VISIBLE_DEVICES"] = ""
    if os.geteuid() == 0:  # the tests run as root in CI: what a root user passes to Open MPI's mpirun
        environ["OMPI_ALLOW_RUN_AS_ROOT"] = environ["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return environ


class CodeBlockParser:
    """Every fenced block, and every invisible code block, of a Markdown page (Sybil's lexers)."""

    def __init__(self) -> None:
        self.lexers = LexerCollection(
            [
                FencedCodeBlockLexer(language=r"[\w-]*", mapping={"language": "arguments", "source": "source"}),
                DirectiveInHTMLCommentLexer(directive=r"invisible-code-block", arguments=r"\w+"),
            ]
        )
        self.doctests = DocTestStringParser(DocTestEvaluator(OPTIONS))

    def __call__(self, document: Document) -> Iterator[Region]:
        for region in self.lexers(document):
            source = region.lexemes["source"]
            if region.lexemes["arguments"] == "python" and source.startswith(">>>"):
                for doctest_region in self.doctests(source, document.path):
                    doctest_region.adjust(region, source)
                    yield doctest_region
                continue
            region.parsed = source
            region.evaluator = evaluate_block
            yield region


def language(region: Region) -> str:
    return str(region.lexemes["arguments"])


def is_invisible(region: Region) -> bool:
    return "directive" in region.lexemes


def named_file(source: str) -> str | None:
    match = NAMED_FILE.match(source.splitlines()[0]) if source.strip() else None
    return match["name"] if match else None


def page_folder(example: Example) -> Path:
    """The page's folder, holding every file the page names (written at the first look)."""
    namespace = example.namespace
    if "docs_folder" not in namespace:
        folder = Path(tempfile.mkdtemp(prefix="docs-" + Path(example.path).stem + "-"))
        (folder / "docs").mkdir()  # a folder where a page's command expects one (`resolver run docs`)
        (folder / "tests").mkdir()
        (folder / "tests" / "golden").symlink_to(ROOT / "tests" / "golden")
        (folder / "examples").symlink_to(ROOT / "examples")
        for _, region in example.document.regions:
            name = named_file(str(region.parsed)) if region.evaluator is evaluate_block else None
            if name is not None:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(str(region.parsed), encoding="utf-8")
        namespace["docs_folder"] = folder
    return namespace["docs_folder"]


def remove_page_folder(namespace: dict[str, Any]) -> None:
    folder = namespace.pop("docs_folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def neighbour(example: Example, step: int) -> Region | None:
    """The invisible python block right before (step -1) or after (step 1) this block, if any."""
    regions = [region for _, region in example.document.regions]
    index = regions.index(example.region) + step
    if not 0 <= index < len(regions):
        return None
    other = regions[index]
    between = (
        example.document.text[other.end : example.region.start]
        if step < 0
        else (example.document.text[example.region.end : other.start])
    )
    hidden_python = other.evaluator is evaluate_block and is_invisible(other) and language(other) == "python"
    # A directive's region ends before its closing "-->".
    return other if hidden_python and not between.replace("-->", "").strip() else None


def run(command: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=folder, env=user_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace", timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def run_script(example: Example, folder: Path) -> str | None:
    before, after = neighbour(example, -1), neighbour(example, 1)
    parts = [str(region.parsed) for region in (before, example.region, after) if region is not None]
    # Beside the page's files, not among them (a command that lists the folder's scripts must not see it).
    script = folder / ".blocks" / f"line_{example.line}.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text("\n".join(parts), encoding="utf-8")
    done = run([sys.executable, str(script.relative_to(folder))], folder)
    if done.returncode != 0:
        return f"the python block (run as {script}) exited with {done.returncode}:\n{done.stdout}"
    return None


def rank_order(text: str) -> str:
    """Each run of consecutive ``[rank N]: `` lines sorted by rank, keeping each rank's own order."""
    lines, ordered, run_of_ranks = text.splitlines(), [], []
    for line in [*lines, ""]:
        if RANK_LINE.match(line):
            run_of_ranks.append(line)
            continue
        ordered.extend(sorted(run_of_ranks, key=lambda ranked: int(RANK_LINE.match(ranked)["rank"])))
        run_of_ranks = []
        ordered.append(line)
    return "\n".join(ordered[:-1]) + "\n"


def console_commands(source: str) -> Iterator[tuple[str, int, str]]:
    """(command, expected exit status, expected output) for each ``$`` line of a console block."""
    command: str | None = None
    status = 0
    output: list[str] = []
    for line in source.splitlines():
        if line.startswith("$ "):
            if command is not None:
                yield command, status, "".join(output)
            status_match = EXIT_STATUS.search(line)
            command = line[2:] if status_match is None else line[2 : status_match.start()]
            status = 0 if status_match is None else int(status_match["code"])
            output = []
        elif command is None:
            raise ValueError(f"a console block starts with {line!r}, not with '$ COMMAND'")
        else:
            output.append(line + "\n")
    if command is not None:
        yield command, status, "".join(output)


def run_console(source: str, folder: Path) -> str | None:
    checker = doctest.OutputChecker()
    for command, status, expected in console_commands(source):
        done = run(["bash", "-c", command], folder)
        wanted, printed = rank_order(expected), rank_order(done.stdout)
        if done.returncode != status:
            return f"$ {command}\nexited with {done.returncode}, the page says {status}; it printed:\n{done.stdout}"
        if not checker.check_output(wanted, printed, OPTIONS):
            return f"$ {command}\n" + checker.output_difference(doctest.Example(command, wanted), printed, OPTIONS)
    return None


def evaluate_block(example: Example) -> str | None:
    source, kind = str(example.parsed), language(example.region)
    folder = page_folder(example)
    name = named_file(source)
    if kind in NOT_CODE or (is_invisible(example.region) and name is None):
        return None  # a diagram; or the part of a neighbouring python block that the page hides
    if name is not None:
        if name.endswith(".py"):
            compile(source, name, "exec")
        else:
            tomllib.loads(source)
        return None
    if kind == "python":
        return run_script(example, folder)
    if kind == "console":
        return run_console(source, folder)
    if kind == "bash":
        done = run(["bash", "-e", "-c", source], folder)
        return None if done.returncode == 0 else f"the bash block exited with {done.returncode}:\n{done.stdout}"
    if kind == "toml":
        tomllib.loads(source)
        return None
    shown = f"```{kind}" if kind else "``` (no language)"
    return (
        f"{shown} blocks are not run by the docs tests: give the block a language they run (python, console, "
        'bash, toml), or put <!-- skip: next "why it cannot run" --> before it and say why in the page'
    )


def missing(module: str) -> bool:
    """For a page's conditional skip: ``<!-- skip: next if(missing("deepspeed"), reason="...") -->``."""
    return importlib.util.find_spec(module) is None


def set_up_page(namespace: dict[str, Any]) -> None:
    namespace["missing"] = missing
    namespace["which"] = shutil.which
    # The doctests run in this process: they see the machine the commands see.
    namespace["saved_cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def tear_down_page(namespace: dict[str, Any]) -> None:
    saved = namespace.pop("saved_cuda_visible_devices", None)
    if saved is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = saved
    remove_page_folder(namespace)


DOCS = Sybil(
    parsers=[CodeBlockParser(), SkipParser()],
    patterns=["README.md", "docs/*.md"],
    # Path.match matches from the right: without this, every README.md below tests/ would count too
    # (the benchmark notes hold commands that take minutes, run by hand).
    excludes=["tests/*.md", "tests/*/*.md", "tests/*/*/*.md"],
    path=str(ROOT),
    setup=set_up_page,
    teardown=tear_down_page,
)


def named_file_block(page: str, name: str) -> str:
    """The text of the block of ``page`` (relative to the project) that is the file ``name``, for a
    test that runs it in an environment of its own (the XLA example) or in more ways than the page."""
    document = DOCS.parse(ROOT / page)
    found = [str(region.parsed) for _, region in document.regions if named_file(str(region.parsed)) == name]
    assert len(found) == 1, f"{page} has {len(found)} blocks that are the file {name}"
    return found[0]
