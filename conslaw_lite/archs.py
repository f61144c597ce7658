"""Named architectures for ``certify`` and ``drift``: sizes in (:class:`ArchOptions`), a module out (:class:`Built`).

Each block family (:mod:`conslaw_lite.families`) lists its own :class:`Arch` s (``toy``,
``ffn-gelu``, ``mha-rope``, ``tiny-transformer``, ...); :func:`list_archs` and :func:`get_arch`
gather them from the registered families.

A builder takes :class:`ArchOptions`, fills in its own defaults for the sizes left
unset, and returns a :class:`Built`: the module, the shape of one input (no batch
dimension), and the number of laws the theory predicts (the formula is what the
computed count is checked against, never where the count comes from).

Each :class:`Arch` declares the sizes its builder reads (``sizes``); the builder ignores the others, so
that one :class:`ArchOptions` can size several architectures, and the command line refuses them
(:func:`check_sizes`): a ``--heads`` given to ``swiglu`` is a mistake to name, not an option to drop.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from torch import nn


@dataclass(frozen=True)
class ArchOptions:
    """Sizes from the command line; ``None`` means "the architecture's default"."""

    dim: int | None = None  # d, input width
    hidden: int | None = None  # r, hidden width
    out: int | None = None  # m, output width
    heads: int | None = None  # n
    head_dim: int | None = None  # k
    seq: int | None = None  # T, tokens per input
    experts: int | None = None  # n_E
    top_k: int | None = None
    depth: int | None = None  # L, hidden layers of a deep stack
    seed: int = 0

    def with_defaults(self, **defaults: int) -> ArchOptions:
        """A copy where each size still ``None`` takes the given default.

        Examples
        ========
        Sizes the user gave win over the architecture's defaults:

        >>> options = ArchOptions(dim=3).with_defaults(dim=2, hidden=4)
        >>> options.dim, options.hidden
        (3, 4)
        """
        unset = {k: v for k, v in defaults.items() if getattr(self, k) is None}
        return replace(self, **unset)

    def heads_fit(self) -> ArchOptions:
        """Itself, when d ≥ k: under it an attention's k × k laws per head are not independent, and no formula here
        counts them.

        Examples
        ========
        >>> ArchOptions(dim=2, head_dim=8).heads_fit()
        Traceback (most recent call last):
        ...
        ValueError: --dim (2) must be at least --head-dim (8): the counts assume d ≥ k
        """
        d, k = self.dim, self.head_dim
        if d < k:
            raise ValueError(f"--dim ({d}) must be at least --head-dim ({k}): the counts assume d ≥ k")
        return self

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "seed" and v is not None and v < 1:
                raise ValueError(f"{size_flag(f.name)} must be a positive integer, got {v}")


@dataclass(frozen=True)
class Built:
    """A module ready to certify or train: ``model(x)`` with ``x`` of shape ``(batch, *input_shape)``."""

    model: nn.Module
    input_shape: tuple[int, ...]
    formula: int  # the number of laws the theory predicts
    formula_text: str  # how, e.g. "n·k(k+1) = 2·2·3 = 12"
    note: str = ""  # anything the reader must know (e.g. RoPE frequencies chosen for conditioning)


Builder = Callable[[ArchOptions], Built]

SIZE_OPTIONS = ("dim", "hidden", "out", "heads", "head_dim", "seq", "experts", "top_k", "depth")  # ArchOptions' sizes


def size_flag(size: str) -> str:
    """The command-line option of the size ``size`` of :class:`ArchOptions`.

    Examples
    ========
    >>> size_flag("head_dim")
    '--head-dim'
    """
    return f"--{size.replace('_', '-')}"


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dim``, ``--hidden``, ... (one per name in ``SIZE_OPTIONS``), each an int defaulting to ``None``.

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_size_arguments(parser)
    >>> options = size_options(parser.parse_args(["--head-dim", "4"]))
    >>> options.head_dim, options.dim
    (4, None)
    """
    for size in SIZE_OPTIONS:
        parser.add_argument(size_flag(size), type=int, help=f"architecture size {size} (default: arch's)")


def size_options(args: argparse.Namespace, seed: int = 0) -> ArchOptions:
    """The :class:`ArchOptions` that :func:`add_size_arguments`' options parsed into."""
    return ArchOptions(**{size: getattr(args, size) for size in SIZE_OPTIONS}, seed=seed)


@dataclass(frozen=True)
class Arch:
    """A CLI architecture: its ``name``, a one-line ``summary`` with the law count, its builder, and the
    ``sizes`` of :class:`ArchOptions` the builder reads (``tests/test_certify.py`` checks them against the build).

    Examples
    ========
    >>> Arch("toy", "a·b·x", lambda options: None, ("dim", "width"))
    Traceback (most recent call last):
    ...
    ValueError: toy declares unknown sizes width; ArchOptions has dim, hidden, out, heads, head_dim, seq, ...
    """

    name: str
    summary: str
    build: Builder
    sizes: tuple[str, ...]

    def __post_init__(self) -> None:
        unknown = [size for size in self.sizes if size not in SIZE_OPTIONS]
        if unknown:
            raise ValueError(f"{self.name} declares unknown sizes {', '.join(unknown)}; "
                             f"ArchOptions has {', '.join(SIZE_OPTIONS)}")

    @property
    def flags(self) -> list[str]:
        """The command-line options of :attr:`sizes`, in the order of ``--help``.

        Examples
        ========
        >>> get_arch("swiglu").flags
        ['--dim', '--hidden', '--out']
        """
        return [size_flag(size) for size in SIZE_OPTIONS if size in self.sizes]


def _by_name() -> dict[str, Arch]:
    from conslaw_lite.families import registered  # the families build on this module's types

    return {arch.name: arch for family in registered() for arch in family.architectures}


def list_archs() -> list[str]:
    """The names ``certify`` and ``drift`` accept, sorted.

    Examples
    ========
    >>> "toy" in list_archs(), "mha-rope" in list_archs()
    (True, True)
    """
    return sorted(_by_name())


def get_arch(name: str) -> Arch:
    """The architecture called ``name``; ``ValueError`` listing the valid names otherwise.

    Examples
    ========
    >>> built = get_arch("toy").build(ArchOptions())  # f = a·b·x: D − 1 = 1 law
    >>> built.formula, built.formula_text
    (1, 'D − 1 = 2 − 1 = 1')
    >>> get_arch("tyo")
    Traceback (most recent call last):
    ...
    ValueError: unknown architecture 'tyo'; valid: ...
    """
    archs = _by_name()
    if name not in archs:
        raise ValueError(f"unknown architecture {name!r}; valid: {', '.join(sorted(archs))}")
    return archs[name]


def given_sizes(options: ArchOptions) -> list[str]:
    """The sizes set in ``options`` (not left ``None``), in the order of ``SIZE_OPTIONS``.

    Examples
    ========
    >>> given_sizes(ArchOptions(heads=2, dim=4))
    ['dim', 'heads']
    """
    return [size for size in SIZE_OPTIONS if getattr(options, size) is not None]


def check_sizes(name: str, options: ArchOptions) -> None:
    """``ValueError`` naming each size set in ``options`` that architecture ``name`` does not read, and those it reads.

    A size left ``None`` (an option not given) is never an error.

    Examples
    ========
    >>> check_sizes("swiglu", ArchOptions(dim=5))
    >>> check_sizes("swiglu", ArchOptions(dim=5, heads=7, seq=9))
    Traceback (most recent call last):
    ...
    ValueError: swiglu takes no --heads, --seq (its size options: --dim, --hidden, --out)
    """
    arch = get_arch(name)
    unread = [size_flag(size) for size in given_sizes(options) if size not in arch.sizes]
    if unread:
        raise ValueError(f"{name} takes no {', '.join(unread)} (its size options: {', '.join(arch.flags)})")


__all__ = [
    "Arch", "ArchOptions", "Builder", "Built", "add_size_arguments", "check_sizes", "get_arch", "given_sizes",
    "list_archs", "size_flag", "size_options",
]
