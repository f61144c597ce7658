"""The group action behind the gate law, for :mod:`conslaw_lite.orbits`: the softmax gate's shift ``W_e → W_e + v``."""

from __future__ import annotations

from conslaw_lite.families.moe.block import MoE
from conslaw_lite.orbits import Piece, Shift, register_orbit


@register_orbit(MoE)
def _moe(module: MoE, prefix: str) -> tuple[Piece, ...]:
    if module.gating != "softmax" or module.top_k == 1:
        if module.top_k == 1:
            raise ValueError(
                f"MoE at {prefix.rstrip('.') or 'the root'}: under top-1 routing the gate W is frozen (its law is W "
                "itself), which no group orbit moves to a level; refusing"
            )
        return ()  # normalized sigmoid gating: the gate has no law, and no shift symmetry
    return (Shift(f"{prefix}gate.weight", module.n_experts, module.d, "the gate shift W_e → W_e + v"),)
