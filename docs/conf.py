"""Sphinx configuration: ``python -m sphinx -W -b html docs docs/_build/html``.

Pages are MyST Markdown; the notebooks in ``examples/`` are rendered with their
stored outputs (recorded on a GPU, see CONTRIBUTING.md), not executed here: CI
executes them separately through nbclient (``tests/test_examples.py``).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import warnings

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent

# The reference is generated on the NumPy backend, which needs no GPU; the warning that
# says so is expected here.
os.environ.setdefault("CUFLOW_BACKEND", "numpy")
warnings.filterwarnings("ignore", message="cuflow: using the NumPy backend")

import cuflow  # noqa: E402

project = "cuflow"
author = "the cuflow developers"
copyright = "the cuflow developers"  # noqa: A001
release = version = cuflow.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_nb",
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# MyST: heading anchors so pages can link to one another's sections (page.md#section)
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# Notebooks keep the outputs recorded on a GPU; executing them is CI's job (nbclient).
nb_execution_mode = "off"

# autodoc + numpydoc
autodoc_default_options = {"members": False}
autodoc_typehints = "none"          # the signatures show them; numpydoc's sections the rest
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "alabaster"
html_title = f"cuflow {release}"
html_static_path = ["_static"]
html_theme_options = {
    "description": "GPU arrays with dst= outputs, explicit streams and fused kernels",
}

# The example notebooks live in examples/ (where users run them); the site renders copies.
_EXAMPLES = DOCS / "examples"
_EXAMPLES.mkdir(exist_ok=True)
for nb in sorted((ROOT / "examples").glob("*.ipynb")):
    shutil.copyfile(nb, _EXAMPLES / nb.name)
