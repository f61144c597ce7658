"""Named architectures for the ``certify`` and ``drift`` commands.

Each block family registers builders under the names the CLI accepts
(``ffn-gelu``, ``mha-rope``, ...). A builder takes :class:`ArchOptions`, fills
in its own defaults for the sizes left unset, and returns a :class:`Built`:
the module, the shape of one input (no batch dimension), and the number of
laws the theory predicts (the formula is what the computed count is checked
against, never where the count comes from).
"""

from __future__ import annotations

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
        """A copy where each size still ``None`` takes the given default."""
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


@dataclass(frozen=True)
class Arch:
    name: str
    summary: str
    build: Builder


ARCHS: dict[str, Arch] = {}


def register_arch(name: str, summary: str) -> Callable[[Builder], Builder]:
    """Register ``build(options) -> Built`` under ``name`` for the CLI."""

    def decorate(build: Builder) -> Builder:
        ARCHS[name] = Arch(name, summary, build)
        return build

    return decorate


def get_arch(name: str) -> Arch:
    """The architecture called ``name``; ``ValueError`` listing the valid names otherwise."""
    import conslaw_lite.laws  # noqa: F401  (registers every block family's architectures)

    if name not in ARCHS:
        raise ValueError(f"unknown architecture {name!r}; valid: {', '.join(sorted(ARCHS))}")
    return ARCHS[name]
