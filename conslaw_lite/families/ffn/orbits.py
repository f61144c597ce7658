"""The group action behind the FFN laws (for :mod:`conslaw_lite.orbits`): per-unit rescaling (ReLU, SwiGLU),
GL(r) (linear)."""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.families.ffn.block import FFN, SwiGLU
from conslaw_lite.orbits import GramPair, Params, Piece, Rescaling, Slot, register_orbit


def _bias(module: nn.Module, prefix: str, name: str) -> tuple[Slot, ...]:
    return (Slot(f"{prefix}{name}.bias"),) if getattr(module, name).bias is not None else ()


@register_orbit(FFN)
def _ffn(module: FFN, prefix: str) -> tuple[Piece, ...]:
    r = module.B.weight.shape[0]
    if module.activation == "relu":
        up, down = (Slot(f"{prefix}A.weight", axis=1),), (Slot(f"{prefix}B.weight"), *_bias(module, prefix, "B"))
        return (Rescaling(up, down, r, "per-unit rescaling of A's columns against B's rows"),)
    if module.activation == "linear":
        return (_linear_gram(prefix, module.B.bias is not None, r),)
    return ()  # GELU and SiLU: no law, no symmetry to move along


def _linear_gram(prefix: str, bias: bool, r: int) -> GramPair:
    A, B, b = f"{prefix}A.weight", f"{prefix}B.weight", f"{prefix}B.bias"

    def get(p: Params) -> tuple[torch.Tensor, torch.Tensor]:
        Bb = torch.cat([p[B], p[b][:, None]], dim=1) if bias else p[B]  # (r, d[+1])
        return p[A][None], Bb.T[None]  # P = A (m, r), R = [B, b]ᵀ (d[+1], r)

    def put(p: Params, P: torch.Tensor, R: torch.Tensor) -> dict[str, torch.Tensor]:
        Bb = R[0].T
        return {A: P[0], B: Bb[:, : p[B].shape[1]]} | ({b: Bb[:, -1]} if bias else {})

    return GramPair(get, put, 1, r, (A, B, b) if bias else (A, B), "GL(r): A → A Eᵀ, [B, b] → E^−ᵀ [B, b]")


@register_orbit(SwiGLU)
def _swiglu(module: SwiGLU, prefix: str) -> tuple[Piece, ...]:
    up, down = (Slot(f"{prefix}A.weight", axis=1),), (Slot(f"{prefix}C.weight"), *_bias(module, prefix, "C"))
    return (Rescaling(up, down, module.C.weight.shape[0], "per-unit rescaling of A's columns against C's rows"),)
