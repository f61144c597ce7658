"""The block families, one folder each: what a contributor adds is a folder here.

A family (``toy``, ``ffn``, ``attention``, ``moe``, ``network``, ...) is a subpackage that owns
its torch modules (``block.py``), its closed-form laws and their count (``laws.py``: the finders
registered with :func:`conslaw_lite.laws.register_laws` and one ``formula``), its sympy form and
derivation cases (``symbolic.py``), and its named architectures (``archs.py``). Its
``__init__.py`` names them in one :class:`Family` called ``FAMILY``.

:func:`registered` finds every subpackage of this folder: the engines (the law registry, the
named architectures, the derivation cases) iterate over it and import no family by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Family:
    """A block family as the engines see it.

    ``chapter``: the chapter that first studies it; ``architectures``: its named architectures
    (:class:`conslaw_lite.archs.Arch`, for ``certify`` and ``drift``); ``cases``: the names of its
    derivation cases, built by the function ``case(name, size)`` of its module ``symbolic``
    (imported only when a case is asked for: sympy is slow to load).

    Examples
    ========
    >>> [(f.name, f.chapter) for f in registered()][:2]
    [('toy', 1), ('ffn', 3)]
    >>> family("ffn").case("ffn-relu", "small").formula_text
    'r = 2'
    """

    name: str
    summary: str
    chapter: int  # the chapter that first studies it: the engines list the families in reading order
    architectures: tuple = ()
    cases: tuple[str, ...] = ()
    symbolic: str | None = None  # the module that builds the cases, e.g. "conslaw_lite.families.ffn.symbolic"

    def case(self, name: str, size: str = "small"):
        """The derivation case ``name`` (one of :attr:`cases`) at ``size``, built by the module ``symbolic``."""
        if name not in self.cases:
            raise ValueError(f"the {self.name} family has no case {name!r}; its cases: {', '.join(self.cases)}")
        return importlib.import_module(self.symbolic).case(name, size)


@cache
def registered() -> tuple[Family, ...]:
    """Every family of this folder, in the book's order (chapter, then name): each subpackage's ``FAMILY``.

    A subpackage without ``FAMILY`` is an error naming it, so that a half-added family fails loudly.

    Examples
    ========
    >>> [f.name for f in registered()]  # doctest: +NORMALIZE_WHITESPACE
    ['toy', 'ffn', 'attention', 'moe', 'hf', 'network', 'gqa', 'linear_attention', 'mla',
     'conv', 'deep', 'moe_shared', 'residual']
    """
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, Family):
            raise TypeError(f"{module.__name__} defines no FAMILY = Family(...): every family folder names itself")
        found.append(family)
    return tuple(sorted(found, key=lambda f: (f.chapter, f.name)))


def family(name: str) -> Family:
    """The family called ``name``; ``ValueError`` listing the registered ones otherwise.

    Examples
    ========
    >>> family("moe").cases
    ('moe-softmax', 'moe-sigmoid', 'moe-top1')
    >>> family("cnn")
    Traceback (most recent call last):
    ...
    ValueError: unknown family 'cnn'; registered: toy, ffn, attention, moe, hf, network, gqa, linear_attention, mla, ...
    """
    by_name = {f.name: f for f in registered()}
    if name not in by_name:
        raise ValueError(f"unknown family {name!r}; registered: {', '.join(by_name)}")
    return by_name[name]


__all__ = ["Family", "family", "registered"]
