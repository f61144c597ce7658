"""What a whole network declares about its normalization layers: which linear layers read each norm,
which weights scale or shift together. The laws these give are built by :mod:`conslaw_lite.families.network.laws`.

A module declares its couplings by inheriting :class:`NetworkLaws` and implementing
:meth:`NetworkLaws.norm_couplings` (and, if it has any, :meth:`NetworkLaws.scale_invariant_weights`,
:meth:`NetworkLaws.shift_invariant_weights`). The declarations sit here, beside the blocks, so that a
model (:mod:`conslaw_lite.models.tiny`) declares them without importing the laws.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class NormCoupling:
    """A norm (module name) and the ``nn.Linear`` layers (module names) that read its output."""

    norm: str
    consumers: tuple[str, ...]


class NetworkLaws(nn.Module):
    """Mix-in for a parent module whose norms couple its sub-blocks (see the module docstring)."""

    DECLARES_LAWS = True  # a subclass's methods declare its couplings: its laws (conslaw_lite.block_changes.altered)

    def norm_couplings(self) -> list[NormCoupling]:
        """Each norm with the linear layers reading it, names relative to this module.

        Each coupling gives the laws ``γ_j² − Σ_i ‖W_i[:, j]‖²``; the base class declares none.

        Examples
        ========
        >>> NetworkLaws().norm_couplings()
        []
        """
        return []

    def scale_invariant_weights(self) -> list[str]:
        """Parameter names (relative) whose joint scaling leaves the output unchanged; ``[]`` if none.

        Their law is ``Σ ‖W‖_F²`` over the group.

        Examples
        ========
        >>> NetworkLaws().scale_invariant_weights()
        []
        """
        return []

    def shift_invariant_weights(self) -> list[str]:
        """Parameter names (relative, ``nn.Linear`` layout) each unchanged in output by ``W → W + 1aᵀ``.

        Their laws are the column sums ``1ᵀW``.

        Examples
        ========
        >>> NetworkLaws().shift_invariant_weights()
        []
        """
        return []
