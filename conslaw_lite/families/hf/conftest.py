"""pytest in this folder: the doctests of the modules that build transformers models (or subclass its
callbacks) need transformers; without it they are not collected (``tests/test_hf.py`` skips, saying why)."""

import importlib.util

NEEDS_TRANSFORMERS = ["archs.py", "callbacks.py", "lightning.py"]
collect_ignore = [] if importlib.util.find_spec("transformers") else NEEDS_TRANSFORMERS
