"""Sphinx configuration of the budgetsvm documentation site.

Build: ``pip install ".[docs]" && sphinx-build -W -b html docs/site docs/site/_build/html``.
Sphinx with numpydoc (the docstrings are numpydoc, as scikit-learn's) and sphinx-gallery (the
examples in ``examples/`` run at build time and their figures are drawn then).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import budgetsvm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
os.environ.setdefault("MPLBACKEND", "Agg")

project = "budgetsvm"
author = "the budgetsvm developers"
release = version = budgetsvm.__version__
copyright = "2026, the budgetsvm developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

# Every documented parameter must exist and every parameter must be documented; with -W a
# missing one fails the build.
numpydoc_validation_checks = {"PR01", "PR02"}
numpydoc_class_members_toctree = False
numpydoc_show_class_members = False
autodoc_default_options: dict = {}
# budgetsvm.dask needs dask, an optional extra: its API is documented without importing it.
autodoc_mock_imports = ["dask", "distributed"]

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "show_memory": False,
    "min_reported_time": 1,
}

templates_path: list = []
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip"]
# The theme of scikit-learn's and numpy's sites, which the users of this one know.
html_theme = "pydata_sphinx_theme"
html_title = "budgetsvm"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_static_path: list = []
