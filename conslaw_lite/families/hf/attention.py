"""Laws of transformers' attention (Qwen3, Llama, Qwen3-MoE): grouped K/V heads, RoPE on half-split pairs,
Qwen3's QK-norm with gains shared by every head, and the projections' biases.

n_q query heads share n_kv key/value heads (group g holds queries h with h // (n_q/n_kv) = g). Head h's
matrices in the paper's layout are the rows h·k:(h+1)·k of ``q_proj.weight`` transposed, with the bias
appended as a last row when ``attention_bias`` (``Q̃_h = [Q_h; b_q,hᵀ]``: the symmetry scales the bias with
the row), and the columns h·k:(h+1)·k of ``o_proj.weight`` (its bias enters no law). transformers' RoPE
turns coordinate j together with j + k/2 (``rotate_half``), so its 2×2 block j is the columns {j, j + k/2}.
Per group g:

* no QK-norm (Llama): ``Σ_{h∈g} ‖Q̃_h^(j)‖_F² − ‖K̃_g^(j)‖_F²`` per RoPE block j (k/2 laws): a symmetry
  G of the key must commute with every rotation, one scale per block is left;
* QK-norm with gains shared by all heads (Qwen3, ε > 0): the scale moves to the gains,
  ``‖γ_q^(j)‖² − ‖γ_k^(j)‖²`` per block, k/2 laws for the whole block; with ε = 0 the norm ignores each
  head's scale and ``‖Q̃_h‖_F²`` (each query head) and ``‖K̃_g‖_F²`` (each key head) are laws too;
* always ``Ṽ_gᵀṼ_g − Σ_{h∈g} O_hᵀO_h`` (k(k+1)/2 laws).

Controls (look-alikes that move): one half of each law in its own shape, and under QK-norm the law of
the block without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from conslaw_lite.families.gqa.laws import assemble
from conslaw_lite.laws import Batch, Law, Params

UnitFn = Callable[[Params], torch.Tensor]  # θ ↦ one value per group (or head), stacked on axis 0


@dataclass(frozen=True)
class HFAttentionSpec:
    """One transformers attention by parameter names: ``q_proj``, ``k_proj``, ``v_proj`` weights (and biases),
    ``o_proj.weight``, and the QK-norm gains (k,) when the block has them, with their ε."""

    n_heads: int
    n_kv_heads: int
    k: int
    prefix: str = ""
    bias: bool = False
    qk_norm: bool = False
    norm_eps: float = 1e-6

    def name(self, projection: str, tensor: str = "weight") -> str:
        """The full parameter name of ``projection.tensor`` (``"model.layers.0.self_attn.q_proj.weight"``)."""
        return f"{self.prefix}{projection}.{tensor}"

    def heads(self, p: Params, projection: str) -> torch.Tensor:
        """Head matrices ``[W_h; b_hᵀ]`` of an input projection: (heads, d(+1), k).

        Examples
        ========
        >>> spec = HFAttentionSpec(2, 1, 2, bias=True)
        >>> p = {"k_proj.weight": torch.arange(6.0).reshape(2, 3), "k_proj.bias": torch.tensor([7.0, 8.0])}
        >>> spec.heads(p, "k_proj")[0]  # K_0 = rows 0, 1 transposed, the bias as a last row
        tensor([[0., 3.],
                [1., 4.],
                [2., 5.],
                [7., 8.]])
        """
        W = p[self.name(projection)]
        M = W.view(-1, self.k, W.shape[-1]).transpose(1, 2)  # (heads, d, k)
        if not self.bias:
            return M
        return torch.cat([M, p[self.name(projection, "bias")].view(-1, 1, self.k)], dim=1)  # (heads, d+1, k)

    def groups(self, p: Params, projection: str) -> torch.Tensor:
        """The heads of each K/V group stacked: (n_kv, per·rows, k), so ``Σ_{h∈g} Q_hᵀQ_h`` is one Gram matrix."""
        if projection == "o_proj":
            O = p[self.name("o_proj")]  # (d, n_q·k): head h is columns h·k:(h+1)·k
            return O.view(O.shape[0], self.n_kv_heads, -1, self.k).transpose(0, 1).reshape(self.n_kv_heads, -1, self.k)
        return self.heads(p, projection).reshape(self.n_kv_heads, -1, self.k)


def rope_blocks(col: torch.Tensor) -> torch.Tensor:
    """Per-coordinate values (..., k) summed over transformers' RoPE blocks {j, j + k/2}: (..., k/2).

    Examples
    ========
    >>> rope_blocks(torch.tensor([1.0, 2.0, 10.0, 20.0])).tolist()
    [11.0, 22.0]
    """
    half = col.shape[-1] // 2
    return col[..., :half] + col[..., half:]


def _block_norms(spec: HFAttentionSpec, projection: str) -> UnitFn:
    """``‖A^(j)‖_F²`` per group (heads of the group summed) and RoPE block j: (n_kv, k/2)."""
    return lambda p: rope_blocks(spec.groups(p, projection).square().sum(-2))


def _gram(spec: HFAttentionSpec, projection: str) -> UnitFn:
    return lambda p: (lambda A: A.mT @ A)(spec.groups(p, projection))  # (n_kv, k, k)


def _gains(spec: HFAttentionSpec, norm: str) -> UnitFn:
    """``‖γ^(j)‖²`` per RoPE block of a shared gain: (1, k/2)."""
    return lambda p: rope_blocks(p[spec.name(norm)].square())[None]


def _minus(a: UnitFn, b: UnitFn) -> UnitFn:
    return lambda p: a(p) - b(p)


def _entries(spec: HFAttentionSpec) -> list[tuple[str, str, UnitFn, bool]]:
    """(unit, name, function stacked over the units, conserved?) for every quantity of the block."""
    q, k = _block_norms(spec, "q_proj"), _block_norms(spec, "k_proj")
    out = []
    if spec.qk_norm:
        gq = _gains(spec, "q_norm")
        out += [("shared", "‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²", _minus(gq, _gains(spec, "k_norm")), True)]
        out += [("shared", "‖γ_q⁽ʲ⁾‖²", gq, False)]
    out += [("group", "Σ‖Q⁽ʲ⁾‖²−‖K⁽ʲ⁾‖²", _minus(q, k), not spec.qk_norm), ("group", "Σ‖Q⁽ʲ⁾‖²", q, False)]
    if spec.qk_norm and spec.norm_eps == 0:
        out += [("head", "‖Q‖²", lambda p: spec.heads(p, "q_proj").square().sum((1, 2)), True)]
        out += [("group", "‖K‖²", lambda p: spec.heads(p, "k_proj").square().sum((1, 2)), True)]
    vo = _gram(spec, "v_proj")
    out += [("group", "VᵀV−ΣOᵀO", _minus(vo, _gram(spec, "o_proj")), True), ("group", "VᵀV", vo, False)]
    return out


def attention_laws(spec: HFAttentionSpec) -> tuple[dict[str, Law], dict[str, Law], tuple[Batch, ...]]:
    """The laws and controls of one attention, keyed ``"group{g}:..."`` (``"head{h}:‖Q‖²"``; the shared gains'
    without a prefix), and one batch per quantity that evaluates it for every group at once.

    Examples
    ========
    >>> laws, controls, _ = attention_laws(HFAttentionSpec(4, 2, 4, qk_norm=True))
    >>> sorted(laws)
    ['group0:VᵀV−ΣOᵀO', 'group1:VᵀV−ΣOᵀO', '‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²']
    >>> p = {"q_norm.weight": torch.tensor([1.0, 2.0, 3.0, 4.0]), "k_norm.weight": torch.ones(4)}
    >>> laws["‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²"](p).tolist()  # blocks {0, 2} and {1, 3}: 1 + 9 − 2, 4 + 16 − 2
    [8.0, 18.0]
    """
    return assemble(_entries(spec), spec.n_heads, spec.n_kv_heads)


def spec_of(module: nn.Module, prefix: str = "") -> HFAttentionSpec:
    """The spec of a transformers attention module (``Qwen3Attention``, ``LlamaAttention``, ``Qwen3MoeAttention``).

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> attn = nn.Module()  # laid out like transformers' LlamaAttention: d = 8, 4 query heads on 2, k = 2
    >>> attn.head_dim, attn.num_key_value_groups = 2, 2
    >>> attn.q_proj, attn.k_proj = nn.Linear(8, 8, bias=False), nn.Linear(8, 4, bias=False)
    >>> spec = spec_of(attn, "layers.0.self_attn.")
    >>> spec.n_heads, spec.n_kv_heads, spec.k, spec.bias, spec.qk_norm
    (4, 2, 2, False, False)
    """
    k = module.head_dim
    norm = getattr(module, "q_norm", None)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    return HFAttentionSpec(
        n_heads=module.q_proj.out_features // k,
        n_kv_heads=module.k_proj.out_features // k,
        k=k,
        prefix=prefix,
        bias=module.q_proj.bias is not None,
        qk_norm=norm is not None,
        norm_eps=1e-6 if norm is None else float(eps or 0.0),
    )


def kind_of(spec: HFAttentionSpec) -> str:
    """The block kind the monitor groups these laws under: ``gqa-rope`` or ``gqa-rope-qknorm-shared``.

    Examples
    ========
    >>> kind_of(HFAttentionSpec(4, 2, 4, qk_norm=True))
    'gqa-rope-qknorm-shared'
    """
    return "gqa-rope-qknorm-shared" if spec.qk_norm else "gqa-rope"


def formula(n_kv_heads: int, k: int, *, qk_norm: bool, norm_eps: float = 1e-6, n_heads: int = 0) -> tuple[int, str]:
    """The number of laws of a transformers attention with n_kv key/value heads of width k (d ≥ k), and how.

    ``n_kv·k/2 + n_kv·k(k+1)/2`` without QK-norm; ``k/2 + n_kv·k(k+1)/2`` with Qwen3's shared gains
    (``+ n_q + n_kv`` when ε = 0). Biases change the laws, not their number.

    Examples
    ========
    >>> formula(2, 4, qk_norm=True)
    (22, 'k/2 + n_kv·k(k+1)/2 = 4/2 + 2·4·5/2 = 22')
    >>> formula(2, 4, qk_norm=False)
    (24, 'n_kv·k/2 + n_kv·k(k+1)/2 = 2·4/2 + 2·4·5/2 = 24')
    """
    vo = n_kv_heads * k * (k + 1) // 2
    if not qk_norm:
        N = n_kv_heads * k // 2 + vo
        return N, f"n_kv·k/2 + n_kv·k(k+1)/2 = {n_kv_heads}·{k}/2 + {n_kv_heads}·{k}·{k + 1}/2 = {N}"
    scale, scale_text = (n_heads + n_kv_heads, " + n_q + n_kv") if norm_eps == 0 else (0, "")
    values = f" + {n_heads} + {n_kv_heads}" if norm_eps == 0 else ""
    N = k // 2 + scale + vo
    return N, f"k/2{scale_text} + n_kv·k(k+1)/2 = {k}/2{values} + {n_kv_heads}·{k}·{k + 1}/2 = {N}"
