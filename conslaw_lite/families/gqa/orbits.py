"""The group action behind the grouped-query laws (for :mod:`conslaw_lite.orbits`): GL(k) per key/value group on
Q/K and on V/O, acting on every query head of the group at once; with RoPE, a scale per group and 2×2 block."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.orbits import GramPair, Piece, Rescaling, Slot, register_orbit


@dataclass(frozen=True)
class GroupBlockSlot(Slot):
    """The rows of a projection (n_kv·per·k, d) as units (group g, RoPE block j): the rows 2j, 2j+1 of each of
    the ``per`` heads of group g (``per`` = 1 for K)."""

    n_kv: int = 1
    per: int = 1

    def _view(self, p: torch.Tensor) -> torch.Tensor:
        return p.view(self.n_kv, self.per, -1, 2, p.shape[-1])  # (n_kv, per, k/2, 2, d)

    def units(self, p: torch.Tensor, n: int) -> torch.Tensor:
        """(n_kv·k/2 units, per·2·d entries of each)."""
        return self._view(p).transpose(1, 2).reshape(n, -1)

    def scale(self, p: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        """``p`` with unit (g, j) multiplied by ``factor[g·k/2 + j]``."""
        return (self._view(p) * factor.view(self.n_kv, 1, -1, 1, 1)).reshape(p.shape)


def _side(name: str, heads: int, n_kv: int, d: int, k: int, *, columns: bool) -> tuple:
    """Read a projection as each group's heads one under the other (n_kv, heads/n_kv·d, k), and write it back.

    Rows h·k:(h+1)·k transposed (Q, K, V: weight (heads·k, d)), or columns (O: weight (d, heads·k)).
    """
    if columns:
        return (lambda p: p[name].view(d, heads, k).transpose(0, 1).reshape(n_kv, -1, k),
                lambda H: H.reshape(heads, d, k).transpose(0, 1).reshape(d, heads * k))
    return (lambda p: p[name].view(heads, k, d).mT.reshape(n_kv, -1, k),
            lambda H: H.reshape(heads, d, k).mT.reshape(heads * k, d))


def _group_pair(m: GroupedQueryAttention, prefix: str, left: str, right: str, description: str) -> GramPair:
    """GL(k) per group between ``left`` and ``right`` (one of them the group's stacked query-side heads)."""
    n_kv, k = m.n_kv_heads, m.head_dim
    names = (f"{prefix}{left}.weight", f"{prefix}{right}.weight")
    (get_l, put_l), (get_r, put_r) = (
        _side(name, m.n_heads if x in "QO" else n_kv, n_kv, m.d, k, columns=x == "O")
        for name, x in zip(names, (left, right))
    )
    return GramPair(lambda p: (get_l(p), get_r(p)), lambda p, P, R: {names[0]: put_l(P), names[1]: put_r(R)},
                    n_kv, k, names, description)


@register_orbit(GroupedQueryAttention)
def _grouped(module: GroupedQueryAttention, prefix: str) -> tuple[Piece, ...]:
    if module.qk_norm:
        raise ValueError(
            f"grouped-query attention at {prefix.rstrip('.') or 'the root'}: the group action is written for heads "
            "without QK-norm only (their laws have other orbits); refusing rather than guessing one"
        )
    n_kv, per, k = module.n_kv_heads, module.n_heads // module.n_kv_heads, module.head_dim
    vo = _group_pair(module, prefix, "V", "O", "GL(k) per group: V_g → V_g Fᵀ, O_h → O_h F^−1 for h ∈ g")
    if module.pe == "rope":
        qk = Rescaling((GroupBlockSlot(f"{prefix}Q.weight", n_kv=n_kv, per=per),),
                       (GroupBlockSlot(f"{prefix}K.weight", n_kv=n_kv),), n_kv * k // 2,
                       "a scale per group and RoPE block: Q_h⁽ʲ⁾ → e^ξ Q_h⁽ʲ⁾ for h ∈ g, K_g⁽ʲ⁾ → e^−ξ K_g⁽ʲ⁾")
    else:
        qk = _group_pair(module, prefix, "Q", "K", "GL(k) per group: Q_h → Q_h Eᵀ for h ∈ g, K_g → K_g E^−1")
    return (qk, vo)
