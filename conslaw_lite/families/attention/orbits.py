"""The group action behind the attention laws (for :mod:`conslaw_lite.orbits`): GL(k) per head on Q/K and V/O,
a scale per RoPE block."""

from __future__ import annotations

from collections.abc import Callable

from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.orbits import GramPair, Piece, Rescaling, Slot, register_orbit


def _heads_of(name: str, n: int, k: int, *, columns: bool) -> tuple[Callable, Callable]:
    """Read/write head matrices (n, d, k): rows i·k:(i+1)·k transposed (Q, K, V) or columns (O)."""
    if columns:  # O.weight (d, n·k) -> (n, d, k)
        return (lambda p: p[name].view(-1, n, k).permute(1, 0, 2),
                lambda H: H.permute(1, 0, 2).reshape(H.shape[1], n * k))
    return (lambda p: p[name].view(n, k, -1).transpose(1, 2),  # Q.weight (n·k, d) -> (n, d, k)
            lambda H: H.transpose(1, 2).reshape(n * k, H.shape[1]))


def _head_pair(prefix: str, left: str, right: str, n: int, k: int, description: str) -> GramPair:
    (get_l, put_l), (get_r, put_r) = (_heads_of(f"{prefix}{x}.weight", n, k, columns=x == "O") for x in (left, right))
    names = (f"{prefix}{left}.weight", f"{prefix}{right}.weight")
    return GramPair(lambda p: (get_l(p), get_r(p)), lambda p, P, R: {names[0]: put_l(P), names[1]: put_r(R)},
                    n, k, names, description)


@register_orbit(MultiHeadAttention)
def _attention(module: MultiHeadAttention, prefix: str) -> tuple[Piece, ...]:
    if module.bias or module.qk_norm:
        raise ValueError(
            f"attention at {prefix.rstrip('.') or 'the root'}: the group action is written for heads without biases "
            "and without QK-norm only (their laws have other orbits); refusing rather than guessing one"
        )
    n, k = module.n_heads, module.head_dim
    vo = _head_pair(prefix, "V", "O", n, k, "GL(k) per head: V → V Fᵀ, O → O F^−1")
    if module.pe == "rope":  # a scale per 2×2 block: what commutes with every rotation and changes the law
        qk = Rescaling((Slot(f"{prefix}Q.weight", width=2),), (Slot(f"{prefix}K.weight", width=2),), n * k // 2,
                       "a scale per RoPE block: Q⁽ʲ⁾ → e^ξ Q⁽ʲ⁾, K⁽ʲ⁾ → e^−ξ K⁽ʲ⁾")
    else:
        qk = _head_pair(prefix, "Q", "K", n, k, "GL(k) per head: Q → Q Eᵀ, K → K E^−1")
    return (qk, vo)
