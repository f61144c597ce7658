"""What a named architecture is: sizes in (:class:`ArchOptions`), a module out (:class:`Built`).

A builder takes :class:`ArchOptions`, fills in its own defaults for the sizes left
unset, and returns a :class:`Built`: the module, the shape of one input (no batch
dimension), and the number of laws the theory predicts (the formula is what the
computed count is checked against, never where the count comes from).
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

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "seed" and v is not None and v < 1:
                raise ValueError(f"--{f.name.replace('_', '-')} must be a positive integer, got {v}")


@dataclass(frozen=True)
class Built:
    """A module ready to certify or train: ``model(x)`` with ``x`` of shape ``(batch, *input_shape)``."""

    model: nn.Module
    input_shape: tuple[int, ...]
    formula: int  # the number of laws the theory predicts
    formula_text: str  # how, e.g. "n·k(k+1) = 2·2·3 = 12"
    note: str = ""  # anything the reader must know (e.g. RoPE frequencies chosen for conditioning)


Builder = Callable[[ArchOptions], Built]

SIZE_OPTIONS = ("dim", "hidden", "out", "heads", "head_dim", "seq", "experts", "top_k")  # ArchOptions' sizes


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
        parser.add_argument(f"--{size.replace('_', '-')}", type=int, help=f"architecture size {size} (default: arch's)")


def size_options(args: argparse.Namespace, seed: int = 0) -> ArchOptions:
    """The :class:`ArchOptions` that :func:`add_size_arguments`' options parsed into."""
    return ArchOptions(**{size: getattr(args, size) for size in SIZE_OPTIONS}, seed=seed)


@dataclass(frozen=True)
class Arch:
    """A CLI architecture: its ``name``, a one-line ``summary`` with the law count, and its builder."""

    name: str
    summary: str
    build: Builder
