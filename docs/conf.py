"""Sphinx configuration of the toolkit's documentation (`make docs`).

Pages are MyST Markdown (the same files GitHub renders), the theme is furo, the CLI reference is
generated from the real `hsi` parser (sphinx-argparse) and the Python API from the docstrings of the
names `hsi.__all__` lists (autodoc), so neither can drift from the code.
"""

import sys
from pathlib import Path

# Import this checkout's packages, installed or not: autodoc and sphinx-argparse read the real code.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

from builder import __version__  # noqa: E402

project = "Hard-Spurious-ImageNet toolkit"
version = release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinxarg.ext", "field_tables"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]

# Links such as [the export](build.md#compose-sizes-positions-backgrounds-cpu-minutes) resolve to headings.
myst_heading_anchors = 3

# Docstrings write names in single backticks, Markdown style: show them as code, not as citations.
default_role = "code"
autodoc_member_order = "bysource"  # a module's names in the order of its __all__
# Defaults as written in the source (`announce=print`, not "<built-in function print>", which
# no signature parser reads).
autodoc_preserve_defaults = True
# Long signatures (hsi.evaluate has 20 keywords) break into one parameter per line.
python_maximum_signature_line_length = 88

# Unlabelled blocks (usage lines, folder trees) are plain text, not Python to colour.
highlight_language = "text"

# Keep `--flag` as two hyphens in help texts (smart quotes would print an en dash).
smartquotes = False

html_theme = "furo"
html_show_copyright = False  # the code is Apache-2.0; the page footer has no holder to name
html_title = f"{project} {version}"
