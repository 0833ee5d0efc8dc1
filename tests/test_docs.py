"""The docs check: README.md and docs/*.md cannot drift from the code.

* Every fenced code block whose info string is ``python run`` runs, as its own script in a
  fresh directory, and must exit 0 within ``SNIPPET_DEADLINE_S``.
* Every repository path the docs mention exists: paths from the root (``asyncflow/...``,
  ``docs/...``, ``demos/...``, ``bench/...``, ``tests/...``, ``transports/...``) anywhere in
  the text, and file or folder names in inline code (```exec/plan.py```, ```graph/```,
  ```devices.md```), which may be relative to any folder of the repository.
* Every option given to ``asyncflow`` (``asyncflow worker --cluster ...``) or to a demo or
  bench script (``python demos/x.py --steps 5``) exists in that command's parser, and an
  option quoted on its own in inline code (```--cpus N```) is one of ``asyncflow worker``, of a
  script named on the same line, or of the test suite (``conftest.py``).
* Every ``af.NAME`` (and ``aio.NAME``, ``asyncflow.MODULE.NAME``) resolves, and every
  ``ASYNCFLOW_*`` environment variable appears in the package's source.

The conventions are in docs/README.md. Each failure names the document, the line and what is
missing. The docs are scanned afresh each run, so new guides are covered without listing them.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SNIPPET_DEADLINE_S = 180  # guards against a hang only (a loaded 2-core machine)
ROOTED = ("asyncflow", "transports", "docs", "demos", "bench", "tests")
SKIP_DIRS = {".git", ".venv", "build", "__pycache__", ".pytest_cache", ".hypothesis"}


@dataclasses.dataclass
class Block:
    doc: pathlib.Path
    line: int          # 1-based line of the opening fence
    info: str
    code: str


@dataclasses.dataclass
class Doc:
    path: pathlib.Path
    lines: list        # the document's lines
    blocks: list       # fenced code blocks
    prose: list        # (line number, text) of lines outside fenced blocks
    code_lines: list   # (line number, text) of lines inside fenced blocks

    @property
    def name(self):
        return self.path.relative_to(ROOT).as_posix()


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


def parse(path):
    """Split a Markdown file into fenced blocks and the lines outside them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, prose, code_lines = [], [], []
    fence = None
    for number, line in enumerate(lines, 1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence, start, info, body = match.group(2), number, match.group(3).strip(), []
            else:
                prose.append((number, line))
        elif match and match.group(2).startswith(fence) and not match.group(3).strip():
            blocks.append(Block(path, start, info, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
            code_lines.append((number, line))
    assert fence is None, f"{path.relative_to(ROOT)}:{start}: code block never closed"
    return Doc(path, lines, blocks, prose, code_lines)


PARSED = [parse(path) for path in DOCS]


def is_runnable(block):
    return block.info.split()[:2] == ["python", "run"]


RUNNABLE = [block for doc in PARSED for block in doc.blocks if is_runnable(block)]


def inline_spans(doc):
    """``(line number, text)`` of every inline code span outside fenced blocks."""
    for number, line in doc.prose:
        for match in re.finditer(r"(`+)(.+?)\1", line):
            yield number, match.group(2).strip()


def all_text(doc):
    return [(number, line) for number, line in enumerate(doc.lines, 1)]


# -- runnable blocks ------------------------------------------------------------------------
def test_there_are_runnable_blocks():
    assert len(RUNNABLE) >= 4, "the docs should keep several runnable examples"


@pytest.mark.parametrize(
    "block", RUNNABLE, ids=[f"{b.doc.relative_to(ROOT).as_posix()}:{b.line}" for b in RUNNABLE])
def test_runnable_block_runs(block, tmp_path):
    where = f"{block.doc.relative_to(ROOT).as_posix()}:{block.line}"
    script = tmp_path / "snippet.py"
    script.write_text(block.code, encoding="utf-8")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=SNIPPET_DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: the runnable block did not finish in {SNIPPET_DEADLINE_S} s")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
        pytest.fail(f"{where}: the runnable block exited with {result.returncode}:\n{tail}",
                    pytrace=False)


# -- paths --------------------------------------------------------------------------------
def _repo_files():
    files = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        relative = pathlib.Path(dirpath).relative_to(ROOT).as_posix()
        prefix = "" if relative == "." else relative + "/"
        if prefix:
            files.add(prefix)
        files.update(prefix + name for name in filenames)
    return files


REPO_FILES = _repo_files()
_ROOTED_PATH = re.compile(r"(?<![\w/.:@-])((?:%s)/[\w./*-]*)" % "|".join(ROOTED))
# In inline code: `dir/file.py`, `dir/file.md`, `dir/` or a bare `guide.md` (a bare `train.py`
# may well be the reader's own file, and a dotted name like `.venv/` is made by the tools).
_SPAN_PATH = re.compile(r"^(?:\w[\w.-]*(?:/[\w.-]+)*(?:/[\w.-]+\.(?:py|md)|/)|\w[\w.-]*\.md)$")


def _exists_from_root(path):
    path = path.rstrip(".,:;)")
    if "*" in path:
        return any(pathlib.PurePosixPath(f).match(path) for f in REPO_FILES)
    return (ROOT / path).exists()


def _exists_anywhere(path):
    """A file or folder named ``path`` relative to some folder of the repository."""
    return any(f == path or f.endswith("/" + path) for f in REPO_FILES)


def path_problems(doc):
    problems = []
    for number, line in all_text(doc):
        for match in _ROOTED_PATH.finditer(line):
            if match.group(1).rstrip(".,:;)/") in ROOTED:
                continue  # the bare folder name followed by prose ("asyncflow/...")
            if not _exists_from_root(match.group(1)):
                problems.append(f"{doc.name}:{number}: path {match.group(1).rstrip('.,:;)')!r} "
                                "does not exist in the repository")
    for number, span in inline_spans(doc):
        if _SPAN_PATH.match(span) and not span.startswith(ROOTED) and not _exists_anywhere(span):
            problems.append(f"{doc.name}:{number}: `{span}` names no file or folder of the "
                            "repository")
    return problems


@pytest.mark.parametrize("doc", PARSED, ids=[d.name for d in PARSED])
def test_every_path_the_docs_mention_exists(doc):
    problems = path_problems(doc)
    assert not problems, "\n".join(problems)


# Docstrings and comments of the package cite files too: a path from the root
# (``docs/protocol.md``, ``bench/bench_server.py``) or a bare document name (``security.md``)
# must exist, and no citation may point into documents the repository does not hold.
SOURCES = sorted(p for base in ("asyncflow", "transports") for p in (ROOT / base).rglob("*.py"))
_BARE_DOC = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")
_FOREIGN = re.compile(r"\breference §|\btransport-spike\b|\b(?:DESIGN|STYLE|API)\.md\b")


def source_problems(path, name=None):
    problems, name = [], name or path.relative_to(ROOT).as_posix()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        found = [m.group(1) for m in _ROOTED_PATH.finditer(line)
                 if m.group(1).rstrip(".,:;)/") not in ROOTED
                 and not _exists_from_root(m.group(1))]
        found += [m.group(1) for m in _BARE_DOC.finditer(line)
                  if not _exists_anywhere(m.group(1))]
        found += [m.group(0) for m in _FOREIGN.finditer(line)]
        problems += [f"{name}:{number}: cites {cited!r}, which is not in the repository"
                     for cited in found]
    return problems


def test_every_file_the_sources_cite_exists():
    problems = [problem for path in SOURCES for problem in source_problems(path)]
    assert not problems, "\n".join(problems)


def test_the_source_check_sees_a_missing_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""See docs/nowhere.md, NOTES.md and reference §4."""\n', encoding="utf-8")
    problems = source_problems(bad, "bad.py")
    assert [p.split("cites ")[1].split(",")[0] for p in problems] == [
        "'docs/nowhere.md'", "'NOTES.md'", "'reference §'"]


# -- command-line options -----------------------------------------------------------------
def _parser_options(parser):
    return {option for action in parser._actions for option in action.option_strings}


def _cli_options():
    from asyncflow import cli
    parser = cli.build_parser()
    commands = {"": _parser_options(parser)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands[name] = _parser_options(sub)
    return commands


def _script_options(path):
    """The ``--options`` a script accepts: the strings in its source that look like one
    (its argparse ``add_argument`` calls, or a flag it looks for in ``sys.argv``)."""
    options = {"-h", "--help"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"--[a-z][\w-]*", node.value):
            options.add(node.value)
    return options


CLI = _cli_options()
TEST_OPTIONS = _script_options(ROOT / "tests" / "conftest.py") - {"-h", "--help"}
_OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
_SCRIPT = re.compile(r"(?:python3?\s+)((?:demos|bench)/[\w/]+\.py)\b")
# ``asyncflow worker ...`` or ``asyncflow --option`` (not ``import asyncflow`` or a path)
_ASYNCFLOW = re.compile(r"(?<![\w/.-])(?:python3?\s+-m\s+)?asyncflow"
                        r"(?:\s+(worker)\b(?![/.-])|(?=\s+-))")


def _commands(doc):
    """``(line number, command text)``: code lines and inline spans, continuations joined."""
    pending = None
    for number, line in doc.code_lines:
        text = line.rstrip()
        if pending is not None:
            pending = (pending[0], pending[1] + " " + text.rstrip("\\"))
        else:
            pending = (number, text.rstrip("\\"))
        if not text.endswith("\\"):
            yield pending
            pending = None
    if pending is not None:
        yield pending
    yield from inline_spans(doc)


def _segment_options(text):
    """The options of one shell command: up to a pipe, ``;``, ``&&``, or a comment."""
    text = re.split(r"\s(?:\||;|&&|\|\||#)\s?", text + " ", maxsplit=1)[0]
    try:
        words = shlex.split(text, comments=False)
    except ValueError:
        words = text.split()
    return [w.split("=")[0] for w in words if w.startswith("--")]


def option_problems(doc):
    problems = []
    worker = CLI.get("worker", set())
    for number, text in _commands(doc):
        for match in _ASYNCFLOW.finditer(text):
            command = match.group(1) or ""
            known = CLI.get(command, set())
            for option in _segment_options(text[match.end():]):
                if option not in known:
                    shown = f"asyncflow {command}".rstrip()
                    problems.append(f"{doc.name}:{number}: `{shown}` has no option {option} "
                                    f"(it has: {', '.join(sorted(known - {'-h', '--help'}))})")
        for match in _SCRIPT.finditer(text):
            script = ROOT / match.group(1)
            if not script.exists():
                continue  # reported by the path check
            known = _script_options(script)
            for option in _segment_options(text[match.end():]):
                if option not in known:
                    problems.append(f"{doc.name}:{number}: {match.group(1)} has no option "
                                    f"{option} (it has: {', '.join(sorted(known))})")
    for number, span in inline_spans(doc):
        if not span.startswith("--"):
            continue
        line = doc.lines[number - 1]
        scripts = {m.group(1) for m in _SCRIPT.finditer(line)
                   if (ROOT / m.group(1)).exists()}
        known = worker | CLI.get("", set()) | TEST_OPTIONS
        for script in scripts:
            known = known | _script_options(ROOT / script)
        for option in _OPTION.findall(span):
            if option not in known:
                where = " nor of " + ", ".join(sorted(scripts)) if scripts else ""
                problems.append(f"{doc.name}:{number}: `{span}`: {option} is not an option of "
                                f"`asyncflow worker`{where} (nor of the test suite)")
    return problems


@pytest.mark.parametrize("doc", PARSED, ids=[d.name for d in PARSED])
def test_every_option_the_docs_mention_exists(doc):
    problems = option_problems(doc)
    assert not problems, "\n".join(problems)


# -- names --------------------------------------------------------------------------------
_AF_NAME = re.compile(r"(?<![\w./-])(af|aio|asyncflow)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def _resolve(root, dotted):
    """Follow ``dotted`` from module ``root`` (importing submodules as needed); returns the
    part that failed, or None when the whole name resolves."""
    obj = importlib.import_module(root)
    path = root
    for part in dotted.split("."):
        path = f"{path}.{part}"
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(path)
        except ImportError:
            return path
    return None


_ROOTS = {"af": "asyncflow", "aio": "asyncflow.aio", "asyncflow": "asyncflow"}


def name_problems(doc):
    problems = []
    # Variables are read by the package, the deployment scripts beside it, or the test suite
    # (the ones that tune a test run).
    source = "".join(p.read_text(encoding="utf-8")
                     for p in [*(ROOT / "asyncflow").rglob("*.py"), *(ROOT / "deploy").rglob("*"),
                               *(ROOT / "tests").rglob("*.py")]
                     if p.is_file())
    for number, line in all_text(doc):
        for match in _AF_NAME.finditer(line):
            prefix, dotted = match.group(1), match.group(2)
            if prefix == "asyncflow" and line[match.end():match.end() + 1] == "/":
                continue
            missing = _resolve(_ROOTS[prefix], dotted)
            if missing is not None:
                shown = missing.replace("asyncflow.aio", "aio", 1) if prefix == "aio" else \
                    missing.replace("asyncflow", "af", 1) if prefix == "af" else missing
                problems.append(f"{doc.name}:{number}: {prefix}.{dotted}: {shown} does not "
                                "exist")
        for variable in re.findall(r"\bASYNCFLOW_[A-Z_]+\b", line):
            if variable not in source:
                problems.append(f"{doc.name}:{number}: environment variable {variable} is not "
                                "read anywhere in asyncflow/, deploy/ or tests/")
    return problems


@pytest.mark.parametrize("doc", PARSED, ids=[d.name for d in PARSED])
def test_every_name_the_docs_mention_exists(doc):
    problems = name_problems(doc)
    assert not problems, "\n".join(problems)
