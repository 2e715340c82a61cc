"""The documentation cannot drift from the code: the CLI reference is what the commands
print, every runnable example in README.md and docs/*.md runs, the defaults the docs,
`--help` and config.yaml state are the code's, and every relative link leads somewhere."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
BIN = Path(sys.executable).parent  # the venv's bin: snim-batch is there


def _generator():
    spec = importlib.util.spec_from_file_location("cli_reference",
                                                  ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the generated CLI reference -------------------------------------------------------------


def test_cli_reference_is_current():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert page == _generator().render(), "docs/cli.md is stale: run `make docs`"


def test_cli_reference_names_every_command_and_option():
    gen = _generator()
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## (snim-batch.*?)\n(.*?)(?=^## |\Z)", page, re.S | re.M))
    missing = []
    for name, command, _ in gen.commands():
        if name not in sections:
            missing.append(f"command {name!r}")
            continue
        if "-h, --help" not in sections[name]:  # the app's help option names, not click's
            missing.append(f"{name} -h")
        for param in command.params:
            for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
                if opt.startswith("-") and opt not in sections[name]:
                    missing.append(f"{name} {opt}")
            if param.param_type_name == "argument" and param.name.upper() \
                    not in sections[name].upper():
                missing.append(f"{name} argument {param.name}")
    assert not missing, f"not in docs/cli.md (run `make docs`): {missing}"


def test_cli_reference_check_does_not_depend_on_the_terminal_and_fails_when_stale(tmp_path):
    script = ROOT / "scripts" / "cli_reference.py"
    env = {**os.environ, "COLUMNS": "37", "TERMINAL_WIDTH": "37",
           "_TYPER_FORCE_DISABLE_TERMINAL": "1", "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, str(script), "--check"], env=env,
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "cli.md"
    stale.write_text((DOCS / "cli.md").read_text(encoding="utf-8")
                     .replace("--winning-moves", "--winning-move"), encoding="utf-8")
    bad = subprocess.run([sys.executable, str(script), "--check", "--page", str(stale)],
                         env=env, capture_output=True, text=True)
    assert bad.returncode == 1
    assert bad.stderr == f"{stale} is stale: run `make docs`\n"


# --- runnable examples -----------------------------------------------------------------------

FENCE = re.compile(r"^(`{3,})([^`\n]*)\n(.*?)^\1[ \t]*$", re.S | re.M)
RUNNERS = {"sh": "bash", "bash": "bash", "python": "python"}


def runnable_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, language, code) of every fenced block whose info string is `LANG test`
    (``` sh test, ``` python test): the examples that must run."""
    blocks = []
    for match in FENCE.finditer(text):
        words = match.group(2).split()
        if "test" in words[1:]:
            if words[0] not in RUNNERS:
                raise ValueError(f"a runnable block must be sh, bash or python, not {words[0]}")
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((line, words[0], match.group(3)))
    return blocks


def run_blocks(page: Path, workdir: Path) -> list[str]:
    """Run a page's runnable blocks in order in `workdir` (so a later block may read what
    an earlier one wrote); the failures, each naming its page and line."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    failures = []
    for line, language, code in runnable_blocks(page.read_text(encoding="utf-8")):
        if RUNNERS[language] == "bash":
            argv = ["bash", "-e", "-o", "pipefail", "-c", code]
        else:
            argv = [str(BIN / "python"), "-c", code]
        done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            failures.append(f"{name}:{line} ({language}) exit "
                            f"{done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return failures


def sample_workdir(tmp_path: Path) -> Path:
    """A directory laid out as the checkout is for the examples: the bundled sample and the
    sample config."""
    shutil.copytree(ROOT / "data" / "sample", tmp_path / "data" / "sample")
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    return tmp_path


@pytest.mark.parametrize("page", [p for p in PAGES
                                  if runnable_blocks(p.read_text(encoding="utf-8"))],
                         ids=lambda p: p.name)
def test_examples_run(page, tmp_path):
    failures = run_blocks(page, sample_workdir(tmp_path))
    assert not failures, "\n\n".join(failures)


def test_the_readme_has_runnable_examples():
    blocks = runnable_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {language for _, language, _ in blocks} == {"sh", "python"}


def test_a_failing_example_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```sh test\ntrue\n```\n\n```sh\nfalse\n```\n\n"
                    "```python test\nimport sys\nsys.exit(4)\n```\n", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    failures = [f.splitlines()[0] for f in run_blocks(page, work)]
    assert failures == [f"{page}:11 (python) exit 4"]


# --- defaults: code, --help, config.yaml and the docs agree ----------------------------------


def code_defaults() -> dict[str, object]:
    """Every config key with a default, dotted (`tables.max_table_len`), from config.py."""
    from pipeline.config import Config

    found = {}

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            if f.default is not dataclasses.MISSING:
                found[key] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
                if dataclasses.is_dataclass(value):
                    walk(type(value), f"{key}.")
                else:
                    found[key] = value
    walk(Config, "")
    # a key is what as_dict records; `config_file` says where the settings came from
    keys = Config(rules="r", positions="p", out="o").as_dict()
    return {key: value for key, value in found.items() if key.split(".")[0] in keys}


def shown(value: object) -> str:
    """A default as the docs' configuration table writes it."""
    if isinstance(value, bool):
        return "false" if value is False else "true"
    if value == "" or value is None:
        return "(none)"
    if value == {}:
        return "{}"
    return str(value)


def test_configuration_page_shows_the_code_defaults():
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    table = {m.group(1): m.group(2).strip().strip("`")
             for m in re.finditer(r"^\| `([a-z_.]+)` \| ([^|]+) \|", page, re.M)}
    defaults = code_defaults()
    for key in defaults:
        if key.startswith("columns."):
            assert table.get(key) == f"{defaults[key]}", key
    wrong = {k: (table.get(k), shown(v)) for k, v in defaults.items()
             if not k.startswith("columns.") and table.get(k) != shown(v)}
    assert not wrong, f"docs/configuration.md (shown, code): {wrong}"


def test_run_help_states_the_code_defaults():
    gen = _generator()
    run = next(c for n, c, _ in gen.commands() if n == "snim-batch run")
    defaults = code_defaults()
    stated = {}
    for param in run.params:
        text = " ".join((param.help or "").split())
        match = re.search(r"Default: the config's ([a-z_.]+), else ([\w-]+)\.", text)
        if match:
            stated[match.group(1)] = match.group(2)
    assert stated, "run --help states no defaults"
    as_help = {True: "on", False: "off"}
    wrong = {k: (v, defaults[k]) for k, v in stated.items()
             if v != as_help.get(defaults[k], defaults[k])}
    assert not wrong, f"run --help (stated, code): {wrong}"


def test_config_yaml_comments_state_no_other_default():
    """config.yaml may set a key to something else (the sample turns winning moves on), but
    a default its comments name is the code's."""
    defaults = code_defaults()
    text = re.sub(r"\n#\s*", " ", (ROOT / "config.yaml").read_text(encoding="utf-8"))
    stated = re.findall(r"default of\s+`([a-z_.]+)`\s+is\s+`([^`]+)`", text)
    assert ("winning_moves", "false") in stated
    for key, value in stated:
        assert shown(defaults[key]) == value, key


# --- the pages ------------------------------------------------------------------------------


def test_readme_is_a_guide():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 210
    first_block = re.search(r"```[^\n]*\n(.*?)```", text, re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in first_block[:2]] == ["make run", "make test"]
    assert re.search(r"^## (.+)$", text, re.M).group(1) == "The two commands"


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_page_has_contents_and_links_resolve():
    broken, no_contents = [], []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if page.parent == DOCS and not re.search(r"^## Contents$", text, re.M):
            no_contents.append(page.name)
        text = FENCE.sub("", text)
        for target, fragment in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (page.parent / target) if target else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
            elif fragment and path.suffix == ".md" and fragment not in anchors(path):
                broken.append(f"{page.relative_to(ROOT)} -> {target}#{fragment}")
    assert not broken, broken
    assert not no_contents, f"pages without a '## Contents' list: {no_contents}"


def test_architecture_is_the_one_module_list():
    """docs/ARCHITECTURE.md names every module (the README keeps no list of its own)."""
    page = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    unnamed = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "pipeline").rglob("*.py"))
               if path.stem != "__init__" and not re.search(rf"\b{path.stem}\b", page)]
    assert not unnamed, f"modules docs/ARCHITECTURE.md does not name: {unnamed}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pipeline/kernels/" not in readme and "## Layout" not in readme


DOTTED = re.compile(r"`((?:io|engines|transforms|kernels|classic)(?:\.\w+)+)")
"""A dotted name the docs give from inside the package (`io.read.readers.iter_batches`)."""
FILE_SUFFIXES = {"txt", "md", "py", "pyx", "parquet", "csv", "json", "yaml"}


def _resolves(dotted: str) -> bool:
    """Whether `pipeline.<dotted>` is a module, or a module's attribute (chain)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module("pipeline." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_dotted_names_in_the_docs_name_code_that_exists():
    """A page that names `io.manifest.write_manifest` after the module moved to
    `io.outputs.manifest` sends the reader to nothing."""
    stale = sorted({f"{page.relative_to(ROOT)}: {name}" for page in PAGES
                    for name in DOTTED.findall(page.read_text(encoding="utf-8"))
                    if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES and not _resolves(name)})
    assert not stale, "names in the docs with no code behind them:\n" + "\n".join(stale)


def test_the_python_api_page_names_every_setting_evaluate_batch_takes():
    import inspect

    from pipeline import evaluate_batch
    page = (DOCS / "python-api.md").read_text(encoding="utf-8")
    settings = page[page.index("**Settings**"):page.index("**Errors.**")]
    missing = [name for name in inspect.signature(evaluate_batch).parameters
               if f"`{name}`" not in settings]
    assert not missing, f"docs/python-api.md's settings leave out {missing}"


MEASURED = re.compile(
    r"\d(?:\.\d+)? ?(?:s|ms|GiB|MiB|MB|CPU-s)\b[^\n\"]{0,25}?"
    r"(?:\bagainst\b|\bnot\b|\bvs\b|->|\bless\b|\bsooner\b)"
    r"|\b\d+(?:\.\d+)?x (?:slower|faster|as long)|\d(?:\.\d+)?-\d+(?:\.\d+)? ?(?:s|GiB)\b")


def test_code_says_why_not_how_fast_it_was():
    """Measured comparisons (`3.3 s against 3.6 s`, `5x slower`, `1.1-1.3 GiB`) belong in
    docs/performance.md or benchmarks/results/, not in the code's comments and docstrings."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "pipeline").rglob("*"))
             if path.suffix in {".py", ".pyx", ".pxi", ".h"}
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if MEASURED.search(line)]
    assert not found, "move these figures to docs/performance.md:\n" + "\n".join(found)
