"""A whole (tiny) transformer, small enough to count every conservation law it has.

Data flow, pre-norm, one residual stream of width d::

    x₀ = E u                                     embedding (a table applied to one-hot rows u)
    x₁ = x₀ + Attn(norm₁(x₀))                    Q, K, V read norm₁; O writes the stream
    x₂ = x₁ + SwiGLU(norm₂(x₁))                  B, C read norm₂; A writes the stream
    y  = H norm(x_L)                             head

The blocks are the book's own (:class:`~conslaw_lite.families.attention.block.MultiHeadAttention`,
:class:`~conslaw_lite.families.ffn.block.SwiGLU`), so their laws are found as usual; the
model declares what couples them (:mod:`conslaw_lite.families.network.couplings`): each norm gain with
the projections reading it, and, when ε = 0, the stream writers E, O, A, whose joint
scaling every norm undoes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.ffn.block import SwiGLU
from conslaw_lite.families.network.couplings import NetworkLaws, NormCoupling

NORMS = ("rms", "layer")


def make_norm(kind: str, d: int, eps: float) -> nn.Module:
    """``RMSNorm`` (``γ ⊙ x / √(mean x² + ε)``) or bias-free ``LayerNorm`` (``γ ⊙ (x − x̄) / √(var x + ε)``).

    Both are torch's own modules; the law counter differentiates torch's fused ``layer_norm``
    through :func:`conslaw_lite.counting.exact_ops.exact_derivatives`.

    Examples
    ========
    >>> make_norm("rms", 4, 0.0)
    RMSNorm((4,), eps=0.0, elementwise_affine=True)
    """
    if kind not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")
    if eps < 0:
        raise ValueError(f"norm_eps must be ≥ 0, got {eps}")
    return nn.RMSNorm(d, eps=eps) if kind == "rms" else nn.LayerNorm(d, eps=eps, bias=False)


class Stack(nn.Module):
    """Blocks applied in turn, ``x ← block(x)``, or with ``residual=True`` ``x ← x + block(x)``.

    The smallest "deeper network" for the law counter: two attention layers, two FFNs.

    Examples
    ========
    >>> f = Stack(SwiGLU(3, 4, 3), SwiGLU(3, 2, 3), residual=True).double()
    >>> f(torch.randn(5, 3, dtype=torch.float64)).shape
    torch.Size([5, 3])
    """

    def __init__(self, *blocks: nn.Module, residual: bool = False) -> None:
        super().__init__()
        if not blocks:
            raise ValueError("a stack needs at least one block")
        self.blocks = nn.ModuleList(blocks)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x_{l+1} = x_l + f_l(x_l)`` with ``residual=True``, else ``x_{l+1} = f_l(x_l)``.

        Examples
        ========
        Toy blocks ``2x`` then ``3x``: plain ``6x``; residual ``(1 + 2)(1 + 3)x = 12x``.

        >>> from conslaw_lite.families.toy.block import ToyProduct
        >>> blocks = ToyProduct(a=2.0, b=1.0), ToyProduct(a=3.0, b=1.0)
        >>> x = torch.ones(1, 1, dtype=torch.float64)
        >>> Stack(*blocks)(x).item(), Stack(*blocks, residual=True)(x).item()
        (6.0, 12.0)
        """
        for block in self.blocks:
            x = x + block(x) if self.residual else block(x)
        return x


class TinyBlock(NetworkLaws):
    """``x + Attn(norm₁(x))`` then ``x + SwiGLU(norm₂(x))``, tokens of width d.

    Examples
    ========
    >>> block = TinyBlock(4, 2, 2, 3).double()
    >>> block(torch.randn(2, 5, 4, dtype=torch.float64)).shape
    torch.Size([2, 5, 4])
    """

    def __init__(
        self, d: int, n_heads: int, head_dim: int, hidden: int, norm: str = "rms", norm_eps: float = 1e-6,
        pe: str = "none",
    ) -> None:
        super().__init__()
        if pe == "sinusoidal":
            raise ValueError("pe='sinusoidal' adds a table between norm₁ and Q, K, V; use 'none' or 'rope'")
        self.norm1 = make_norm(norm, d, norm_eps)
        # A small RoPE base keeps the rotations far from the identity over a few tokens (a well-conditioned count).
        self.attn = MultiHeadAttention(d, n_heads, head_dim, pe=pe, rope_base=9.0)
        self.norm2 = make_norm(norm, d, norm_eps)
        self.ffn = SwiGLU(d, hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, T, d)
        """``x₁ = x + Attn(norm₁(x))``, then ``x₁ + SwiGLU(norm₂(x₁))``.

        Examples
        ========
        With O = 0 and A = 0 both branches write nothing: the block is the identity.

        >>> block = TinyBlock(4, 2, 2, 3).double()
        >>> _ = nn.init.zeros_(block.attn.O.weight), nn.init.zeros_(block.ffn.A.weight)
        >>> x = torch.randn(2, 5, 4, dtype=torch.float64)
        >>> torch.equal(block(x), x)
        True
        """
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))

    def norm_couplings(self) -> list[NormCoupling]:
        """norm₁ feeds Q, K, V and norm₂ feeds B, C: laws ``γ_j² − ‖W_q[:,j]‖² − ‖W_k[:,j]‖² − ‖W_v[:,j]‖²``, ...

        Examples
        ========
        >>> [(c.norm, c.consumers) for c in TinyBlock(4, 2, 2, 3).norm_couplings()]
        [('norm1', ('attn.Q', 'attn.K', 'attn.V')), ('norm2', ('ffn.B', 'ffn.C'))]
        """
        return [NormCoupling("norm1", ("attn.Q", "attn.K", "attn.V")), NormCoupling("norm2", ("ffn.B", "ffn.C"))]


class TinyTransformer(NetworkLaws):
    """Embedding, ``n_layers`` :class:`TinyBlock`, final norm, head: (batch, T, vocab) → (batch, T, vocab).

    The input is a (batch, T) tensor of token ids, or real rows u ∈ R^vocab (one-hot rows
    are tokens; the law counter samples generic real rows). Norms are ``"rms"`` or
    ``"layer"`` with ε = ``norm_eps``; ``pe`` is ``"none"`` or ``"rope"``.

    Examples
    ========
    >>> model = TinyTransformer(vocab=5, d=4, n_heads=2, head_dim=2, hidden=3).double()
    >>> model(torch.tensor([[0, 3, 1]])).shape
    torch.Size([1, 3, 5])
    >>> sum(p.numel() for p in model.parameters())  # E 20, block 108 (γ₁ 4, QKV 48, O 16, γ₂ 4, BC 24, A 12), γ 4, H 20
    152
    """

    def __init__(
        self, vocab: int, d: int, n_heads: int, head_dim: int, hidden: int, n_layers: int = 1, norm: str = "rms",
        norm_eps: float = 1e-6, pe: str = "none",
    ) -> None:
        super().__init__()
        if min(vocab, d, n_heads, head_dim, hidden, n_layers) < 1:
            raise ValueError(f"sizes must be positive, got vocab={vocab}, d={d}, n_heads={n_heads}, "
                             f"head_dim={head_dim}, hidden={hidden}, n_layers={n_layers}")
        self.vocab, self.norm_eps = vocab, norm_eps
        self.embed = nn.Linear(vocab, d, bias=False)  # E ∈ R^(d×vocab): token t ↦ column E[:, t]
        self.blocks = nn.ModuleList(
            TinyBlock(d, n_heads, head_dim, hidden, norm, norm_eps, pe) for _ in range(n_layers)
        )
        self.norm = make_norm(norm, d, norm_eps)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """``y = H norm(x_L)`` with ``x₀ = E u`` and ``x_L`` after the blocks; token ids are one-hot rows u.

        Examples
        ========
        >>> model = TinyTransformer(vocab=5, d=4, n_heads=2, head_dim=2, hidden=3).double()
        >>> ids = torch.tensor([[0, 3, 1]])
        >>> torch.equal(model(ids), model(F.one_hot(ids, 5).double()))
        True
        """
        if not u.is_floating_point():
            u = F.one_hot(u, self.vocab).to(self.embed.weight.dtype)  # (batch, T) ids -> (batch, T, vocab)
        if u.dim() != 3 or u.shape[-1] != self.vocab:
            raise ValueError(f"expected token ids (batch, T) or rows (batch, T, {self.vocab}), got {tuple(u.shape)}")
        x = self.embed(u)  # (batch, T, d)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # (batch, T, vocab)

    def norm_couplings(self) -> list[NormCoupling]:
        """The final norm feeds the head H: laws ``γ_j² − ‖H[:, j]‖²`` (the blocks declare their own).

        Examples
        ========
        >>> TinyTransformer(vocab=5, d=4, n_heads=2, head_dim=2, hidden=3).norm_couplings()
        [NormCoupling(norm='norm', consumers=('head',))]
        """
        return [NormCoupling("norm", ("head",))]

    def _stream_writers(self) -> list[str]:
        writers = [f"blocks.{i}.{w}.weight" for i in range(len(self.blocks)) for w in ("attn.O", "ffn.A")]
        return ["embed.weight", *writers]

    def scale_invariant_weights(self) -> list[str]:
        """With ε = 0 every norm undoes a common scale of the stream, so E, each O and each A scale together.

        The law is ``‖E‖_F² + Σ_l (‖O_l‖_F² + ‖A_l‖_F²)``; with ε > 0 there is none.

        Examples
        ========
        >>> TinyTransformer(vocab=5, d=4, n_heads=2, head_dim=2, hidden=3, norm_eps=0.0).scale_invariant_weights()
        ['embed.weight', 'blocks.0.attn.O.weight', 'blocks.0.ffn.A.weight']
        >>> TinyTransformer(vocab=5, d=4, n_heads=2, head_dim=2, hidden=3).scale_invariant_weights()
        []
        """
        return self._stream_writers() if self.norm_eps == 0 else []

    def shift_invariant_weights(self) -> list[str]:
        """LayerNorm subtracts the mean over the stream, so every stream writer may shift by ``1 aᵀ``.

        Laws: the column sums ``1ᵀE``, ``1ᵀO_l``, ``1ᵀA_l``; RMSNorm keeps the mean, so none.

        Examples
        ========
        >>> TinyTransformer(vocab=5, d=4, n_heads=2, head_dim=2, hidden=3, norm="layer").shift_invariant_weights()
        ['embed.weight', 'blocks.0.attn.O.weight', 'blocks.0.ffn.A.weight']
        """
        return self._stream_writers() if isinstance(self.norm, nn.LayerNorm) else []
