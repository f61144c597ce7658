"""Laws of feed-forward blocks: none for GELU/SiLU, one per hidden unit for ReLU and SwiGLU.

Chapter 03 of the book, with A ∈ R^(m×r) the output matrix and B, C ∈ R^(r×d):

* ``A·act(Bx)`` with act = GELU or SiLU: no law (N = 0). Neither activation is
  positively homogeneous, so no rescaling of a hidden unit leaves f unchanged.
* ReLU (positively homogeneous): ``‖A_{:,i}‖² − ‖B_{i,:}‖²`` per unit (N = r).
* linear: ``AᵀA − BBᵀ`` (N = r(r+1)/2 for r ≤ min(m, d)).
* SwiGLU ``A·(silu(Bx) ⊙ Cx)``: ``‖A_{:,i}‖² − ‖C_{i,:}‖²`` per unit (N = r),
  from the symmetry ``A_{:,i} → λA_{:,i}, C_{i,:} → C_{i,:}/λ``.

Biases: a bias on the rescaled input row joins it, ``B_{i,:} → [B_{i,:}, b_i]``
(the symmetry rescales ``b_i`` with the row); the output bias and the SwiGLU gate
bias are untouched by the symmetry and do not enter. The same finders serve
timm's ``Mlp``, ``GluMlp`` and ``SwiGLU`` (registered by name: timm stays optional).
"""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.activations import ACTIVATIONS, activation_of
from conslaw_lite.families.ffn.block import FFN, SwiGLU
from conslaw_lite.laws import Batch, BlockLaws, Law, Params, register_laws
from conslaw_lite.shared_squares import squared


def formula(block: str, r: int) -> tuple[int, str]:
    """The number of laws of a feed-forward block with r hidden units, and how it is counted.

    ``block``: an activation of :data:`~conslaw_lite.activations.ACTIVATIONS` for ``A·act(Bx)``
    (no law; ``r`` for a positively homogeneous one; ``r(r+1)/2`` for the identity, r ≤ min(m, d))
    or ``swiglu`` (``r``). The one formula the named architectures, the derivation cases and the
    tests read.

    Examples
    ========
    >>> formula("relu", 4), formula("linear", 2), formula("gelu", 4)[0]
    ((4, 'r = 4'), (3, 'r(r+1)/2 = 2·3/2 = 3'), 0)
    """
    if block == "swiglu":  # the value branch's rescaling, whatever the gate
        return r, f"r = {r}"
    if block not in ACTIVATIONS:
        raise ValueError(f"block must be one of {(*ACTIVATIONS, 'swiglu')}, got {block!r}")
    rescaling = ACTIVATIONS[block].rescaling
    if rescaling == "unit":
        return r, f"r = {r}"
    if rescaling == "all":
        return r * (r + 1) // 2, f"r(r+1)/2 = {r}·{r + 1}/2 = {r * (r + 1) // 2}"
    return 0, "0: no rescaling survives a non-homogeneous activation"


def _matrix(w: torch.Tensor) -> torch.Tensor:
    """A Linear weight (out, in), or a 1×1 convolution's (out, in, 1, 1), as (out, in); a stack of them
    (..., out, in) likewise (the laws below use negative axes only, so they evaluate stacked layers at once; the
    monitor checks each stack, so a stack of 1×1 Linear weights read as kernels would stay unstacked, not wrong)."""
    return w[..., 0, 0] if w.ndim >= 4 and w.shape[-2:] == (1, 1) else w


def unit_balance(A: str, W: str, w: str | None = None, rows: slice = slice(None)) -> Law:
    """``h_i = ‖A_{:,i}‖² − ‖[W_{i,:}, w_i]‖²`` for each hidden unit i (a vector of r laws).

    ``A``, ``W``, ``w`` name the output weight (m×r), the rescaled input weight and its
    bias (``None``: no bias); ``rows`` picks W's rows that feed the hidden units.

    Examples
    ========
    >>> import torch
    >>> h = unit_balance("A", "C", "c")
    >>> p = {"A": torch.tensor([[3.0, 1.0]]), "C": torch.tensor([[1.0], [2.0]]), "c": torch.tensor([2.0, 0.0])}
    >>> h(p).tolist()  # [9 − (1 + 4), 1 − 4]
    [4.0, -3.0]
    """

    return lambda p: _column_sq(p, A) - _row_sq(p, W, w, rows)


def _column_sq(p: Params, A: str) -> torch.Tensor:
    """``‖A_{:,i}‖²`` for each column i: (r,)."""
    return squared(_matrix(p[A])).sum(-2)


def _row_sq(p: Params, W: str, w: str | None, rows: slice) -> torch.Tensor:
    """``‖[W_{i,:}, w_i]‖²`` for the rows i of W in ``rows``: (r,)."""
    h = squared(_matrix(p[W]))[..., rows, :].sum(-1)  # the whole W squared: another law may read it (a coupling)
    return h if w is None else h + squared(p[w])[..., rows]


def gram_balance(A: str, B: str, b: str | None = None) -> Law:
    """``AᵀA − [B, b][B, b]ᵀ`` (r×r), the laws of a linear block ``A(Bx + b)``.

    Examples
    ========
    >>> import torch
    >>> h = gram_balance("A", "B")
    >>> h({"A": torch.eye(2), "B": 2 * torch.eye(2)}).tolist()
    [[-3.0, 0.0], [0.0, -3.0]]
    """

    def law(p: Params) -> torch.Tensor:
        Bb = _matrix(p[B]) if b is None else torch.cat([_matrix(p[B]), p[b].unsqueeze(-1)], dim=-1)  # (r, d[+1])
        return _matrix(p[A]).mT @ _matrix(p[A]) - Bb @ Bb.mT

    return law


def column_norms(A: str) -> Law:
    """``‖A_{:,i}‖²`` per hidden unit: the control, one half of a law, not conserved.

    Examples
    ========
    >>> import torch
    >>> column_norms("A")({"A": torch.tensor([[3.0, 1.0], [4.0, 0.0]])}).tolist()
    [25.0, 1.0]
    """
    return lambda p: _column_sq(p, A)


def _row(letter: str, bias: str | None) -> str:
    return f"‖[{letter}_{{i,:}},{letter.lower()}_i]‖²" if bias else f"‖{letter}_{{i,:}}‖²"


def mlp_block(family: str, A: str, B: str, b: str | None = None) -> BlockLaws:
    """The laws of ``A·act(Bx + b) + a`` for an activation of :data:`~conslaw_lite.activations.ACTIVATIONS`.

    ``A``, ``B``, ``b`` are full parameter names. A positively homogeneous activation (ReLU) keeps
    the unit balance, the identity ``AᵀA − BBᵀ``; any other (GELU, SiLU) gets no law, and its
    control is ReLU's law, which it does not keep.

    Examples
    ========
    >>> sorted(mlp_block("relu", "mlp.A.weight", "mlp.B.weight").laws)
    ['‖A_{:,i}‖²−‖B_{i,:}‖²']
    >>> mlp_block("gelu", "mlp.A.weight", "mlp.B.weight").laws
    {}
    """
    balance = {f"‖A_{{:,i}}‖²−{_row('B', b)}": unit_balance(A, B, b)}
    controls = {"‖A_{:,i}‖²": column_norms(A)}
    if family not in ACTIVATIONS:
        raise ValueError(f"activation family must be one of {tuple(ACTIVATIONS)}, got {family!r}")
    rescaling = ACTIVATIONS[family].rescaling
    if rescaling == "unit":
        return BlockLaws(f"ffn-{family}", balance, controls)
    if rescaling == "all":
        name = "AᵀA−BBᵀ" if b is None else "AᵀA−[B,b][B,b]ᵀ"
        return BlockLaws(f"ffn-{family}", {name: gram_balance(A, B, b)}, controls)
    return BlockLaws(f"ffn-{family}", {}, {**controls, **balance})


def glu_block(
    A: str,
    C: str,
    B: str,
    *,
    c: str | None = None,
    b: str | None = None,
    C_rows: slice = slice(None),
    B_rows: slice = slice(None),
    gate_family: str = "silu",
) -> BlockLaws:
    """The laws of a gated block ``A·(act(Bx + b) ⊙ (Cx + c)) + a``: ``‖A_{:,i}‖² − ‖[C_{i,:}, c_i]‖²``.

    The rescaling of the linear branch C needs nothing of the gate, so these r laws
    hold for any gate activation. A ReLU gate (ReGLU) adds its own rescaling and r
    more laws, ``‖A_{:,i}‖² − ‖[B_{i,:}, b_i]‖²``; otherwise that quantity is a control.

    Examples
    ========
    >>> sorted(glu_block("A.weight", "C.weight", "B.weight", c="C.bias").laws)
    ['‖A_{:,i}‖²−‖[C_{i,:},c_i]‖²']
    >>> len(glu_block("A.weight", "C.weight", "B.weight", gate_family="relu").laws)
    2
    """
    value_law = {f"‖A_{{:,i}}‖²−{_row('C', c)}": unit_balance(A, C, c, C_rows)}
    gate_balance = {f"‖A_{{:,i}}‖²−{_row('B', b)}": unit_balance(A, B, b, B_rows)}
    controls = {"‖A_{:,i}‖²": column_norms(A)}

    def units(p: Params) -> torch.Tensor:  # the three share ‖A_{:,i}‖²: one evaluation for the Monitor
        a = _column_sq(p, A)
        return torch.stack([a - _row_sq(p, C, c, C_rows), a, a - _row_sq(p, B, b, B_rows)], dim=-2)

    batches = (Batch(units, (*value_law, *controls, *gate_balance)),)
    if gate_family in ACTIVATIONS and ACTIVATIONS[gate_family].rescaling == "unit":
        return BlockLaws("reglu", {**value_law, **gate_balance}, controls, batches)
    kind = "swiglu" if gate_family == "silu" else f"glu-{gate_family}"
    return BlockLaws(kind, value_law, {**controls, **gate_balance}, batches)


def _bias(module: nn.Module, prefix: str, name: str) -> str | None:
    return f"{prefix}{name}.bias" if getattr(module, name).bias is not None else None


@register_laws(FFN)
def _ffn(module: FFN, prefix: str) -> BlockLaws:
    return mlp_block(
        module.activation, prefix + "A.weight", prefix + "B.weight", _bias(module, prefix, "B")
    )


@register_laws(SwiGLU)
def _swiglu(module: SwiGLU, prefix: str) -> BlockLaws:
    return glu_block(
        prefix + "A.weight",
        prefix + "C.weight",
        prefix + "B.weight",
        c=_bias(module, prefix, "C"),
        b=_bias(module, prefix, "B"),
    )


def _activation_family(act: nn.Module) -> str:
    known = activation_of(act)
    return known.name if known else type(act).__name__.lower()


def _plain_hidden(module: nn.Module) -> bool:
    """No normalisation between the hidden units and fc2 (a norm would break the rescaling)."""
    return isinstance(getattr(module, "norm", nn.Identity()), nn.Identity)


@register_laws("timm.layers.mlp.Mlp")
def _timm_mlp(module: nn.Module, prefix: str) -> BlockLaws | None:
    """timm's ``fc2(act(fc1 x))``: B = fc1, A = fc2. Unknown activations or a hidden norm: no claim."""
    family = _activation_family(module.act)
    if family not in ACTIVATIONS or not _plain_hidden(module):
        return None
    return mlp_block(
        family, prefix + "fc2.weight", prefix + "fc1.weight", _bias(module, prefix, "fc1")
    )


@register_laws("timm.layers.mlp.SwiGLU")
def _timm_swiglu(module: nn.Module, prefix: str) -> BlockLaws | None:
    """timm's ``fc2(act(fc1_g x) ⊙ fc1_x x)``: the gate B = fc1_g, the linear branch C = fc1_x, A = fc2."""
    if not _plain_hidden(module):
        return None
    return glu_block(
        prefix + "fc2.weight",
        prefix + "fc1_x.weight",
        prefix + "fc1_g.weight",
        c=_bias(module, prefix, "fc1_x"),
        b=_bias(module, prefix, "fc1_g"),
        gate_family=_activation_family(module.act),
    )


@register_laws("timm.layers.mlp.GluMlp")
def _timm_glu_mlp(module: nn.Module, prefix: str) -> BlockLaws | None:
    """timm's ``fc2(x₁ ⊙ act(x₂))`` with ``[x₁; x₂] = fc1 x`` (``gate_last``; else ``act(x₁) ⊙ x₂``)."""
    if not _plain_hidden(module):
        return None
    r = module.fc2.weight.shape[1]
    value, gate = (slice(0, r), slice(r, 2 * r)) if module.gate_last else (slice(r, 2 * r), slice(0, r))
    fc1, bias = prefix + "fc1.weight", _bias(module, prefix, "fc1")
    return glu_block(
        prefix + "fc2.weight",
        fc1,
        fc1,
        c=bias,
        b=bias,
        C_rows=value,
        B_rows=gate,
        gate_family=_activation_family(module.act),
    )
