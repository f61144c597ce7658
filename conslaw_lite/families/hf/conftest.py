"""pytest in this folder: the doctests of the modules that build transformers models or subclass a trainer's
callback need that library; without it they are not collected (``tests/test_hf.py`` skips, saying why)."""

import importlib.util


def _missing(*names: str) -> bool:
    return all(importlib.util.find_spec(name) is None for name in names)


collect_ignore = [
    path
    for path, libraries in {
        "archs.py": ("transformers",),
        "callbacks.py": ("transformers",),
        "lightning.py": ("lightning", "pytorch_lightning"),
    }.items()
    if _missing(*libraries)
]
