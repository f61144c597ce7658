"""The rank of the Lie algebra ``Lie(W)(θ)`` at one θ: gradients, nested brackets, their spectrum.

See :mod:`conslaw_lite.counting` for the method: random elements of each depth's span, drawn in
chunks, orthonormalized in weighted coordinates; the gap between kept and dropped singular values
is the evidence of the rank.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import jvp, vjp, vmap

from conslaw_lite.counting.problem import WEIGHT_FLOOR, Field
from conslaw_lite.time_limit import check_time

Report = Callable[..., None]  # (bracket depth, rank so far) after each chunk; (1, 0, stage) before the first rank

GAP = 1e4  # smallest kept / largest dropped singular value needed for a count
# The least round-off assumed in a count: a model whose second derivatives vanish (linear in θ) shows none in them,
# yet its gradients carry float64 round-off, amplified by up to 10³ by the tensor weights (WEIGHT_FLOOR).
ROUNDOFF = 1e-13


CUT = 1e-8  # a residual below this (vectors have length ≤ 1) adds no direction


# The evidence is the spectrum of the stacked vectors up to this D. Above, it costs more than all the rest
# (O(D³) with a slow constant: 80–100 s a θ at D = 8192, 2 cores), and the residuals' singular values are used
# when they show a gap (module docstring).
SPECTRUM_MAX_D = 4096
STACK_MAX_D = 8192  # beyond, no copy of the vectors is kept for that fallback: its SVD would take hours


# One projection leaves a residual that kept a fraction ρ of its row's length off span(Q) by about ε/ρ:
# ≤ 10⁻¹⁴ at ρ = 0.1, far below CUT. Kahan's usual 1/√2 would project most chunks twice.
REORTHOGONALIZE = 0.1


MAX_DEPTH = 6


FIRST_CHUNK = 8


MAX_CHUNK = 256


# a bracket one deeper took 3 to 10 times as long a vector (MobileNetV3 at D = 1,169: 8 ms at depth 1, 70, 195, 929,
# 3,216, 9,295 ms at depth 6): the first chunk of a depth is expected to take this times the depth before's
DEEPER = 10.0
VMAP_BATCH = 128  # vectors a vmap computes at once: beyond, its batched kernels slow (MHA D = 8192: 1.5 ms → 1.1 ms)


def gradient_field(f: Field, a: torch.Tensor) -> Field:
    """``X_a(θ) = ∇_θ ⟨a, f(θ)⟩`` (a vector-Jacobian product)."""
    return lambda theta: vjp(f, theta)[1](a)[0]


def _nested_field(f: Field, cotangents: torch.Tensor) -> Field:
    """``[X_{a_1}, [X_{a_2}, [..., X_{a_k}]]]`` for cotangents of shape (k, S·out)."""
    inner = gradient_field(f, cotangents[-1])
    for a in reversed(cotangents[:-1]):
        inner = _bracket(gradient_field(f, a), inner)
    return inner


def _bracket(X: Field, Y: Field) -> Field:
    """``[X, Y](θ) = J_Y(θ) X(θ) − J_X(θ) Y(θ)``."""

    def field(theta: torch.Tensor) -> torch.Tensor:
        return _bracket_terms(X, Y, theta)[0]

    return field


def _bracket_terms(
    X: Field, Y: Field, theta: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``w ⊙ [X, Y](θ)`` and the size ``‖w ⊙ J_Y X‖ + ‖w ⊙ J_X Y‖`` of the two terms it is the difference of."""
    x = X(theta)
    y, jy_x = jvp(Y, (theta,), (x,))
    _, jx_y = jvp(X, (theta,), (y,))
    if weights is not None:
        jy_x, jx_y = jy_x * weights, jx_y * weights
    return jy_x - jx_y, jy_x.norm() + jx_y.norm()


def _scaled_bracket(f: Field, theta: torch.Tensor, cotangents: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One random element ``v`` of depth ``k = len(cotangents) ≥ 2``, as ``weights ⊙ v`` divided by its terms' size.

    The size is measured with the weights too, so the result has length ≤ 1.
    """
    x = gradient_field(f, cotangents[0])
    y = _nested_field(f, cotangents[1:])
    v, size = _bracket_terms(x, y, theta, weights)
    return v / size.clamp_min(torch.finfo(v.dtype).tiny)


def tensor_weights(f: Field, theta: torch.Tensor, n_out: int, gen: torch.Generator, sizes: list[int]) -> torch.Tensor:
    """``1 / max(c_t, 10⁻³ max_s c_s)`` on each parameter tensor t's coordinates (``WEIGHT_FLOOR`` = 10⁻³).

    ``c_t`` is the root mean square, over t's coordinates and ``FIRST_CHUNK`` random
    ``∇_θ⟨a, f⟩``, of those gradients. Scaling every vector by the same invertible
    diagonal leaves the rank unchanged; these weights give every tensor the same typical
    size at depth 1. Without them, a tensor the output is very sensitive to (timm's class
    token beside a LayerNorm: 1000 times the MLP's) dominates every vector and pushes the
    weak directions of the others toward round-off.
    """
    a = torch.randn(FIRST_CHUNK, n_out, generator=gen, dtype=torch.float64).to(theta.device)
    squares = vmap(lambda a: gradient_field(f, a)(theta))(a).pow(2).mean(0)
    c = torch.cat([part.mean().sqrt().expand(len(part)) for part in torch.split(squares, sizes)])
    return 1 / c.clamp_min(WEIGHT_FLOOR * c.max()).clamp_min(torch.finfo(c.dtype).tiny)


class Sampler:
    """Random Lie-algebra elements in weighted coordinates, of length ≤ 1, vectorized with ``vmap`` (a Python loop
    for modules vmap cannot batch). Gradients (depth 1) share one forward pass: ``X_a(θ)`` is the pullback of a."""

    def __init__(self, f: Field, theta: torch.Tensor, weights: torch.Tensor) -> None:
        self.f, self.theta, self.weights, self.use_vmap, self.pull = f, theta, weights, True, None

    def __call__(self, cotangents: torch.Tensor) -> torch.Tensor:  # (m, k, S·out) -> (m, D)
        if cotangents.shape[1] == 1:
            v = self._batched(lambda a: self._pullback(a[0])[0], cotangents) * self.weights
            return v / v.norm(dim=1, keepdim=True).clamp_min(torch.finfo(v.dtype).tiny)
        return self._batched(lambda c: _scaled_bracket(self.f, self.theta, c, self.weights), cotangents)

    def _pullback(self, a: torch.Tensor) -> tuple[torch.Tensor]:
        if self.pull is None:
            self.pull = vjp(self.f, self.theta)[1]
        return self.pull(a)

    def _batched(self, one: Callable[[torch.Tensor], torch.Tensor], cotangents: torch.Tensor) -> torch.Tensor:
        if self.use_vmap:
            try:
                parts = [vmap(one)(part) for part in cotangents.split(VMAP_BATCH)]
                return parts[0] if len(parts) == 1 else torch.cat(parts)
            except RuntimeError:  # data-dependent control flow (e.g. .item(), boolean masks): fall back
                self.use_vmap = False
        return torch.stack([one(c) for c in cotangents])


def _new_directions(Q: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Orthonormal rows (new, D) spanning the part of V's rows outside span(Q's rows), and that part's singular values.

    The part is the residual ``R = V − (V Qᵀ) Q``; its right singular vectors with singular
    value above CUT are the new directions. ``R = (q r)ᵀ`` first (QR of the tall ``Rᵀ``), so
    the SVD is of the small square ``rᵀ``.
    """
    for _ in range(2):  # twice is enough (Giraud et al.); once, if every row kept REORTHOGONALIZE of its length
        before = V.norm(dim=1)
        V = V - (V @ Q.T) @ Q
        if bool((V.norm(dim=1) >= REORTHOGONALIZE * before).all()):
            break
    q, r = torch.linalg.qr(V.T)
    _, s, Wh = torch.linalg.svd(r.T)
    return Wh[s > CUT] @ q.T, s


class _Basis:
    """Orthonormal rows found so far (D columns), in a buffer of D rows allocated once: appending with ``cat``
    would copy the whole basis at every chunk (9 s of 141 for MHA at D = 8192), and doubling a buffer copies it
    (twice the basis in memory at once). On a CPU the buffer's pages are resident only once written: the memory
    used grows with the rank found."""

    def __init__(self, D: int, device: torch.device) -> None:
        self.buffer, self.size = torch.empty(D, D, dtype=torch.float64, device=device), 0

    @property
    def rows(self) -> torch.Tensor:
        return self.buffer[: self.size]

    def extend(self, new: torch.Tensor) -> None:
        self.buffer[self.size : self.size + len(new)] = new
        self.size += len(new)


@dataclass(frozen=True)
class Rank:
    rank: int
    depth: int
    ranks_by_depth: tuple[int, ...]
    singular_values: np.ndarray
    sigma_kept: float
    sigma_dropped: float
    evidence: str  # LawCount.evidence
    saturated: bool  # a whole depth added nothing (or the rank reached D)
    noise: float = 0.0  # the derivatives' round-off at this θ (derivative_mismatch)


def lie_rank(
    f: Field,
    theta: torch.Tensor,
    n_out: int,
    gen: torch.Generator,
    sizes: list[int],
    keep_stack: bool = True,
    report: Report | None = None,
) -> Rank:
    """dim Lie(W)(θ) by random brackets of growing depth; ``sizes``: of the parameter tensors (module docstring).

    ``keep_stack=False`` keeps no copy of the vectors (``8 D²`` bytes less): the evidence is then the residuals'
    singular values, and where they show no gap the count is inconclusive. ``report(depth, rank)`` is called
    after each chunk (a progress bar). Random numbers are drawn on the CPU (the same on every device) and
    moved to θ's device.
    """
    D = theta.numel()
    sample = Sampler(f, theta, tensor_weights(f, theta, n_out, gen, sizes))
    basis = _Basis(D, theta.device)
    stacked, residuals, ranks, per_vector = [], [], [], {}  # per_vector: seconds a vector took at each depth
    for depth in range(1, MAX_DEPTH + 1):
        m = FIRST_CHUNK
        while True:
            m = min(m, D - basis.size + FIRST_CHUNK)
            check_time(m * _expected(per_vector, depth))
            started = time.monotonic()
            V = sample(torch.randn(m, depth, n_out, generator=gen, dtype=torch.float64).to(theta.device))  # (m, D)
            per_vector[depth] = (time.monotonic() - started) / m
            new, s = _new_directions(basis.rows, V)
            if keep_stack:
                stacked.append(V)
            residuals.append(s)
            basis.extend(new)
            if report is not None:
                report(depth, basis.size)
            if len(new) < m:  # fewer new directions than vectors: this depth is exhausted
                break
            m = min(2 * m, MAX_CHUNK)
        ranks.append(basis.size)
        if basis.size == D or (depth > 1 and ranks[-1] == ranks[-2]):
            break
    saturated = basis.size == D or (len(ranks) > 1 and ranks[-1] == ranks[-2])
    r, s = basis.size, torch.cat(residuals).sort(descending=True).values
    kept, dropped, evidence = float(s[r - 1]) if r else 0.0, float(s[r:].norm()), "residuals"
    del basis  # before the spectrum's workspace
    if keep_stack and (D <= SPECTRUM_MAX_D or not kept >= GAP * dropped):
        s = torch.linalg.svdvals(torch.cat(stacked))
        kept, dropped, evidence = float(s[r - 1]) if r else 0.0, float(s[r]) if r < len(s) else 0.0, "spectrum"
    return Rank(r, len(ranks), tuple(ranks), s.cpu().numpy(), kept, dropped, evidence, saturated)


def _expected(per_vector: dict[int, float], depth: int) -> float:
    """Seconds a vector of bracket depth ``depth`` is expected to take, from ``per_vector`` (each depth's last chunk):
    its own depth's, or the depth before's times the growth from the one before that (``DEEPER`` when unknown).

    Examples
    ========
    >>> _expected({1: 0.008, 2: 0.07}, 2), round(_expected({1: 0.008, 2: 0.07}, 3), 3), _expected({1: 0.008}, 2)
    (0.07, 0.613, 0.08)
    """
    if depth in per_vector:
        return per_vector[depth]
    before, earlier = per_vector.get(depth - 1, 0.0), per_vector.get(depth - 2)
    return before * (max(before / earlier, 1.0) if earlier else DEEPER)


def second_cut(values: np.ndarray, rank: int, floor: float) -> int | None:
    """A larger rank j where the spectrum ``values`` (descending) shows a second gap, or None.

    The values below ``rank`` are dropped as round-off. One above ``floor`` that stands ``GAP`` above the next is
    rather a tiny real direction (a norm's ε of 10⁻¹⁶ in a call, a unit nearly saturated) over round-off: cut
    there, the gap is as clear, and the count cannot tell the two apart.

    Examples
    ========
    >>> second_cut(np.array([1.0, 4e-10, 1e-15]), 1, floor=1e-11)  # 4·10⁻¹⁰: round-off, or a real direction?
    2
    >>> second_cut(np.array([1.0, 4e-11, 1e-11]), 1, floor=1e-11) is None  # nothing below: no sign of two kinds
    True
    """
    for j in range(rank + 1, len(values)):
        if values[j - 1] < floor:
            return None
        if values[j - 1] >= GAP * values[j]:
            return j
    return None


def two_gaps(ranks: list[Rank], D: int, floor: float) -> str:
    """Why no count (or ""), where a θ's spectrum has a second gap below a dropped value above ``floor``
    (:func:`second_cut`)."""
    for r in (r for r in ranks if r.evidence == "spectrum"):
        j = second_cut(r.singular_values, r.rank, floor)
        if j is not None:
            return (
                f"two gaps: N = {D - r.rank} if the singular values from {r.singular_values[r.rank]:.1e} down are "
                f"round-off, N = {D - j} if the {j - r.rank} value(s) above {floor:.0e}, over a "
                "gap to the rest, are a tiny real effect (a norm's ε near 0, a unit nearly saturated)"
            )
    return ""


def derivative_mismatch(
    f: Field, theta: torch.Tensor, directions: list[torch.Tensor], n_out: int, gen: torch.Generator
) -> float:
    """Relative disagreement of ``⟨a, D^k f(θ)[u, v, (w)]⟩``, k = 2, 3: forward-only vs forward over reverse.

    Both are the same number when torch's derivatives are right; the brackets use
    the second way, and through it the forward pass under two forward levels. The
    forward-only way also runs f under ``vjp``, so that θ requires grad as in the brackets
    (some modules, e.g. ``nn.MultiheadAttention``, take an inference kernel otherwise).
    """
    a = torch.randn(n_out, generator=gen, dtype=torch.float64).to(theta.device)
    u, v, w = directions
    try:
        tracked = lambda t: vjp(f, t)[0]  # noqa: E731  f, with θ tracked for reverse mode innermost
        Du = lambda t: jvp(tracked, (t,), (u,))[1]  # noqa: E731
        Duv = lambda t: jvp(Du, (t,), (v,))[1]  # noqa: E731
        Xa_v = lambda t: jvp(gradient_field(f, a), (t,), (v,))[1]  # noqa: E731  (Hessian of ⟨a, f⟩ times v)
        terms = [Duv(theta), jvp(Duv, (theta,), (w,))[1]]  # D²f[u, v], D³f[u, v, w]: (n_out,) each
        reverse = [u @ Xa_v(theta), u @ jvp(Xa_v, (theta,), (w,))[1]]
    except NotImplementedError as err:  # e.g. a kernel without a forward-mode derivative
        first_line = (str(err).splitlines() or [f"{type(err).__name__} with no message (a custom jvp?)"])[0]
        raise ValueError(f"torch cannot take the brackets' derivatives of this model: {first_line}") from err
    if not all(bool(torch.isfinite(t).all()) for t in terms + reverse):
        raise ValueError(
            "the model's second or third derivatives in θ are not finite at a random θ, which the brackets need: "
            "a function that is not analytic at a kink, such as relu(z) ** 1.5 (the counter continues each piece "
            "of a ReLU past 0, and z ** 1.5 of a z below 0 is NaN), a sqrt or log at 0, or a derivative formula "
            "of torch that overflows where a pre-activation is large (exp, logaddexp past |z| ≈ 10³): write that "
            "function in elementary ops that stay finite"
        )
    size = float(a.norm() * f(theta).norm())  # D^k f[u, v, ..] is about f's size: u, v, w are θ-sized
    # Relative to the size of the summed terms, not of their sum: on inputs over six decades the terms of
    # ⟨a, D^k f⟩ can be many times the sum (a saturated softmax), and round-off is relative to the terms.
    pairs = [(float((a @ t - q).abs()), float((a * t).abs().sum() + q.abs()) + 1e-9 * size) for t, q in
             zip(terms, reverse)]  # fmt: skip
    # both ways exactly 0 (at= a θ whose last layer is zero, weight and bias: f = 0 near it) agree
    return max(diff / scale if scale else 0.0 for diff, scale in pairs)
