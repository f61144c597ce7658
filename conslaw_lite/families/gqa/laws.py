"""Laws of grouped-query attention: per key/value group, the laws of one head with its queries summed.

The key K_g is shared by the queries h ∈ g, so the symmetry ``K_g → K_g G^(−ᵀ)`` must move all of
them at once, ``Q_h → Q_h G``; likewise ``V_g → V_g H`` with ``O_h → O_h H^(−ᵀ)`` for h ∈ g. Per group g:

* no PE: ``Σ_{h∈g} Q_hᵀQ_h − K_gᵀK_g`` (k×k symmetric, k(k+1)/2 laws);
* RoPE: G must commute with the rotations, one scale per 2×2 block j is left:
  ``Σ_{h∈g} ‖Q_h^(j)‖_F² − ‖K_g^(j)‖_F²`` (k/2 laws);
* QK-norm (RMSNorm with gains on each head's q and k): the Q/K laws move to the gains,
  ``Σ_{h∈g} (γ_q,h)_c² − (γ_k,g)_c²`` per coordinate c (per 2×2 block with RoPE, summed), once for all
  groups when the gains are shared; with ε = 0 the norm ignores each head's scale, and ``‖Q_h‖_F²``
  (every query head) and ``‖K_g‖_F²`` (every key head) are laws too;
* always ``V_gᵀV_g − Σ_{h∈g} O_hᵀO_h`` (k(k+1)/2 laws).

With one query per group this is multi-head attention; with one group, multi-query attention.
Controls: one half of each law in its own shape, and under QK-norm the law the block would have without it.

:func:`grouped_laws` reads any module of this layout by parameter names (:class:`GroupedSpec`), and RoPE's
2×2 blocks may pair coordinates (2j, 2j+1) (``pairs="interleaved"``, this block) or (j, j + k/2)
(``pairs="half"``, Hugging Face's ``rotate_half``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.laws import Batch, BlockLaws, Law, Params, register_laws
from conslaw_lite.shared_squares import squared

PAIRS = ("interleaved", "half")


def formula(
    n_kv_heads: int,
    k: int,
    *,
    n_heads: int | None = None,
    pe: str = "none",
    qk_norm: bool | str = False,
    norm_eps: float = 0.0,
) -> tuple[int, str]:
    """The number of laws of grouped-query attention with n_kv key/value heads of width k (d ≥ k), and how.

    ``n_kv·k(k+1)`` without PE; ``n_kv·k/2 + n_kv·k(k+1)/2`` with RoPE; with QK-norm the Q/K part is the
    gains' (``n_kv·k/2`` with RoPE, ``n_kv·k`` without; ``k/2`` or ``k`` when shared), plus ``n_q + n_kv``
    when ε = 0 (which needs ``n_heads``). The number of query heads enters nowhere else.

    Examples
    ========
    >>> formula(2, 2)
    (12, 'n_kv·k(k+1) = 2·2·3 = 12')
    >>> formula(1, 4, pe="rope")
    (12, 'n_kv·k/2 + n_kv·k(k+1)/2 = 1·4/2 + 1·4·5/2 = 12')
    >>> formula(2, 4, n_heads=4, pe="rope", qk_norm="shared", norm_eps=1e-6)[1]
    '4/2 + 2·4·5/2 = 22'
    >>> formula(2, 4, n_heads=4, pe="rope", qk_norm="shared")[1]  # ε = 0: a scale law per query and key head
    '4/2 + 4 + 2 + 2·4·5/2 = 28'
    """
    vo = n_kv_heads * k * (k + 1) // 2
    rope = pe == "rope"
    if qk_norm:
        coords, coords_text = (k // 2, f"{k}/2") if rope else (k, f"{k}")
        shared = qk_norm == "shared"
        gains, gains_text = (coords, coords_text) if shared else (n_kv_heads * coords, f"{n_kv_heads}·{coords_text}")
        if norm_eps == 0:
            if n_heads is None:
                raise ValueError("with QK-norm and ε = 0 the count needs n_heads (a scale law per query head)")
            scale, scale_text = n_heads + n_kv_heads, f" + {n_heads} + {n_kv_heads}"
        else:
            scale, scale_text = 0, ""
        N, text = gains + scale + vo, f"{gains_text}{scale_text} + {n_kv_heads}·{k}·{k + 1}/2"
    elif rope:
        N = n_kv_heads * k // 2 + vo
        text = f"n_kv·k/2 + n_kv·k(k+1)/2 = {n_kv_heads}·{k}/2 + {n_kv_heads}·{k}·{k + 1}/2"
    else:
        N, text = 2 * vo, f"n_kv·k(k+1) = {n_kv_heads}·{k}·{k + 1}"
    return N, f"{text} = {N}"


@dataclass(frozen=True)
class GroupedSpec:
    """Where a grouped-query attention block keeps its parameters, by name, and what shapes its laws.

    ``Q``, ``K``, ``V``: weights (n·k, d) whose rows h·k:(h+1)·k are head h (``nn.Linear``'s layout, as
    Hugging Face's ``q_proj``/``k_proj``/``v_proj``); ``O``: the output weight (d, n_q·k), head h its
    columns h·k:(h+1)·k (``o_proj``). ``gamma_q``/``gamma_k``: QK-norm gains, (n_q, k) and (n_kv, k), or
    (k,) each when ``shared_gains``. ``pairs``: RoPE's 2×2 blocks, (2j, 2j+1) or (j, j + k/2).
``Q_bias``, ``K_bias``, ``V_bias``: biases (n·k,), appended to each head as a row, ``[Q_h; b_hᵀ]``.
``gain_control``: also watch ``‖γ_q‖²`` alone, a control of the gain laws.

    Examples
    ========
    >>> GroupedSpec(4, 3, 2)
    Traceback (most recent call last):
    ...
    ValueError: n_heads (4) must be a multiple of n_kv_heads (3): equal groups
    """

    n_heads: int
    n_kv_heads: int
    k: int
    Q: str = "Q.weight"
    K: str = "K.weight"
    V: str = "V.weight"
    O: str = "O.weight"
    pe: str = "none"
    pairs: str = "interleaved"
    gamma_q: str | None = None
    gamma_k: str | None = None
    shared_gains: bool = False
    norm_eps: float = 0.0
    Q_bias: str | None = None
    K_bias: str | None = None
    V_bias: str | None = None
    gain_control: bool = False

    def __post_init__(self) -> None:
        if min(self.n_heads, self.n_kv_heads, self.k) < 1:
            raise ValueError(f"sizes must be positive: n_heads={self.n_heads}, n_kv={self.n_kv_heads}, k={self.k}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads}): equal groups"
            )
        if self.pe not in ("none", "rope"):
            raise ValueError(f"pe must be 'none' or 'rope', got {self.pe!r}")
        if self.pairs not in PAIRS:
            raise ValueError(f"pairs must be one of {PAIRS}, got {self.pairs!r}")
        if self.pe == "rope" and self.k % 2:
            raise ValueError(f"RoPE needs an even head width, got k = {self.k}")
        if (self.gamma_q is None) != (self.gamma_k is None):
            raise ValueError("QK-norm needs both gains gamma_q and gamma_k")
        if self.norm_eps < 0:
            raise ValueError(f"norm_eps must be ≥ 0, got {self.norm_eps}")

    @property
    def per_group(self) -> int:
        return self.n_heads // self.n_kv_heads


GroupFn = Callable[[Params], torch.Tensor]  # θ -> one value per group (or per head), stacked on axis 0
# Each function below uses negative axes only, so that parameters stacked over layers (L, *shape) give every
# layer's values at once, (L, units, ...): the monitor evaluates a deep model's repeated layers in one call.


def _rows(p: Params, weight: str, bias: str | None, k: int) -> torch.Tensor:
    """Heads of a projection (m·k, d) in the paper's layout, Q_h = rows h·k:(h+1)·k transposed, with the bias
    appended as a last row when there is one: (m, d(+1), k)."""
    M = p[weight].unflatten(-2, (-1, k)).mT  # (m, d, k)
    return M if bias is None else torch.cat([M, p[bias].unflatten(-1, (-1, 1, k))], dim=-2)  # (m, d+1, k)


def _columns(W: torch.Tensor, k: int) -> torch.Tensor:
    """Heads of the output weight (d, m·k), O_h = columns h·k:(h+1)·k: (m, d, k)."""
    return W.unflatten(-1, (-1, k)).transpose(-3, -2)


def _per_group(x: torch.Tensor, n_kv: int, unit_axes: int) -> torch.Tensor:
    """A value per query head (n_q, *unit) summed over each group's heads: (n_kv, *unit); K and V's as they are."""
    axis = -1 - unit_axes
    return x if x.shape[axis] == n_kv else x.unflatten(axis, (n_kv, -1)).sum(axis)


def _block_sums(col: torch.Tensor, pairs: str) -> torch.Tensor:
    """Sums over RoPE's 2×2 blocks of per-coordinate values (..., k) -> (..., k/2)."""
    k = col.shape[-1]
    if pairs == "half":  # coordinate j pairs with j + k/2: the two halves, one under the other
        return col.unflatten(-1, (2, k // 2)).sum(-2)
    return col.unflatten(-1, (k // 2, 2)).sum(-1)


def _heads(spec: GroupedSpec) -> dict[str, GroupFn]:
    """Each projection's heads in the paper's layout: Q and O (n_q, rows, k), K and V (n_kv, rows, k).

    A group's sums are taken after each head's product (``Σ_{h∈g} Q_hᵀQ_h``), which reads the weights in place
    instead of copying a group's heads one under the other."""
    k = spec.k
    return {
        "Q": lambda p: _rows(p, spec.Q, spec.Q_bias, k),  # (n_q, d(+1), k)
        "K": lambda p: _rows(p, spec.K, spec.K_bias, k),  # (n_kv, d(+1), k)
        "V": lambda p: _rows(p, spec.V, spec.V_bias, k),  # (n_kv, d(+1), k)
        "O": lambda p: _columns(p[spec.O], k),  # (n_q, d, k)
    }


def _gram(A: GroupFn, n_kv: int) -> GroupFn:
    """``Σ_{h∈g} A_hᵀA_h`` per group: (n_kv, k, k)."""

    def gram(p: Params) -> torch.Tensor:
        a = A(p)
        return _per_group(a.mT @ a, n_kv, 2)

    return gram


def _coordinate_squares(p: Params, weight: str, bias: str | None, k: int) -> torch.Tensor:
    """``‖Q̃_h[:, c]‖²`` per head h and coordinate c, the sums of W's squared rows (bias included): (m, k)."""
    rows = squared(p[weight]).sum(-1)  # (m·k,): row h·k + c of W is column c of head h
    return (rows if bias is None else rows + squared(p[bias])).unflatten(-1, (-1, k))


def _blocks(spec: GroupedSpec, weight: str, bias: str | None) -> GroupFn:
    """``Σ_{h∈g} ‖Q̃_h^(j)‖_F²`` per group and RoPE block j: (n_kv, k/2)."""

    def blocks(p: Params) -> torch.Tensor:
        per_head = _coordinate_squares(p, weight, bias, spec.k)
        return _block_sums(_per_group(per_head, spec.n_kv_heads, 1), spec.pairs)

    return blocks


def _difference(a: GroupFn, b: GroupFn) -> GroupFn:
    return lambda p: a(p) - b(p)


def _law_and_half(a: GroupFn, b: GroupFn, unit_axes: int) -> GroupFn:
    """``[a − b; a]`` along the units' axis (before each unit's ``unit_axes`` axes): a law and its control, the
    half ``a`` computed once."""

    def both(p: Params) -> torch.Tensor:
        half = a(p)
        return torch.cat([half - b(p), half], dim=-1 - unit_axes)

    return both


def _gain_squares(spec: GroupedSpec, name: str) -> GroupFn:
    """Squared gains summed over each group's heads, per coordinate (RoPE: per block): (n_kv, ·), or (1, ·) shared."""

    def squares(p: Params) -> torch.Tensor:
        g = squared(p[name])
        g = g.unsqueeze(-2) if spec.shared_gains else _per_group(g, spec.n_kv_heads, 1)
        return _block_sums(g, spec.pairs) if spec.pe == "rope" else g

    return squares


# (unit, ((name, conserved?), ...), fn): fn stacks each quantity's values over the units, the quantities one
# after the other along the units' axis (a law and its control from one evaluation).
Entry = tuple[str, tuple[tuple[str, bool], ...], GroupFn]


def _entries(spec: GroupedSpec) -> list[Entry]:
    """Every quantity of the block, in order, its law evaluated with its control where it has one."""
    heads, n_kv = _heads(spec), spec.n_kv_heads
    rope = spec.pe == "rope"
    if rope:
        name, half, unit_axes = "Σ‖Q⁽ʲ⁾‖²−‖K⁽ʲ⁾‖²", "Σ‖Q⁽ʲ⁾‖²", 1
        q, kk = _blocks(spec, spec.Q, spec.Q_bias), _blocks(spec, spec.K, spec.K_bias)
    else:
        name, half, unit_axes = "ΣQᵀQ−KᵀK", "ΣQᵀQ", 2
        q, kk = _gram(heads["Q"], n_kv), _gram(heads["K"], n_kv)
    normed = spec.gamma_q is not None
    out: list[Entry] = []
    if normed:
        gq, gk = _gain_squares(spec, spec.gamma_q), _gain_squares(spec, spec.gamma_k)
        gain_name = "‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²" if rope else "γ_q²−γ_k²"
        gain_name = gain_name if spec.shared_gains else "Σ" + gain_name  # per group: summed over its queries
        unit = "shared" if spec.shared_gains else "group"
        if spec.gain_control:
            out.append((unit, ((gain_name, True), (gain_name.split("−")[0], False)), _law_and_half(gq, gk, 1)))
        else:
            out.append((unit, ((gain_name, True),), _difference(gq, gk)))
    out.append(("group", ((name, not normed), (half, False)), _law_and_half(q, kk, unit_axes)))
    if normed and spec.norm_eps == 0:
        out += [
            ("head", (("‖Q‖²", True),), lambda p: _coordinate_squares(p, spec.Q, spec.Q_bias, spec.k).sum(-1)),
            ("group", (("‖K‖²", True),), lambda p: _coordinate_squares(p, spec.K, spec.K_bias, spec.k).sum(-1)),
        ]
    vo = _law_and_half(_gram(heads["V"], n_kv), _gram(heads["O"], n_kv), 2)
    out.append(("group", (("VᵀV−ΣOᵀO", True), ("VᵀV", False)), vo))
    return out


def grouped_laws(spec: GroupedSpec) -> tuple[dict[str, Law], dict[str, Law], tuple[Batch, ...]]:
    """The laws and controls of one grouped-query attention block, keyed ``"group{g}:..."`` (``"head{h}:‖Q‖²"``
    for the scale laws of query heads, no prefix for the gains shared by all groups), and one batch per
    quantity (with its control) that evaluates it for every group at once.

    Examples
    ========
    >>> gqa = GroupedQueryAttention(4, n_heads=4, n_kv_heads=2, head_dim=2).double()
    >>> laws, controls, _ = grouped_laws(spec_of(gqa))
    >>> sorted(laws)
    ['group0:VᵀV−ΣOᵀO', 'group0:ΣQᵀQ−KᵀK', 'group1:VᵀV−ΣOᵀO', 'group1:ΣQᵀQ−KᵀK']
    >>> p = dict(gqa.named_parameters())
    >>> Q2, Q3, K1 = gqa.Q.weight[4:6].T, gqa.Q.weight[6:8].T, gqa.K.weight[2:4].T  # group 1: queries 2, 3
    >>> bool(torch.allclose(laws["group1:ΣQᵀQ−KᵀK"](p), Q2.T @ Q2 + Q3.T @ Q3 - K1.T @ K1))
    True
    >>> rope = grouped_laws(GroupedSpec(4, 1, 4, pe="rope", pairs="half"))[0]  # multi-query, Hugging Face's pairs
    >>> sorted(rope)
    ['group0:VᵀV−ΣOᵀO', 'group0:Σ‖Q⁽ʲ⁾‖²−‖K⁽ʲ⁾‖²']
    """
    return assemble(_entries(spec), spec.n_heads, spec.n_kv_heads)


def assemble(
    entries: list[Entry], n_heads: int, n_kv_heads: int
) -> tuple[dict[str, Law], dict[str, Law], tuple[Batch, ...]]:
    """One law (or control) per unit of each quantity of each entry ``(unit, ((name, conserved), ...), fn)``,
    keyed ``"{unit}{u}:{name}"``.

    ``fn(p)`` stacks each quantity over the units (a ``"group"``: one per key/value head, a ``"head"``: one per
    query head, ``"shared"``: one), the quantities one after the other; the entry's
    :class:`~conslaw_lite.laws.Batch` evaluates them at once.

    Examples
    ========
    >>> both = lambda p: torch.cat([p["K"] - 1, p["K"]])
    >>> laws, controls, batches = assemble([("group", (("K−1", True), ("K", False)), both)], n_heads=4, n_kv_heads=2)
    >>> sorted(laws), controls["group1:K"]({"K": torch.tensor([3.0, 5.0])}).item(), batches[0].names
    (['group0:K−1', 'group1:K−1'], 5.0, ('group0:K−1', 'group1:K−1', 'group0:K', 'group1:K'))
    """
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}
    batches = []
    for unit, quantities, fn in entries:
        count = {"group": n_kv_heads, "head": n_heads, "shared": 1}[unit]
        names: list[str] = []
        for name, conserved in quantities:
            for u in range(count):
                key = name if unit == "shared" else f"{unit}{u}:{name}"
                row = len(names)
                (laws if conserved else controls)[key] = lambda p, fn=fn, row=row: fn(p)[row]
                names.append(key)
        batches.append(Batch(fn, tuple(names)))
    return laws, controls, tuple(batches)


def spec_of(module: GroupedQueryAttention, prefix: str = "") -> GroupedSpec:
    """The book's block: linears ``Q``, ``K``, ``V``, ``O`` and gains ``gamma_q``, ``gamma_k``, under ``prefix``.

    Examples
    ========
    >>> spec_of(GroupedQueryAttention(4, 2, 1, 2), "attn.").K
    'attn.K.weight'
    """
    normed = module.qk_norm is not False
    return GroupedSpec(
        module.n_heads,
        module.n_kv_heads,
        module.head_dim,
        *(f"{prefix}{m}.weight" for m in "QKVO"),
        pe=module.pe,
        gamma_q=f"{prefix}gamma_q" if normed else None,
        gamma_k=f"{prefix}gamma_k" if normed else None,
        shared_gains=module.qk_norm == "shared",
        norm_eps=module.norm_eps,
    )


def kind_of(spec: GroupedSpec) -> str:
    """The block kind the monitor groups these laws under: ``gqa``, ``gqa-rope``, ``gqa-rope-qknorm-shared``, ...

    Examples
    ========
    >>> kind_of(GroupedSpec(4, 2, 4, pe="rope", gamma_q="gq", gamma_k="gk", shared_gains=True))
    'gqa-rope-qknorm-shared'
    """
    pe = "-rope" if spec.pe == "rope" else ""
    norm = "" if spec.gamma_q is None else ("-qknorm-shared" if spec.shared_gains else "-qknorm")
    return f"gqa{pe}{norm}"


@register_laws(GroupedQueryAttention)
def _gqa_block(module: GroupedQueryAttention, prefix: str) -> BlockLaws:
    spec = spec_of(module, prefix)
    return BlockLaws(kind_of(spec), *grouped_laws(spec))
