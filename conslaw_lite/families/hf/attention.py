"""Laws of transformers' attention (Qwen3, Llama, Qwen3-MoE, Mistral, Qwen2): grouped K/V heads, RoPE on half-split
pairs, Qwen3's QK-norm with gains shared by every head, and the projections' biases.

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

from dataclasses import dataclass

from torch import nn

from conslaw_lite.families.gqa.laws import GroupedSpec, grouped_laws
from conslaw_lite.laws import Batch, Law


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


def grouped_spec(spec: HFAttentionSpec) -> GroupedSpec:
    """The grouped-query attention laws' description of a transformers attention: RoPE on half-split pairs, the
    shared QK-norm gains (with their control), the biases appended to the heads.

    Examples
    ========
    >>> g = grouped_spec(HFAttentionSpec(4, 2, 4, prefix="attn.", bias=True))
    >>> g.Q, g.Q_bias, g.pairs, g.gamma_q
    ('attn.q_proj.weight', 'attn.q_proj.bias', 'half', None)
    """
    bias = (lambda projection: spec.name(projection, "bias")) if spec.bias else (lambda projection: None)
    return GroupedSpec(
        spec.n_heads, spec.n_kv_heads, spec.k,
        Q=spec.name("q_proj"), K=spec.name("k_proj"), V=spec.name("v_proj"), O=spec.name("o_proj"),
        Q_bias=bias("q_proj"), K_bias=bias("k_proj"), V_bias=bias("v_proj"),
        pe="rope", pairs="half",
        gamma_q=spec.name("q_norm") if spec.qk_norm else None, gamma_k=spec.name("k_norm") if spec.qk_norm else None,
        shared_gains=True, norm_eps=spec.norm_eps, gain_control=True,
    )  # fmt: skip


def attention_laws(spec: HFAttentionSpec) -> tuple[dict[str, Law], dict[str, Law], tuple[Batch, ...]]:
    """The laws and controls of one attention, keyed ``"group{g}:..."`` (``"head{h}:‖Q‖²"``; the shared gains'
    without a prefix), and one batch per quantity that evaluates it for every group at once.

    Examples
    ========
    >>> laws, controls, _ = attention_laws(HFAttentionSpec(4, 2, 4, qk_norm=True))
    >>> sorted(laws)
    ['group0:VᵀV−ΣOᵀO', 'group1:VᵀV−ΣOᵀO', '‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²']
    >>> import torch
    >>> p = {"q_norm.weight": torch.tensor([1.0, 2.0, 3.0, 4.0]), "k_norm.weight": torch.ones(4)}
    >>> laws["‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²"](p).tolist()  # blocks {0, 2} and {1, 3}: 1 + 9 − 2, 4 + 16 − 2
    [8.0, 18.0]
    """
    return grouped_laws(grouped_spec(spec))


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
