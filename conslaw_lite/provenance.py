"""Where each architecture's list of laws comes from: proved (a paper), derived here, or conjectured.

:data:`PROVENANCE` declares, per named architecture, the status of the claim that its laws are
*complete*, and where it is made; :func:`summary_rows` joins it with what the registry computes (the
family, the chapter, the laws in the architecture's summary, its formula at the default sizes).

* ``proved``: a theorem of a paper (the book's, or Marcotte, Gribonval & Peyré's);
* ``derived``: derived in this book (a symmetry gives the laws; the counter's certificate, count = closed
  form = independent laws at two sizes or more, or the exact derivation of :mod:`conslaw_lite.symbolic`,
  gives completeness);
* ``conjectured``: a formula the counts support at every size tried, with no argument for completeness.

An architecture missing here is an error naming it (``tests/test_provenance.py``): a new one is classified
when it is added.
"""

from __future__ import annotations

from dataclasses import dataclass

from conslaw_lite.archs import ArchOptions
from conslaw_lite.families import registered

STATUSES = ("proved", "derived", "conjectured")
PAPER = "Tran et al. 2026"
MARCOTTE = "Marcotte, Gribonval & Peyré 2025"

PROVENANCE: dict[str, tuple[str, str]] = {
    "toy": ("proved", PAPER),
    "ffn-gelu": ("proved", PAPER),
    "ffn-silu": ("proved", PAPER),
    "ffn-relu": ("proved", PAPER),
    "ffn-linear": ("proved", PAPER),
    "swiglu": ("proved", PAPER),
    "mha": ("proved", PAPER),
    "mha-sinusoidal": ("proved", PAPER),
    "mha-rope": ("proved", PAPER),
    "mha-bias": ("derived", "chapter 4"),
    "mha-rope-qknorm": ("derived", "chapter 5 (QK-norm: not in the paper)"),
    "mha-rope-qknorm-eps0": ("derived", "chapter 5 (QK-norm: not in the paper)"),
    "mha-rope-qknorm-shared": ("derived", "chapter 5 (QK-norm: not in the paper)"),
    "mha-rope-qknorm-shared-eps0": ("derived", "chapter 5 (QK-norm: not in the paper)"),
    "gqa": ("derived", "chapter 14 (grouped K/V heads; derive and certificates)"),
    "gqa-rope": ("derived", "chapter 14 (derive at small sizes, certificates up to D = 2160)"),
    "gqa-rope-qknorm": ("derived", "chapter 14 (certificates; QK-norm is not derived)"),
    "gqa-rope-qknorm-eps0": ("derived", "chapter 14 (certificates; QK-norm is not derived)"),
    "gqa-rope-qknorm-shared": ("derived", "chapter 14 (certificates; QK-norm is not derived)"),
    "gqa-rope-qknorm-shared-eps0": ("derived", "chapter 14 (certificates; QK-norm is not derived)"),
    "mqa": ("derived", "chapter 14 (one K/V head; derive and certificates)"),
    "mqa-rope": ("derived", "chapter 14 (certificates)"),
    "linear-attention": ("derived", "chapter 14 (a scale between score and value; derive and certificates)"),
    "moe-softmax": ("proved", PAPER),
    "moe-topk": ("derived", "chapter 6 (top-k routing; top-1 freezes the gate)"),
    "moe-sigmoid": ("derived", "chapter 6 (corrects the paper: no gate law)"),
    "qwen3-attention": ("derived", "chapter 8 (transformers' Qwen3 attention: GQA, RoPE, QK-norm)"),
    "llama-attention": ("derived", "chapter 8 (transformers' Llama attention: GQA, RoPE)"),
    "gpt2-attention": ("derived", "chapter 4 (transformers' GPT-2 attention: heads with biases, Conv1D layout)"),
    "bert-attention": ("derived", "chapter 4 (transformers' BERT attention; its LayerNorm removes the mean)"),
    "qwen3-mlp": ("proved", PAPER),
    "qwen3-moe": ("derived", "chapter 8 (transformers' Qwen3-MoE block: top-k routing)"),
    "tiny-transformer": ("derived", "chapter 10 (whole-network laws)"),
    "mla": ("conjectured", "chapter 15 (a conjecture with numeric evidence)"),
    "mla-norm": ("conjectured", "chapter 15 (a conjecture with numeric evidence)"),
    "mla-norm-eps0": ("conjectured", "chapter 15 (a conjecture with numeric evidence)"),
    "conv-relu": ("proved", MARCOTTE),
    "conv2d-relu": ("proved", MARCOTTE),
    "residual-relu": ("proved", MARCOTTE),
    "residual-relu-bias": ("proved", MARCOTTE),
    "residual-gelu": ("derived", "chapter 16 (the skip adds none)"),
    "moe-shared": ("derived", "chapter 16 (shared experts)"),
    "moe-shared-bias": ("derived", "chapter 16 (routing bias)"),
    "deep-relu": ("conjectured", "chapter 16 (deep stacks)"),
    "deep-gelu": ("conjectured", "chapter 16 (deep stacks)"),
    "deep-swiglu": ("conjectured", "chapter 16 (deep stacks)"),
}


@dataclass(frozen=True)
class Row:
    """One architecture of the book: its family, chapter, laws, count at the default sizes, and status."""

    arch: str
    family: str
    chapter: int
    laws: str  # the architecture's one-line summary, which names its laws
    formula: str  # the closed-form count at the default sizes
    status: str  # one of STATUSES
    source: str


def provenance(arch: str) -> tuple[str, str]:
    """``(status, source)`` of an architecture's complete list of laws; ``ValueError`` for an unclassified one.

    Examples
    ========
    >>> provenance("swiglu"), provenance("deep-gelu")[0]
    (('proved', 'Tran et al. 2026'), 'conjectured')
    >>> provenance("mystery")
    Traceback (most recent call last):
    ...
    ValueError: architecture 'mystery' has no provenance: add it to conslaw_lite.provenance.PROVENANCE
    """
    if arch not in PROVENANCE:
        raise ValueError(f"architecture {arch!r} has no provenance: add it to conslaw_lite.provenance.PROVENANCE")
    return PROVENANCE[arch]


def summary_rows() -> list[Row]:
    """Every registered architecture, in the book's order, with its laws, default count and provenance.

    Examples
    ========
    >>> rows = summary_rows()
    >>> rows[0].arch, rows[0].formula, rows[0].status
    ('toy', 'D − 1 = 2 − 1 = 1', 'proved')
    """
    rows = []
    for family in registered():
        for arch in family.architectures:
            formula = arch.build(ArchOptions()).formula_text
            rows.append(Row(arch.name, family.name, family.chapter, arch.summary, formula, *provenance(arch.name)))
    return rows
