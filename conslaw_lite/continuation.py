"""Activations continued to complex arguments: where they have poles and how fast they grow.

The completeness proofs of the FFN chapter extend the criterion ⟨∇h, ∇f(x)⟩ = 0 to complex
inputs and compare singularities. Two facts carry them, both computed here:

* SiLU, silu(z) = z σ(z) with σ(z) = 1/(1 + e^{−z}), has *simple* poles at z = iπ(2n+1);
  its derivative silu′(z) = σ(z) + z σ(z)(1 − σ(z)) has *double* poles there. The softmax of
  two logits (z, 0) is σ(z), with the same simple poles.
* GELU, gelu(z) = z Φ(z) with Φ(z) = (1 + erf(z/√2))/2, is entire, but along z = iy the term
  z² φ(z) of z gelu′(z) = z Φ(z) + z² φ(z) grows like e^{y²/2}, and the ratio
  z gelu′(z)/gelu(z) = 1 + z φ(z)/Φ(z) grows like |z|².

A combination α ρ(z) + β z ρ′(z) of the two terms of the gradient vanishes identically only
if ρ(z) = z ρ′(z) (ρ positively homogeneous, ReLU or the identity), or α = β = 0.
"""

from __future__ import annotations

import numpy as np
from scipy.special import erf


def sigmoid(z: np.ndarray | complex) -> np.ndarray | complex:
    """σ(z) = 1/(1 + e^{−z}), for complex z: simple poles at z = iπ(2n+1).

    >>> bool(abs(sigmoid(1j * np.pi + 1e-6)) > 1e5)   # next to the pole iπ
    True
    """
    return 1 / (1 + np.exp(-np.asarray(z, dtype=complex)))


def silu(z: np.ndarray | complex) -> np.ndarray | complex:
    """silu(z) = z σ(z).

    >>> round(float(silu(2.0).real), 6)
    1.761594
    """
    return z * sigmoid(z)


def silu_prime(z: np.ndarray | complex) -> np.ndarray | complex:
    """silu′(z) = σ(z) + z σ(z)(1 − σ(z)), with double poles where σ has simple ones.

    >>> bool(np.isclose(silu_prime(0.3), (silu(0.3 + 1e-6) - silu(0.3 - 1e-6)) / 2e-6))
    True
    """
    s = sigmoid(z)
    return s + z * s * (1 - s)


def gelu(z: np.ndarray | complex) -> np.ndarray | complex:
    """gelu(z) = z Φ(z), Φ(z) = (1 + erf(z/√2))/2: entire.

    >>> round(float(gelu(1.0).real), 6)
    0.841345
    """
    z = np.asarray(z, dtype=complex)
    return z * (1 + erf(z / np.sqrt(2))) / 2


def gelu_prime(z: np.ndarray | complex) -> np.ndarray | complex:
    """gelu′(z) = Φ(z) + z φ(z), φ(z) = e^{−z²/2}/√(2π): grows like e^{y²/2} along z = iy.

    >>> bool(np.isclose(gelu_prime(0.7), (gelu(0.7 + 1e-6) - gelu(0.7 - 1e-6)) / 2e-6))
    True
    """
    z = np.asarray(z, dtype=complex)
    return (1 + erf(z / np.sqrt(2))) / 2 + z * np.exp(-(z**2) / 2) / np.sqrt(2 * np.pi)


def silu_poles(n: int) -> np.ndarray:
    """The 2n poles iπ(2j+1), j = −n … n−1, of σ and silu nearest the real axis.

    >>> silu_poles(1) / np.pi
    array([-0.-1.j,  0.+1.j])
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return 1j * np.pi * (2 * np.arange(-n, n) + 1)
