"""Laws of multi-head attention: the book's block, ``nn.MultiheadAttention`` and timm's ``Attention``.

Per head i (chapters 04 and 05), with Q_i, K_i, V_i, O_i ∈ R^(d×k):

* no PE or sinusoidal PE: ``Q_iᵀQ_i − K_iᵀK_i`` and ``V_iᵀV_i − O_iᵀO_i`` (k×k each), from the
  symmetry ``Q → QG, K → KG^(−ᵀ)`` (and V, O likewise);
* RoPE: G must commute with every rotation, one scale per 2×2 block j is left:
  ``‖Q_i^(j)‖_F² − ‖K_i^(j)‖_F²`` (k/2 per head) and the V/O law;
* QK-norm (RMSNorm with gains γ_q, γ_k on each head's q and k): the Q/K laws become
  ``(γ_q)_j² − (γ_k)_j²`` per coordinate (per 2×2 block with RoPE, summed), per head or once
  for gains shared across heads; when ε = 0 the norm is scale invariant and
  ``‖Q_i‖_F²``, ``‖K_i‖_F²`` are laws too;
* biases: a bias row extends the matrix, ``Q̃_i = [Q_i; b_qᵀ]`` (likewise K̃, Ṽ); the output
  bias enters no law. Without RoPE and QK-norm a key bias only shifts each softmax row
  by a constant: it gets zero gradient and is itself conserved (k more laws per head).
  A learned key and value that join every sequence (``nn.MultiheadAttention(add_bias_kv=True)``'s
  ``bias_k``, ``bias_v``) are one more row of K̃ and Ṽ, and the key bias's law becomes ``b_k + bias_k``.

Controls (look-alikes that move): one half of each law in the law's own shape, ``Q_iᵀQ_i``
(``‖Q_i^(j)‖_F²`` per block with RoPE) and ``V_iᵀV_i``, and under QK-norm the law the block would
have without it. Not the traces ``‖Q_i‖_F²``: their first-order motion ``−2τ⟨Q_i, ∂L/∂Q_i⟩`` is
the scores times their gradient (a change of the head's temperature), which vanishes with the
scores at a small initialization, so the trace stays nearly still for a reason no symmetry gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.laws import Batch, BlockLaws, Law, Params, left_out, register_laws
from conslaw_lite.shared_squares import squared


def formula(
    n: int, k: int, *, pe: str = "none", bias: bool = False, qk_norm: bool | str = False, norm_eps: float = 0.0
) -> tuple[int, str]:
    """The number of laws of n attention heads of width k (d ≥ k), and how it is counted.

    ``n·k(k+1)`` without PE or with sinusoidal PE (``+ n·k`` with biases: the key bias is
    conserved); ``n·k/2 + n·k(k+1)/2`` with RoPE; with QK-norm the Q/K laws are those of the
    gains (``n·k/2`` with RoPE, ``n·k`` without; once, not per head, when shared), plus ``2n``
    when ε = 0. The one formula the named architectures, the derivation cases and the tests read.

    Examples
    ========
    >>> formula(2, 2)
    (12, 'n·k(k+1) = 2·2·3 = 12')
    >>> formula(2, 4, pe="rope")
    (24, 'n·k/2 + n·k(k+1)/2 = 2·4/2 + 2·4·5/2 = 24')
    """
    vo = n * k * (k + 1) // 2
    rope = pe == "rope"
    if qk_norm:
        blocks = k // 2 if rope else k
        gains, gains_text = (blocks, f"{blocks}") if qk_norm == "shared" else (n * blocks, f"{n}·{blocks}")
        scale, scale_text = (2 * n, f" + 2·{n}") if norm_eps == 0 else (0, "")
        N, text = gains + scale + vo, f"{gains_text}{scale_text} + {n}·{k}·{k + 1}/2"
    elif rope:
        N, text = n * k // 2 + vo, f"n·k/2 + n·k(k+1)/2 = {n}·{k}/2 + {n}·{k}·{k + 1}/2"
    else:
        extra, extra_text = (n * k, f" + {n}·{k}") if bias else (0, "")
        N, text = 2 * vo + extra, f"n·k(k+1){' + n·k' if bias else ''} = {n}·{k}·{k + 1}{extra_text}"
    return N, f"{text} = {N}"


@dataclass(frozen=True)
class Projection:
    """Rows ``offset : offset + n·k`` of the weight called ``weight`` (and of ``bias``, from ``bias_offset``); its
    columns where ``transposed``: a weight stored (d, out), as transformers' ``Conv1D`` (GPT-2) keeps it. ``extra``:
    a learned key or value (1, 1, n·k) that joins every sequence after the projection (``nn.MultiheadAttention``'s
    ``bias_k``, ``bias_v``): one more row of each head's matrix, which ``G`` moves as it moves the projected ones."""

    weight: str
    offset: int = 0
    bias: str | None = None
    bias_offset: int = 0
    transposed: bool = False
    extra: str | None = None

    def heads(self, p: Params, heads: slice, k: int) -> torch.Tensor:
        """Heads ``heads`` (a slice, step 1) in the paper's layout, bias as an extra row: (m, d, k) or (m, d+1, k).

        ``Q_i = W[offset + i·k : offset + (i+1)·k]ᵀ``: ``nn.Linear`` keeps heads as row blocks, the paper as columns
        (and ``Conv1D``, ``transposed``: ``Q_i = W[:, offset + i·k : offset + (i+1)·k]``).

        Examples
        ========
        >>> import torch
        >>> p = {"W": torch.arange(12.0).reshape(4, 3), "b": torch.tensor([10.0, 20.0, 30.0, 40.0])}
        >>> Projection("W").heads(p, slice(1, 2), k=2)  # rows 2, 3 of W, transposed: (m, d, k) = (1, 3, 2)
        tensor([[[ 6.,  9.],
                 [ 7., 10.],
                 [ 8., 11.]]])
        >>> Projection("W", bias="b").heads(p, slice(0, 2), k=2)[1]  # [Q_1; b_1]: (d+1, k)
        tensor([[ 6.,  9.],
                [ 7., 10.],
                [ 8., 11.],
                [30., 40.]])
        """
        rows = slice(self.offset + heads.start * k, self.offset + heads.stop * k)
        if self.transposed:
            M = p[self.weight][..., rows].unflatten(-1, (-1, k)).transpose(-3, -2)  # (d, m·k) -> (m, d, k)
        else:
            M = p[self.weight][..., rows, :].unflatten(-2, (-1, k)).mT  # (m·k, d) -> (m, d, k)
        rows = [self.bias_of(p, heads, k)] if self.bias is not None else []
        rows += [self.extra_of(p, heads, k)] if self.extra is not None else []
        return torch.cat([M, *(row.unsqueeze(-2) for row in rows)], dim=-2) if rows else M  # (m, d(+1)(+1), k)

    def head(self, p: Params, i: int, k: int) -> torch.Tensor:
        """Head i alone, ``heads(p, slice(i, i + 1), k)[0]``: (d, k), or (d+1, k) with a bias.

        Examples
        ========
        >>> import torch
        >>> Projection("W").head({"W": torch.arange(12.0).reshape(4, 3)}, 1, k=2).shape
        torch.Size([3, 2])
        """
        return self.heads(p, slice(i, i + 1), k)[0]

    def bias_of(self, p: Params, heads: slice, k: int) -> torch.Tensor:
        """Heads' biases ``b_i = bias[bias_offset + i·k : bias_offset + (i+1)·k]``, stacked: (m, k).

        Examples
        ========
        >>> import torch
        >>> p = {"b": torch.tensor([10.0, 20.0, 30.0, 40.0])}
        >>> Projection("W", bias="b").bias_of(p, slice(1, 2), k=2)
        tensor([[30., 40.]])
        """
        start = self.bias_offset + heads.start * k
        return p[self.bias][..., start : start + (heads.stop - heads.start) * k].unflatten(-1, (-1, k))

    def extra_of(self, p: Params, heads: slice, k: int) -> torch.Tensor:
        """Heads' parts of the learned row ``extra`` (1, 1, n·k), stacked: (m, k).

        Examples
        ========
        >>> import torch
        >>> Projection("W", extra="e").extra_of({"e": torch.arange(4.0).reshape(1, 1, 4)}, slice(1, 2), k=2)
        tensor([[2., 3.]])
        """
        return p[self.extra][..., 0, 0, heads.start * k : heads.stop * k].unflatten(-1, (-1, k))


@dataclass(frozen=True)
class AttentionSpec:
    """Where one attention block keeps its parameters, and what shapes its laws.

    ``O`` names the output weight (d, n·k), head i being its columns i·k:(i+1)·k; (n·k, d) with head i in its rows
    where ``O_transposed`` (transformers' ``Conv1D``).
    ``gamma_q``/``gamma_k`` name the QK-norm gains: shape (n, k), or (k,) when ``shared_gains``. ``zero_key``: a key
    of zeros joins every sequence (``add_zero_attn``), whose score the key bias does not shift: b_k is no law.
    """

    n: int
    k: int
    Q: Projection
    K: Projection
    V: Projection
    O: str
    pe: str = "none"
    gamma_q: str | None = None
    gamma_k: str | None = None
    shared_gains: bool = False
    norm_eps: float = 0.0
    O_transposed: bool = False
    zero_key: bool = False


# A head function maps (θ, heads) to the stacked values of those heads, (m, ...): a head's matrix (m, rows, k)
# or a law. One code path serves one head (a law function of the registry) and all n at once (the block's
# Batch, one batched matmul). Every axis is counted from the end, so that parameters stacked over layers
# (L, *shape) give every layer's values at once: the monitor evaluates repeated layers in one call.
HeadFn = Callable[[Params, slice], torch.Tensor]
# Quantities evaluated together because they share their costly part, one after the other along the heads'
# axis: a law and its half (one Gram matrix, or one set of block norms), or a single law.
HeadQuantities = Callable[[Params, slice], torch.Tensor]


def _gram_pair(A: HeadFn, B: HeadFn) -> HeadQuantities:
    """``[AᵀA − BᵀB; AᵀA]`` per head: (2m, k, k)."""

    def pair(p: Params, heads: slice) -> torch.Tensor:
        a, b = A(p, heads), B(p, heads)  # each getter slices (and may concatenate a bias row): once per evaluation
        gram_a = _gram(a)
        return torch.cat([gram_a - _gram(b), gram_a], dim=-3)

    return pair


def _gram(a: torch.Tensor) -> torch.Tensor:
    """``aᵀa`` per head, (m, d, k) -> (m, k, k); bmm where there is one batch axis (a third of the overhead of @).

    ``aᵀ`` is made contiguous first: an output projection's heads are column blocks, so ``aᵀ`` of several layers at
    once is a strided view, whose matmul took 1.4 times as long as a copy and a matmul (float64, d = 64, k = 16).
    """
    t = a.mT.contiguous()
    return torch.bmm(t, t.mT) if a.ndim == 3 else t @ t.mT


def _block_sums(col: torch.Tensor) -> torch.Tensor:
    """Sums over the 2×2 blocks j = coordinates (2j, 2j+1) of per-coordinate values (..., k) -> (..., k/2)."""
    return col.unflatten(-1, (-1, 2)).sum(-1)


def _block_sq(A: torch.Tensor) -> torch.Tensor:
    """``‖A^(j)‖_F²`` per head for the 2×2 blocks j = columns (2j, 2j+1) of A (m, rows, k): (m, k/2)."""
    return _block_sums(squared(A).sum(-2))


def _block_difference(A: HeadFn, B: HeadFn) -> HeadFn:
    """``(γ_A^(j))² − (γ_B^(j))²`` per head and 2×2 block j of gains (m, k): (m, k/2)."""
    return lambda p, heads: _block_sums(squared(A(p, heads))) - _block_sums(squared(B(p, heads)))


def _block_pair(A: HeadFn, B: HeadFn) -> HeadQuantities:
    """``[‖A^(j)‖_F² − ‖B^(j)‖_F²; ‖A^(j)‖_F²]`` per head and 2×2 block j: (2m, k/2)."""

    def pair(p: Params, heads: slice) -> torch.Tensor:
        a = _block_sq(A(p, heads))
        return torch.cat([a - _block_sq(B(p, heads)), a], dim=-2)

    return pair


def _square_difference(A: HeadFn, B: HeadFn) -> HeadFn:
    """``A ⊙ A − B ⊙ B`` entrywise."""
    return lambda p, heads: squared(A(p, heads)) - squared(B(p, heads))


def _square_norm(A: HeadFn) -> HeadFn:
    """``‖A‖_F²`` per head: (m,)."""
    return lambda p, heads: squared(A(p, heads)).sum((-2, -1))


def _gain_law(spec: AttentionSpec, shared: bool) -> tuple[str, HeadFn]:
    """Gains γ_q, γ_k per head (one row for all heads when shared): per 2×2 block with RoPE, per coordinate without."""

    def gain(name: str) -> HeadFn:
        return lambda p, heads: p[name].unsqueeze(-2) if shared else p[name][..., heads, :]  # (m, k)

    gq, gk = gain(spec.gamma_q), gain(spec.gamma_k)
    if spec.pe == "rope":  # a diagonal scale commutes with the rotations only if constant on each block
        return "‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²", _block_difference(gq, gk)
    return "γ_q²−γ_k²", _square_difference(gq, gk)


def _one_head(quantities: HeadQuantities, i: int, j: int) -> Law:
    """Quantity j of head i (or of the one row of shared gains): a law function of the registry."""
    return lambda p: quantities(p, slice(i, i + 1))[j]


def attention_laws(spec: AttentionSpec) -> tuple[dict[str, Law], dict[str, Law], tuple[Batch, ...]]:
    """The laws and the controls of one attention block, keyed ``"head{i}:..."`` (see the module docstring),
    and the batches that evaluate each per-head law, with its half, for all n heads in one call.

    Examples
    ========
    >>> mha = MultiHeadAttention(4, 2, 2).double()
    >>> laws, controls, batches = attention_laws(spec_of(mha))
    >>> sorted(laws)
    ['head0:QᵀQ−KᵀK', 'head0:VᵀV−OᵀO', 'head1:QᵀQ−KᵀK', 'head1:VᵀV−OᵀO']
    >>> p = dict(mha.named_parameters())
    >>> Q1, K1 = mha.head(1)["Q"], mha.head(1)["K"]
    >>> bool(torch.allclose(laws["head1:QᵀQ−KᵀK"](p), Q1.T @ Q1 - K1.T @ K1))
    True
    >>> sorted(controls)  # one half of each law, in the law's shape
    ['head0:QᵀQ', 'head0:VᵀV', 'head1:QᵀQ', 'head1:VᵀV']
    >>> batches[0].names  # each law with its half: one Gram matrix QᵀQ for both
    ('head0:QᵀQ−KᵀK', 'head1:QᵀQ−KᵀK', 'head0:QᵀQ', 'head1:QᵀQ')
    >>> bool(torch.equal(batches[0].fn(p)[1], laws["head1:QᵀQ−KᵀK"](p)))
    True
    """
    n, k = spec.n, spec.k
    if spec.pe == "rope" and k % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {k}")
    if (spec.gamma_q is None) != (spec.gamma_k is None):
        raise ValueError("QK-norm needs both gains gamma_q and gamma_k")
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}
    if spec.gamma_q is not None and spec.shared_gains:
        name, law = _gain_law(spec, shared=True)
        laws[name] = _one_head(law, 0, 0)
    Q = lambda p, heads: spec.Q.heads(p, heads, k)  # noqa: E731  (m, d(+1), k)
    K = lambda p, heads: spec.K.heads(p, heads, k)  # noqa: E731
    V = lambda p, heads: spec.V.heads(p, heads, k)  # noqa: E731
    output = Projection(spec.O, transposed=not spec.O_transposed)  # O_i = W_O[:, i·k:(i+1)·k]: Q_i's layout, transposed
    O = lambda p, heads: output.heads(p, heads, k)  # noqa: E731  (m, d, k)
    # What each head has, in the order each head lists it: (names, quantities, conserved? per name).
    per_head: list[tuple[tuple[str, ...], HeadQuantities, tuple[bool, ...]]] = []
    if spec.pe == "rope":
        qk_names, qk = ("‖Q⁽ʲ⁾‖²−‖K⁽ʲ⁾‖²", "‖Q⁽ʲ⁾‖²"), _block_pair(Q, K)
    else:
        qk_names, qk = ("QᵀQ−KᵀK", "QᵀQ"), _gram_pair(Q, K)
    if spec.gamma_q is None:
        per_head.append((qk_names, qk, (True, False)))
        if spec.K.bias is not None and spec.pe != "rope" and not spec.zero_key:  # RoPE turns b_k with p: no shift
            per_head.append(_key_shift(spec.K, k))
    else:
        if not spec.shared_gains:
            name, law = _gain_law(spec, shared=False)
            per_head.append(((name,), law, (True,)))
        per_head.append((qk_names, qk, (False, False)))  # the law QK-norm breaks, and its half
    if spec.gamma_q is not None and spec.norm_eps == 0:  # RMSNorm with ε = 0 ignores ‖Q_i‖, ‖K_i‖: two laws
        per_head += [(("‖Q‖²",), _square_norm(Q), (True,)), (("‖K‖²",), _square_norm(K), (True,))]
    per_head.append((("VᵀV−OᵀO", "VᵀV"), _gram_pair(V, O), (True, False)))
    for i in range(n):
        for names, quantities, conserved in per_head:
            for j, (name, kept) in enumerate(zip(names, conserved)):
                (laws if kept else controls)[f"head{i}:{name}"] = _one_head(quantities, i, j)
    batches = tuple(
        Batch(lambda p, q=quantities: q(p, slice(0, n)), tuple(f"head{i}:{name}" for name in names for i in range(n)))
        for names, quantities, _ in per_head
    )
    return laws, controls, batches


def _key_shift(K: Projection, k: int) -> tuple[tuple[str, ...], HeadFn, tuple[bool, ...]]:
    """A vector u added to every key shifts each softmax row by ``q·u``: the key bias, or with a learned key that joins
    every sequence, its sum with that key, is conserved (k laws per head)."""
    if K.extra is None:
        return ("b_k",), lambda p, heads: K.bias_of(p, heads, k), (True,)
    return ("b_k+bias_k",), lambda p, heads: K.bias_of(p, heads, k) + K.extra_of(p, heads, k), (True,)


def _kind(spec: AttentionSpec) -> str:
    pe = "" if spec.pe == "none" else f"-{spec.pe}"
    norm = "" if spec.gamma_q is None else ("-qknorm-shared" if spec.shared_gains else "-qknorm")
    return f"mha{pe}{norm}"


# ---------------------------------------------------------------- the three layouts


def spec_of(module: MultiHeadAttention, prefix: str = "") -> AttentionSpec:
    """The book's block: separate ``Q``, ``K``, ``V``, ``O`` linears, gains ``gamma_q``, ``gamma_k``.

    Examples
    ========
    >>> spec_of(MultiHeadAttention(4, 2, 2, bias=True)).Q
    Projection(weight='Q.weight', offset=0, bias='Q.bias', bias_offset=0, transposed=False, extra=None)
    """

    def proj(name: str) -> Projection:
        return Projection(f"{prefix}{name}.weight", 0, f"{prefix}{name}.bias" if module.bias else None)

    gains = module.qk_norm is not False
    return AttentionSpec(
        n=module.n_heads,
        k=module.head_dim,
        Q=proj("Q"),
        K=proj("K"),
        V=proj("V"),
        O=f"{prefix}O.weight",
        pe=module.pe,
        gamma_q=f"{prefix}gamma_q" if gains else None,
        gamma_k=f"{prefix}gamma_k" if gains else None,
        shared_gains=module.qk_norm == "shared",
        norm_eps=module.norm_eps,
    )


def torch_spec_of(module: nn.MultiheadAttention, prefix: str = "") -> AttentionSpec:
    """``nn.MultiheadAttention``: ``in_proj_weight`` (3E, E) packs W_q, W_k, W_v (rows 0, E, 2E), or
    ``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when kdim/vdim differ; output ``out_proj``.

    Examples
    ========
    >>> torch_spec_of(nn.MultiheadAttention(4, 2, add_bias_kv=True)).K
    Projection(weight='in_proj_weight', offset=4, bias='in_proj_bias', bias_offset=4, transposed=False, extra='bias_k')
    """
    E, n = module.embed_dim, module.num_heads
    bias = f"{prefix}in_proj_bias" if module.in_proj_bias is not None else None
    packed = module.in_proj_weight is not None  # W_q, W_k, W_v packed (kdim = vdim = E), or separate: the bias packed

    def projection(s: int, c: str) -> Projection:
        weight, offset = (f"{prefix}in_proj_weight", s * E) if packed else (f"{prefix}{c}_proj_weight", 0)
        extra = f"{prefix}bias_{c}" if module.bias_k is not None and c != "q" else None  # add_bias_kv
        return Projection(weight, offset, bias, s * E, extra=extra)

    Q, K, V = (projection(s, c) for s, c in enumerate("qkv"))
    return AttentionSpec(n=n, k=E // n, Q=Q, K=K, V=V, O=f"{prefix}out_proj.weight", zero_key=module.add_zero_attn)


def timm_spec_of(module: nn.Module, prefix: str = "") -> AttentionSpec:
    """timm's ``Attention``: fused ``qkv`` (3·n·k, d) with W_q, W_k, W_v at rows 0, n·k, 2·n·k; output ``proj``.

    timm's ``qk_norm`` (LayerNorm, which also subtracts the mean), ``scale_norm`` and ``gated``
    change the laws and are refused.

    Examples
    ========
    Only the layout matters, so a module laid out like timm's (d = 8, n = 2 heads of k = 4) shows it
    without importing timm:

    >>> class Attention(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.num_heads, self.head_dim = 2, 4
    ...         self.qkv, self.proj = nn.Linear(8, 3 * 8), nn.Linear(8, 8)
    >>> spec = timm_spec_of(Attention())
    >>> spec.n, spec.k, [P.offset for P in (spec.Q, spec.K, spec.V)], spec.O
    (2, 4, [0, 8, 16], 'proj.weight')
    """
    plain = all(isinstance(getattr(module, a, nn.Identity()), nn.Identity) for a in ("q_norm", "k_norm", "norm"))
    if not plain or getattr(module, "gate", None) is not None:
        raise ValueError(
            f"timm Attention at {prefix.rstrip('.') or 'the root'}: qk_norm, scale_norm and gated "
            "variants have other laws; only the plain layer is supported"
        )
    n, k = module.num_heads, module.head_dim
    bias = f"{prefix}qkv.bias" if module.qkv.bias is not None else None
    Q, K, V = (Projection(f"{prefix}qkv.weight", s * n * k, bias, s * n * k) for s in range(3))
    return AttentionSpec(n=n, k=k, Q=Q, K=K, V=V, O=f"{prefix}proj.weight")


def block_laws(spec: AttentionSpec) -> BlockLaws:
    """The laws, controls and batches of :func:`attention_laws`, under the block kind (``mha``, ``mha-rope``, ...).

    Examples
    ========
    >>> block_laws(spec_of(MultiHeadAttention(4, 2, 2))).kind
    'mha'
    """
    laws, controls, batches = attention_laws(spec)
    return BlockLaws(_kind(spec), laws, controls, batches)


@register_laws(MultiHeadAttention)
def _mha_block(module: MultiHeadAttention, prefix: str) -> BlockLaws:
    return block_laws(spec_of(module, prefix))


@register_laws(nn.MultiheadAttention)
def _torch_mha_block(module: nn.MultiheadAttention, prefix: str) -> BlockLaws | None:
    return block_laws(torch_spec_of(module, prefix))


@register_laws(  # by name: timm is optional and slow to import; older timm kept the class in vision_transformer
    "timm.layers.attention.Attention", "timm.models.vision_transformer.Attention"
)
def _timm_attention_block(module: nn.Module, prefix: str) -> BlockLaws | None:
    """A plain timm ``Attention``'s laws; a variant's are left out by name, so a model holding one still has its
    other blocks' laws (``laws_of`` and the monitor refused the whole model)."""
    norms = ("q_norm", "k_norm", "norm")
    variants = [a for a in norms if not isinstance(getattr(module, a, nn.Identity()), nn.Identity)]
    variants += ["gate"] if getattr(module, "gate", None) is not None else []
    if variants:
        return left_out(module, prefix, f"{' and '.join(variants)} (qk_norm, scale_norm or gated: other laws)")
    return block_laws(timm_spec_of(module, prefix))
