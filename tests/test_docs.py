"""The documentation keeps its promises: every Python block of the README and the docs runs
as written, the API reference lists every public name, and no page tells the story of the
project's making.

Python blocks run in order, one namespace per file, in a fresh interpreter: on the NumPy
backend here, and (``test_code_blocks_run_on_gpu``, marked ``gpu``) on the CuPy backend in
the GPU suite. A block whose fence reads ```` ```python gpu ```` needs a GPU: it runs only there; one
that reads ```` ```python gpu2 ```` needs two GPUs, and the device tests cover its calls.
A failure names the page and the line of the failing statement.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

import cuflow

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^(?P<indent> *)(?P<ticks>`{3,})(?P<info>[^`\n]*)$")


def _pages() -> list[pathlib.Path]:
    pages = [ROOT / n for n in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    pages += sorted(p for p in DOCS.rglob("*.md")
                    if not {"_build", "examples"} & set(p.relative_to(DOCS).parts))
    return [p for p in pages if p.exists()]


def python_blocks(text: str) -> list[tuple[int, set[str], str]]:
    """``(line, tags, source)`` of every ```` ```python [tags] ```` fence in Markdown ``text``."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        words = m["info"].split()
        end = next((j for j in range(i + 1, len(lines))
                    if lines[j].strip() == m["ticks"]), len(lines))
        if words and words[0] in ("python", "py"):
            body = textwrap.dedent("\n".join(lines[i + 1:end]))
            blocks.append((i + 1, set(words[1:]), body))
        i = end + 1
    return blocks


def _script(page: pathlib.Path, gpu: bool) -> str:
    parts = []
    for line, tags, src in python_blocks(page.read_text(encoding="utf-8")):
        if ("gpu" in tags and not gpu) or "gpu2" in tags:
            continue  # gpu2: needs two GPUs; tests/core/test_devices.py runs the same calls there
        # compiled under the page's name, shifted to its lines: a traceback names the
        # page and the line of the failing statement
        name = page.relative_to(ROOT).as_posix()
        parts.append(f"exec(compile({chr(10) * line + src!r}, {name!r}, 'exec'), ns)")
    return "ns = {'__name__': '__main__'}\n" + "\n".join(parts) + "\n"


PAGES = [p for p in _pages() if python_blocks(p.read_text(encoding="utf-8"))]


def _run(page: pathlib.Path, backend: str, tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, CUFLOW_BACKEND=backend, PYTHONWARNINGS="ignore::RuntimeWarning")
    if backend == "cupy":  # the page's processes (Dask workers among them) need device memory
        _release_device_memory()
    r = subprocess.run([sys.executable, "-c", _script(page, backend == "cupy")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"a Python block of {page.relative_to(ROOT)} failed:\n{r.stderr}"


def _release_device_memory() -> None:
    """Give this process's cached device memory back, so that a page's own processes can
    create their CUDA contexts after the suite's earlier tests filled the pools."""
    import gc

    import cupy

    gc.collect()
    cuflow.memory.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.cuda.Device().synchronize()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_code_blocks_run_on_numpy(page, tmp_path):
    _run(page, "numpy", tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_code_blocks_run_on_gpu(page, tmp_path):
    _run(page, "cupy", tmp_path)


def test_block_parser_reads_tags_and_skips_other_languages():
    text = "a\n```python\nx = 1\n```\n```bash\nls\n```\n  ```python gpu\n  y = 2\n  ```\n"
    assert python_blocks(text) == [(2, set(), "x = 1"), (8, {"gpu"}, "y = 2")]


def test_every_page_with_code_is_collected():
    assert ROOT / "README.md" in PAGES
    assert any(p.parent.name == "guide" for p in PAGES)


# --- the README's set-up commands are what CI runs ----------------------------------------

def _bash_lines(text: str) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    return [line.strip() for b in blocks for line in b.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = ROOT / ".ci" / "run"
    test_cmd = [c for c in _bash_lines((ROOT / "README.md").read_text(encoding="utf-8"))
                if "pytest" in c]
    assert len(test_cmd) == 1, test_cmd
    assert test_cmd[0] in ci.read_text(encoding="utf-8")


def test_bench_results_keep_only_the_latest_evidence():
    results = ROOT / "bench" / "results"
    files = [p for p in results.rglob("*") if p.is_file()] if results.exists() else []
    assert len(files) <= 10, sorted(p.name for p in files)
    assert sum(p.stat().st_size for p in files) < 1 << 20


_TABLE_RULE = re.compile(r"^\|(?: *:?-{3,}:? *\|)+$")


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_has_a_header_row(page):
    """A Markdown table's rule line follows a header row of as many cells; without one the
    page renders the rows as a paragraph of pipes."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not _TABLE_RULE.match(line.strip()):
            continue
        header = lines[i - 1].strip() if i else ""
        assert header.startswith("|") and header.count("|") == line.strip().count("|"), (
            f"{page.name}:{i + 1}: a table rule without a header row of its width")


# --- the API reference is complete ----------------------------------------------------------

def _api_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "api").glob("*.md"))


def _documented_names() -> set[str]:
    """Names the reference documents (auto* directives) or names in code (`name`)."""
    text = _api_text()
    directive = r"^\.\. auto(?:function|class|exception|data|module):: (?:cuflow\.)?(\S+)"
    names = set(re.findall(directive, text, re.M))
    names |= set(re.findall(r"`(?:cuflow\.)?([A-Za-z_][A-Za-z0-9_]*)`", text))
    return names


def test_api_reference_names_every_public_name():
    missing = sorted(set(cuflow.__all__) - _documented_names())
    assert not missing, f"docs/api/ does not name: {missing}"


@pytest.mark.parametrize("module", ["image", "memory", "graph", "debug", "kernels", "testing",
                                    "pipeline", "dask"])
def test_api_reference_documents_every_name_of_each_submodule(module):
    text = _api_text()
    start = text.index(f".. currentmodule:: cuflow.{module}\n")
    section = text[start:text.index("```", start)]
    documented = set(re.findall(r"^\.\. auto\w+:: (\S+)", section, re.M))
    mod = importlib.import_module(f"cuflow.{module}")
    # a name cuflow itself exports is documented once, as cuflow.<name>
    top = {n for n in mod.__all__ if getattr(cuflow, n, None) is getattr(mod, n)}
    missing = sorted(set(mod.__all__) - documented - (top & _documented_names()))
    assert not missing, f"docs/api/ does not document cuflow.{module}: {missing}"


# --- no build history -----------------------------------------------------------------------

# Wording that tells the story of the project's making rather than describing the product.
HISTORY = re.compile("|".join([
    r"\bsession[- ]?\d+",                   # a numbered session
    r"\bruns? #?\d+(?:'s|[,.;:)]|\s+and\b|$)",  # "in run 3.", "runs 2 and 3", "Run 5's"
    r"\brun\d+\b",                          # a run number glued on, in a file name
    r"\bthe issue(?:'s| asks| says| wants)\b",
    r"\bissue #?\d+\b",
    r"\b\w+'s issue\b",                     # "the pool's issue"
    r"\b(?:made|ran|did) (?:\w+ )?(?:full |more )?runs\b",
    r"\bin (?:the )?(?:last|previous|earlier|first|second|third) run\b",
    r"\bmeasured on [^.\n]{0,40}\bin run\b",
]), re.IGNORECASE)

# Figures belong on the performance page (with their GPU and date) and in results files.
_EXEMPT = {"tests/test_docs.py"}


def _tracked_text_files() -> list[pathlib.Path]:
    suffixes = {".py", ".md", ".c", ".cu", ".cuh", ".sh", ".toml", ".cfg", ".ipynb", ".txt", ".in"}
    skip = {"bench/results", "docs/_build", "docs/examples", "build", "dist", ".ci-venv"}
    out = []
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT).as_posix()
        if (p.is_file() and (p.suffix in suffixes or p.name == "run")
                and not any(rel == s or rel.startswith(s + "/") for s in skip)
                and not any(part.startswith(".") and part not in (".ci",)
                            for part in p.relative_to(ROOT).parts)
                and "egg-info" not in rel and "site-packages" not in rel):
            out.append(p)
    return out


def test_history_pattern_catches_build_history():
    for s in ("Run 5's host was slow", "made eight full runs", "The issue asks for at most 0.6x",
              "as in the pool's issue", "measured on an H200 in run 3",
              # split so that this file's own text does not match
              "session" "-14 test log", "h200-" "session" "12-" "run" "2.json"):
        assert HISTORY.search(s), s
    for s in ("one run of python -m cuflow bench", "scope='session'", "runs 3x faster",
              "run the suite", "issued on the stream", "run 2 streams", "runs 4 blocks per SM"):
        assert not HISTORY.search(s), s


def test_no_build_history_in_code_or_docs():
    hits = []
    for p in _tracked_text_files():
        rel = p.relative_to(ROOT).as_posix()
        if rel in _EXEMPT:
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{rel}:{n}: {line.strip()[:120]}")
    assert not hits, ("build-history wording (say what the product does instead):\n"
                      + "\n".join(hits))


# --- docstrings state the whole contract ----------------------------------------------------

def _numpydoc_sections(obj: object) -> dict:
    docscrape = pytest.importorskip("numpydoc.docscrape", reason="needs the docs extra")
    return docscrape.NumpyDocString(obj.__doc__ or "")


def _states_its_contract(fn: object, label: str) -> None:
    """Every parameter documented, a Returns section, and a Stream semantics note."""
    doc = _numpydoc_sections(fn)
    documented = {n.strip("*") for p in doc["Parameters"] for n in p.name.split(", ")}
    params = set(inspect.signature(fn).parameters)
    assert params <= documented, f"{label}: {sorted(params - documented)} undocumented"
    assert doc["Returns"], f"{label} has no Returns section"
    assert "Stream semantics" in "\n".join(doc["Notes"]), f"{label}: no stream note"


@pytest.mark.parametrize("module", ["_arithmetic", "_transcendental", "_logical",
                                    "_statistical", "_creation", "_manipulation", "_interop",
                                    "_general", "_sorting"])
def test_namespace_docstrings_state_their_contract(module):
    """``help(cuflow.add)`` shows every parameter, the result and where the work runs."""
    mod = importlib.import_module(f"cuflow.core.{module}")
    for name in (n for n in mod.__all__ if n in cuflow.__all__):
        _states_its_contract(getattr(cuflow, name), f"cuflow.{name}")


def test_image_operators_state_their_contract():
    for name in cuflow.image.__all__:
        fn = getattr(cuflow.image, name)
        if not inspect.isfunction(fn):
            continue
        _states_its_contract(fn, f"cuflow.image.{name}")


def _own_callables(module: object) -> list[tuple[str, object]]:
    """``module``'s public functions and classes that cuflow defines (not NumPy's scalar types
    or CuPy's ndarray), with the public methods each class defines itself; exceptions aside
    (their one parameter is the message)."""
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or \
                not getattr(obj, "__module__", "").startswith("cuflow") or \
                (inspect.isclass(obj) and issubclass(obj, BaseException)):
            continue
        if obj is not cuflow.darray:  # (constructed as the backend's ndarray is)
            out.append((f"{module.__name__}.{name}", obj))
        if inspect.isclass(obj):
            out += [(f"{module.__name__}.{name}.{k}", v) for k, v in vars(obj).items()
                    if not k.startswith("_") and inspect.isfunction(v)]
    return out


@pytest.mark.parametrize("module", ["cuflow", "cuflow.memory", "cuflow.dask", "cuflow.debug",
                                    "cuflow.graph", "cuflow.pipeline", "cuflow.image",
                                    "cuflow.testing", "cuflow.kernels", "cuflow.fusion"])
def test_public_callables_document_every_parameter(module):
    """``help()`` on any public function, class or method names each parameter it takes (a
    class's in Parameters, or for a dataclass of options in Attributes)."""
    mod = importlib.import_module(module)
    missing = []
    for label, obj in _own_callables(mod):
        doc = _numpydoc_sections(obj)
        documented = {n.strip().lstrip("*") for p in doc["Parameters"] + doc["Attributes"]
                      for n in p.name.split(",")}
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):  # (a type without a signature)
            continue
        if [p.kind for p in params.values()][-2:] == [inspect.Parameter.VAR_POSITIONAL,
                                                       inspect.Parameter.VAR_KEYWORD] and \
                len(params) == 3:  # a forwarder, as NumPy's ``ndarray.sum``: see its function
            continue
        left = [n for n in params if n not in ("self", "cls") and not n.startswith("_")
                and n not in documented]
        if left:
            missing.append(f"{label}: {left}")
    assert not missing, "parameters without a description:\n" + "\n".join(missing)


def test_cuflow_imports_with_docstrings_stripped():
    """``python -OO`` strips the docstrings that the shared sections complete."""
    r = subprocess.run([sys.executable, "-OO", "-c", "import cuflow; cuflow.add"],
                       capture_output=True, text=True, env=dict(os.environ, CUFLOW_BACKEND="numpy"))
    assert r.returncode == 0, r.stderr[-2000:]
