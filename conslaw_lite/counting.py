"""Count conservation laws numerically: ``N = D − dim Lie(W)(θ)`` (chapter 02 of the book).

Near a generic θ, the number of independent conservation laws of a model
``f(x; θ)``, θ ∈ R^D, is ``N = D − dim Lie(W)(θ)`` (Marcotte et al. 2023), where
``W = span{∇_θ f_i(x; θ)}`` over inputs x and outputs i, and Lie(W) is what
these vector fields generate under the bracket ``[X, Y] = J_Y X − J_X Y``.

How the rank is computed, in float64 with ``torch.func``:

* A random element of W is the gradient of a random linear loss,
  ``X_a(θ) = ∇_θ ⟨a, f(x_1..x_S; θ)⟩`` (one vector-Jacobian product).
* For two such fields ``J_{X_a} = ∇²⟨a, f⟩`` is a Hessian, so
  ``[X_a, X_b] = H_b X_a − H_a X_b``: two Hessian-vector products
  (forward-over-reverse ``jvp``). Deeper brackets ``[X_a, [X_b, X_c]]`` nest the
  same ``jvp``; right-nested brackets of depth ≤ k span the depth-k part of Lie(W).
* Brackets are multilinear in ``a, b, ...``, so random ``a, b, ...`` give random
  elements of each depth's span. We draw them in chunks (8, 16, 32, ...),
  orthonormalize against the basis found so far, and stop a depth when a chunk
  adds fewer new directions than it has vectors (then nothing is left at that
  depth). We stop when a whole depth adds no rank (or the rank reaches D).
* Every vector is measured in weighted coordinates ``w ⊙ v``, one weight per
  parameter tensor: the inverse of that tensor's typical share of a random gradient.
  A diagonal scaling does not change the rank, and it keeps a tensor the output is
  very sensitive to from burying the others' weak directions in round-off.
* Each vector is divided by the size of the terms it was computed from (its own
  norm for a gradient, ``‖H_b X_a‖ + ‖H_a X_b‖`` for a bracket), so a bracket
  that cancels to round-off stays at round-off instead of being blown up to
  length 1. The singular values of the stacked vectors are the evidence: the
  count is reported only if the smallest kept one exceeds the largest dropped
  one by a factor ``GAP`` = 10⁴, and only if two random θ (with fresh inputs)
  give the same rank. Otherwise the result is *inconclusive* and carries no count.
* That spectrum costs O(D³) with a slow constant (80–100 s a θ at D = 8,192 on 2 cores,
  more than all the rest). Above ``SPECTRUM_MAX_D`` = 4,096 parameters the evidence
  is first read off the orthogonalization: a chunk's residual (what its vectors
  keep outside the directions found before) has singular values; those above
  ``CUT`` gave new directions (kept), the others did not (dropped). The stack minus
  the dropped parts has rank r, so ``σ_{r+1}`` of the stack is at most the dropped
  residuals' norm ``(Σ s²)^½``, which is reported as dropped. The smallest kept
  residual is what the rank decision rests on, but only an estimate of the stack's
  ``σ_r``. MHA at D = 8,192: kept 2.9·10⁻⁴ and dropped 1.5·10⁻¹² from the residuals,
  1.8·10⁻⁴ and 2.1·10⁻¹⁵ from the spectrum. Where the residuals show no gap, the
  spectrum is computed after all.

θ is drawn at random, each parameter tensor standard normal times the root mean
square of the model's own tensor (of all its parameters where that tensor is
zero, e.g. a bias initialized to 0): the model's scale, but a generic point (no
accidental symmetry of an initialization); the second θ at a hundredth of that
scale. Half the inputs are standard normal, the other half are scaled by
``10^u``, u uniform in ``INPUT_DECADES`` = (−3, 3), enough of them (``MIN_OUTPUTS``)
that every unit meets every piece: a cap or threshold at any height, a softmax or
sigmoid both saturated and not. Each input's outputs are divided by their norm so
that no scale buries the others.

**Soundness guards.** A wrong count marked conclusive is the worst failure this
counter can have, and what fooled naive sampling is guarded against by what the
forward computes, not by a list of activations: a forward in lower precision,
random, train-mode dependent or batch-coupled is refused before counting
(:mod:`conslaw_lite.module_checks`); a coordinate the output reads whose gradient is
exactly zero on every input makes the next θ smaller, and is refused by name if
that persists; a kept direction must stand ``NOISE_MARGIN`` above the derivatives'
round-off measured at each θ (a float32 rounding otherwise fills the law
directions, nothing is dropped, and the gap test passes trivially); two θ that
disagree are settled only when another θ confirms the higher rank (a lower rank
is a θ where something saturates). ``benchmarks/fuzz_certificate.py`` checks all of
it against an independent oracle on a thousand random modules.

Torch's own derivatives are not trusted blindly. Brackets of depth 3 run the
model's forward pass under two forward-mode levels, and some fused kernels
(``layer_norm``: ``nn.LayerNorm`` counted 3 laws instead of 7) get that wrong in
torch 2.14. The counter therefore differentiates inside
:func:`conslaw_lite.exact_ops.exact_derivatives`, which routes those ops to
elementary formulas, and checks, at each θ, that ``⟨a, D²f[u, v]⟩`` and
``⟨a, D³f[u, v, w]⟩`` agree when computed forward-only and as the brackets
compute them (forward over reverse). If they do not (an op that is not routed),
the result is *inconclusive*, never a wrong count.

Piecewise-linear models (ReLU) are counted for the whole parameter space: a law
holds at every θ, so it is conserved by the fields of every activation pattern
some θ realizes on some input (it is analytic, and conserved on the open set of θ
where that pattern holds), and the counter takes the fields with such patterns
(:mod:`conslaw_lite.strata`). ``at=`` counts near one θ, with its own patterns,
where a dead unit adds laws. An output whose gradient in θ vanishes at a drawn θ
(a dead layer) is passed over.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev, jvp, vjp, vmap

from conslaw_lite.exact_ops import exact_derivatives
from conslaw_lite.laws import Law, Params
from conslaw_lite.module_checks import PROBE_SAMPLES, check_countable, check_dtypes
from conslaw_lite.strata import Stratum, activation_pattern, forced_patterns, kinked_calls, realized_patterns

Model = nn.Module | Callable[[Params, torch.Tensor], torch.Tensor]
Field = Callable[[torch.Tensor], torch.Tensor]  # θ (D,) -> tangent vector (D,)

GAP = 1e4  # smallest kept / largest dropped singular value needed for a count
CUT = 1e-8  # a residual below this (vectors have length ≤ 1) adds no direction
RESIDUAL_TOL = 1e-9  # a law's relative residual |⟨∇h, ∇f_i⟩| / (‖∇h‖‖∇f_i‖) at round-off
# Tensor weights are at most 10³ times the smallest. Round-off in any coordinate is about ε times the
# largest tensor's share, so weighting amplifies it to at most 10³ε, far below CUT: a tensor no gradient
# moves (a key bias) is not blown up into spurious directions, as it was at 10⁶ (ranks 64 and 65 for MHA
# with biases). Typical shares of real models differ by less (timm's class token: 10³ times the MLP's).
WEIGHT_FLOOR = 1e-3
# The evidence is the spectrum of the stacked vectors up to this D. Above, it costs more than all the rest
# (O(D³) with a slow constant: 80–100 s a θ at D = 8192, 2 cores), and the residuals' singular values are used
# when they show a gap (module docstring).
SPECTRUM_MAX_D = 4096
# One projection leaves a residual that kept a fraction ρ of its row's length off span(Q) by about ε/ρ:
# ≤ 10⁻¹⁴ at ρ = 0.1, far below CUT. Kahan's usual 1/√2 would project most chunks twice.
REORTHOGONALIZE = 0.1
MAX_DEPTH = 6
INPUT_DECADES = (-3.0, 3.0)  # log10 range of the scales of half the sampled inputs (_input_scales)
FIRST_CHUNK = 8
MAX_CHUNK = 256
VMAP_BATCH = 128  # vectors a vmap computes at once: beyond, its batched kernels slow (MHA D = 8192: 1.5 ms → 1.1 ms)
NUM_POINTS = 2  # random θ that must agree
MIN_OUTPUTS = 4096  # output entries per θ: every ReLU unit is on for many inputs and off for many
# And at least 1.25 D of them: W's span needs no more than D gradient rows, a quarter more covers inputs whose
# rows are dependent. Each vector costs a pass over all of them (2D took 1.6 times as long for MHA at D = 8192).
OUTPUTS_PER_PARAM = 1.25
MAX_SAMPLES = 512
PIECEWISE_SAMPLES = 16  # times more inputs for a ReLU model at a given θ: W(θ) needs inputs in each small region
# Where the rank reaches D (nothing dropped, so the gap test says nothing), the smallest kept direction must stand
# this far above the derivatives' own round-off, measured at each θ by how much two
# ways of computing D²f, D³f differ: about 1e-15 in float64, 1e-8 where the forward casts to float32, whose
# rounding otherwise fills every law direction (a ReLU net counted N = 0 instead of 3, nothing dropped).
NOISE_MARGIN = 100.0
# The least round-off assumed for that measure: a model whose second derivatives vanish (linear in θ) shows none,
# yet its gradients carry float64 round-off, amplified by up to 10³ by the tensor weights (WEIGHT_FLOOR).
ROUNDOFF = 1e-13
DERIVATIVE_TOL = 1e-6  # relative disagreement of two ways of computing D²f, D³f that flags a wrong derivative
SATURATION_PROBE = 64  # inputs on which a coordinate with exactly zero gradient makes a θ suspect (_probe_outputs)
CONFIRM_DRAWS = 2  # more θ drawn to confirm the highest of two ranks that disagree (_confirm_highest)
MIN_FACTOR = 1e-3  # the smallest scale, relative to the model's, of θ drawn after a tensor's gradient vanished
MAX_DRAWS = 16  # random θ tried for NUM_POINTS where the output moves with θ
PATTERN_DRAWS = 32  # random θ' whose activation patterns a ReLU model's inputs take (strata.realized_patterns)


@dataclass(frozen=True)
class LawCount:
    """The computed number of conservation laws and the evidence behind it.

    ``num_laws`` and ``rank_lie`` are ``None`` when the result is inconclusive
    (``reason`` says why). ``ranks_by_depth[j]`` is dim of the span of brackets
    of depth ≤ j+1 at the first θ; ``singular_values`` those of its stacked vectors
    (``evidence == "spectrum"``) or of its orthogonalization's residuals (``"residuals"``,
    at some θ: only above ``SPECTRUM_MAX_D`` parameters; the module docstring says what they bound).
    ``patterns``: for a model with ReLU units, which activation patterns the fields
    were taken with: ``"realizable"`` (every pattern some θ realizes on some input:
    the laws of the whole parameter space) or ``"at θ"`` (those of the θ given with
    ``at``: the laws near it); ``""`` for a model without. ``strata``: the θ drawn
    where the output did not move, and the pattern at a θ given with ``at`` (units
    found dead or always active there, with its rank).
    """

    num_params: int  # D
    rank_lie: int | None  # dim Lie(W)(θ)
    num_laws: int | None  # N = D − rank_lie
    depth: int  # deepest bracket computed (the last depth added no rank, unless the rank reached D)
    sigma_kept: float  # smallest kept singular value (minimum over the θ)
    sigma_dropped: float  # largest dropped one (maximum over the θ; 0 when the rank is D); residuals: their norm
    seconds: float
    conclusive: bool
    reason: str = ""
    ranks_by_depth: tuple[int, ...] = ()
    singular_values: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    evidence: str = "spectrum"
    patterns: str = ""
    strata: tuple[Stratum, ...] = ()

    @property
    def gap(self) -> float:
        """``sigma_kept / sigma_dropped`` (infinite when nothing was dropped)."""
        return math.inf if self.sigma_dropped == 0 else self.sigma_kept / self.sigma_dropped


@dataclass(frozen=True)
class LawCheck:
    """How a list of closed-form laws compares with the computed count.

    ``max_residual`` is the largest ``|⟨∇h, ∇f_i(x)⟩| / (‖∇h‖ ‖∇f_i(x)‖)`` over law
    entries h, outputs i and fresh inputs x (``residuals`` per law);
    ``independent`` the number of functionally independent entries (rank of
    their gradients); ``complete`` = every residual at round-off and
    ``independent == num_laws``.
    """

    max_residual: float
    residuals: dict[str, float]
    independent: int
    num_laws: int | None
    complete: bool
    count: LawCount


@dataclass(frozen=True)
class _Problem:
    """The model as a function of one flat parameter vector: ``apply(unflatten(θ), x)``."""

    apply: Callable[[Params, torch.Tensor], torch.Tensor]
    shapes: dict[str, torch.Size]
    scales: dict[str, float]
    module: nn.Module | None = None  # names the ReLU units of a module

    @property
    def num_params(self) -> int:
        return sum(math.prod(s) for s in self.shapes.values())

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        sizes = [math.prod(s) for s in self.shapes.values()]
        parts = torch.split(theta, sizes)
        return {n: p.reshape(s) for (n, s), p in zip(self.shapes.items(), parts)}

    def flatten(self, values: Params) -> torch.Tensor:
        """The flat θ of parameter values given by name (``ValueError`` naming a missing or misshapen one)."""
        for name, shape in self.shapes.items():
            if name not in values or tuple(values[name].shape) != tuple(shape):
                raise ValueError(f"at: parameter {name!r} of shape {tuple(shape)} is missing or has another shape")
        return torch.cat([values[n].detach().to(torch.float64).reshape(-1) for n in self.shapes])

    def random_theta(self, gen: torch.Generator, factor: float = 1.0, standard: bool = False) -> torch.Tensor:
        """Each tensor standard normal times ``factor`` times its scale (:func:`_scales`), or with ``standard``
        times ``1/√(last dimension)`` (``nn.Linear``'s scale for a weight, 1 for a vector)."""
        scale = {n: s[-1] ** -0.5 if len(s) > 1 else 1.0 for n, s in self.shapes.items()} if standard else self.scales
        parts = [torch.randn(s, generator=gen, dtype=torch.float64) * scale[n] for n, s in self.shapes.items()]
        return torch.cat([p.reshape(-1) for p in parts]) * factor

    def unread(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The coordinates (D,) of the tensors the output on ``x`` has no autograd path to."""
        values = {n: v.detach().requires_grad_() for n, v in self.unflatten(theta).items()}
        out = self.apply(values, x)
        grads = torch.autograd.grad(out.sum(), list(values.values()), allow_unused=True)
        return torch.cat([torch.full((v.numel(),), g is None) for v, g in zip(values.values(), grads)])

    def whole_tensors(self, flags: torch.Tensor) -> torch.Tensor:
        """The boolean (D,) ``flags`` kept only on tensors flagged in every coordinate."""
        parts = [part if bool(part.all()) else torch.zeros_like(part) for _, part in self.split(flags)]
        return torch.cat(parts)

    def split(self, flat: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """A flat (D,) vector cut into its parameter tensors' coordinates, with their names."""
        return list(zip(self.shapes, torch.split(flat, [math.prod(s) for s in self.shapes.values()])))

    def outputs(self, inputs: torch.Tensor, weights: torch.Tensor | None = None) -> Field:
        """θ ↦ every output on ``inputs``, flattened (S·out,); input s's outputs times ``weights[s]`` if given."""
        if weights is None:
            return lambda theta: self.apply(self.unflatten(theta), inputs).reshape(-1)
        rows = lambda theta: self.apply(self.unflatten(theta), inputs).reshape(len(inputs), -1)  # noqa: E731
        return lambda theta: (rows(theta) * weights[:, None]).reshape(-1)


def _problem(model: Model, params: Params | None) -> _Problem:
    """Validate the model and its parameters; the module is copied to float64, in the mode it is in."""
    module = None
    if isinstance(model, nn.Module):
        if params is not None:
            raise TypeError("params is only for a model given as a function f(params, x); a module has its own")
        check_dtypes(dict(model.named_parameters()), model)
        module = copy.deepcopy(model).to(torch.float64)
        params = {n: p for n, p in module.named_parameters() if p.requires_grad}

        def apply(p: Params, x: torch.Tensor) -> torch.Tensor:
            return functional_call(module, dict(p), (x,))

    elif callable(model):
        if params is None:
            raise TypeError("a model given as a function f(params, x) needs params={name: tensor}")
        apply = model
        check_dtypes(params)
    else:
        raise TypeError(f"model must be an nn.Module or a function f(params, x), got {type(model).__name__}")
    if not params:
        raise ValueError("the model has no trainable parameters: there is nothing to count")
    for name, p in params.items():
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameter {name!r} is a {type(p).__name__}, not a tensor")
        if not torch.isfinite(p).all():
            raise ValueError(f"parameter {name!r} contains NaN or infinite entries")
    return _Problem(apply, {n: p.shape for n, p in params.items()}, _scales(params), module)


def _scales(params: Params) -> dict[str, float]:
    """Each tensor's root mean square; for an all-zero tensor (a bias initialized to 0) that of all parameters."""
    flat = torch.cat([p.detach().double().reshape(-1) for p in params.values()])
    overall = float(flat.pow(2).mean().sqrt()) or 1.0
    return {n: float(p.detach().double().pow(2).mean().sqrt()) or overall for n, p in params.items()}


def _sample_inputs(
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
    batch: int,
    gen: torch.Generator,
    spread: bool = True,
):
    if inputs is not None:
        return inputs.to(torch.float64) if inputs.is_floating_point() else inputs
    if input_shape is None:
        raise ValueError("give input_shape (one input, no batch dimension) or inputs")
    shape = tuple(input_shape)
    if not shape or any(not isinstance(n, int) or n < 1 for n in shape):
        raise ValueError(f"input_shape must be positive integers, got {input_shape}")
    x = torch.randn(batch, *shape, generator=gen, dtype=torch.float64)
    return x * _input_scales(batch, gen).reshape(-1, *[1] * len(shape)) if spread else x


def _input_scales(batch: int, gen: torch.Generator) -> torch.Tensor:
    """1 for every other input, ``10^u`` with u uniform in ``INPUT_DECADES`` for the others.

    Standard-normal inputs alone meet only the pieces of an activation near 0: a cap (``relu6``,
    ``hardtanh``, a ``clamp`` at ±3), a threshold, a saturated softmax or sigmoid that a model of
    ``nn.Linear``'s scale reaches only for larger (or smaller) inputs is never seen, and the count
    is that of the model without it (``A·relu6(Bx)`` counted 3 laws of ``A·relu(Bx)`` instead of 0).
    Inputs over six decades reach every such regime whatever the function computing it; laws must
    hold for every input, so more regimes can only remove spurious laws, never true ones.
    """
    low, high = INPUT_DECADES
    u = low + (high - low) * torch.rand(batch, generator=gen, dtype=torch.float64)
    return torch.where(torch.arange(batch) % 2 == 0, torch.ones(batch, dtype=torch.float64), 10.0**u)


def _checked_outputs(problem: _Problem, theta: torch.Tensor, inputs: torch.Tensor, finite: bool = True) -> torch.Tensor:
    """f(θ) on ``inputs``, after checking it is a floating, differentiable tensor (and finite, with ``finite``)."""
    try:
        out = problem.apply(problem.unflatten(theta), inputs)
    except (RuntimeError, ValueError, IndexError, TypeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"the model rejects inputs of shape {tuple(inputs.shape[1:])}: {first_line}") from err
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the model must return one tensor, got {type(out).__name__}")
    if not out.is_floating_point():
        raise TypeError(f"the model's output has dtype {out.dtype} (argmax?): it is not differentiable in θ")
    if finite and not torch.isfinite(out).all():
        raise ValueError("the model's output is NaN or infinite at a random θ")
    return out


def _balanced_inputs(
    problem: _Problem, theta: torch.Tensor, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """The inputs whose outputs are finite at θ, for each ``1/‖J_s v‖`` (``None``: outputs not per input), and
    the number of outputs on them.

    ``J_s v`` is the derivative of input s's outputs along a random direction v of θ: the size of
    its gradients. Inputs far from the standard scale (:func:`_input_scales`) have gradients up
    to 10⁶ times larger or smaller; unweighted, they would bury the others' in round-off (MHA's
    smallest kept singular value fell from 5·10⁻² to 4·10⁻⁸). The size of the outputs would not
    do: a residual block's output is mostly its input, which no parameter moves. A constant
    positive factor per output does not change the span of the gradients. An input whose output
    overflows (an ``exp`` of a large input) is left out; one of standard scale must not overflow.
    """
    out = _checked_outputs(problem, theta, x, finite=False)
    if out.dim() == 0 or len(out) != len(x):
        return x, None, _checked_outputs(problem, theta, x).numel()
    rows = out.detach().reshape(len(x), -1)
    finite = torch.isfinite(rows).all(dim=1)
    if not finite[::2].all():  # every other input is standard normal (_input_scales)
        raise ValueError("the model's output is NaN or infinite at a random θ")
    x, rows = x[finite], rows[finite]
    norms = _gradient_sizes(problem, theta, x)
    if norms is None:
        norms = rows.norm(dim=1)
    if not bool((norms > 0).any()):
        return x, torch.ones_like(norms), rows.numel()
    # at most 10³ times up, like WEIGHT_FLOOR: a saturated softmax's gradient is round-off, and blown up further its
    # round-off would pass CUT as directions (a softmax gate's 2 laws lost to rank 6 = D)
    return x, 1 / norms.clamp_min(WEIGHT_FLOOR * float(norms[norms > 0].median())), rows.numel()


def _gradient_sizes(problem: _Problem, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """``‖J_s v‖`` per input for one random v of θ's size (``None`` where torch has no forward derivative)."""
    v = torch.randn(theta.shape, generator=torch.Generator().manual_seed(len(x)), dtype=theta.dtype)
    try:
        _, tangent = jvp(problem.outputs(x), (theta,), (v * theta.abs().mean(),))
    except (NotImplementedError, RuntimeError):
        return None
    sizes = tangent.detach().reshape(len(x), -1).norm(dim=1)
    return sizes if bool(torch.isfinite(sizes).all()) else None


def _gradient_field(f: Field, a: torch.Tensor) -> Field:
    """``X_a(θ) = ∇_θ ⟨a, f(θ)⟩`` (a vector-Jacobian product)."""
    return lambda theta: vjp(f, theta)[1](a)[0]


def _nested_field(f: Field, cotangents: torch.Tensor) -> Field:
    """``[X_{a_1}, [X_{a_2}, [..., X_{a_k}]]]`` for cotangents of shape (k, S·out)."""
    inner = _gradient_field(f, cotangents[-1])
    for a in reversed(cotangents[:-1]):
        inner = _bracket(_gradient_field(f, a), inner)
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


def _scaled_vector(f: Field, theta: torch.Tensor, cotangents: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One random element ``v`` of depth ``k = len(cotangents)``, as ``weights ⊙ v`` divided by its terms' size.

    The size is measured with the weights too, so the result has length ≤ 1.
    """
    if len(cotangents) == 1:
        v = _gradient_field(f, cotangents[0])(theta) * weights
        size = v.norm()
    else:
        x = _gradient_field(f, cotangents[0])
        y = _nested_field(f, cotangents[1:])
        v, size = _bracket_terms(x, y, theta, weights)
    return v / size.clamp_min(torch.finfo(v.dtype).tiny)


def _tensor_weights(f: Field, theta: torch.Tensor, n_out: int, gen: torch.Generator, sizes: list[int]) -> torch.Tensor:
    """``1 / max(c_t, 10⁻³ max_s c_s)`` on each parameter tensor t's coordinates (``WEIGHT_FLOOR`` = 10⁻³).

    ``c_t`` is the root mean square, over t's coordinates and ``FIRST_CHUNK`` random
    ``∇_θ⟨a, f⟩``, of those gradients. Scaling every vector by the same invertible
    diagonal leaves the rank unchanged; these weights give every tensor the same typical
    size at depth 1. Without them, a tensor the output is very sensitive to (timm's class
    token beside a LayerNorm: 1000 times the MLP's) dominates every vector and pushes the
    weak directions of the others toward round-off.
    """
    a = torch.randn(FIRST_CHUNK, n_out, generator=gen, dtype=torch.float64)
    squares = vmap(lambda a: _gradient_field(f, a)(theta))(a).pow(2).mean(0)
    c = torch.cat([part.mean().sqrt().expand(len(part)) for part in torch.split(squares, sizes)])
    return 1 / c.clamp_min(WEIGHT_FLOOR * c.max()).clamp_min(torch.finfo(c.dtype).tiny)


class _Sampler:
    """Random Lie-algebra elements, vectorized with ``vmap`` (a Python loop for modules vmap cannot batch)."""

    def __init__(self, f: Field, theta: torch.Tensor, weights: torch.Tensor) -> None:
        self.f, self.theta, self.weights, self.use_vmap = f, theta, weights, True

    def __call__(self, cotangents: torch.Tensor) -> torch.Tensor:  # (m, k, S·out) -> (m, D)
        one = lambda c: _scaled_vector(self.f, self.theta, c, self.weights)  # noqa: E731
        if self.use_vmap:
            try:
                return torch.cat([vmap(one)(part) for part in cotangents.split(VMAP_BATCH)])
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
    """Orthonormal rows found so far (D columns), in a buffer that doubles when full: appending with ``cat``
    would copy the whole basis at every chunk (9 s of 141 for MHA at D = 8192)."""

    def __init__(self, D: int) -> None:
        self.buffer, self.size = torch.empty(FIRST_CHUNK, D, dtype=torch.float64), 0

    @property
    def rows(self) -> torch.Tensor:
        return self.buffer[: self.size]

    def extend(self, new: torch.Tensor) -> None:
        if self.size + len(new) > len(self.buffer):
            capacity = max(min(2 * len(self.buffer), self.buffer.shape[1]), self.size + len(new))
            self.buffer = torch.cat([self.rows, self.buffer.new_empty(capacity - self.size, self.buffer.shape[1])])
        self.buffer[self.size : self.size + len(new)] = new
        self.size += len(new)


@dataclass(frozen=True)
class _Rank:
    rank: int
    depth: int
    ranks_by_depth: tuple[int, ...]
    singular_values: np.ndarray
    sigma_kept: float
    sigma_dropped: float
    evidence: str  # LawCount.evidence
    saturated: bool  # a whole depth added nothing (or the rank reached D)
    noise: float = 0.0  # the derivatives' round-off at this θ (_derivative_mismatch)


def _lie_rank(f: Field, theta: torch.Tensor, n_out: int, gen: torch.Generator, sizes: list[int]) -> _Rank:
    """dim Lie(W)(θ) by random brackets of growing depth; ``sizes``: of the parameter tensors (module docstring)."""
    D = theta.numel()
    sample = _Sampler(f, theta, _tensor_weights(f, theta, n_out, gen, sizes))
    basis = _Basis(D)
    stacked, residuals, ranks = [], [], []
    for depth in range(1, MAX_DEPTH + 1):
        m = FIRST_CHUNK
        while True:
            m = min(m, D - basis.size + FIRST_CHUNK)
            V = sample(torch.randn(m, depth, n_out, generator=gen, dtype=torch.float64))  # (m, D)
            new, s = _new_directions(basis.rows, V)
            stacked.append(V)
            residuals.append(s)
            basis.extend(new)
            if len(new) < m:  # fewer new directions than vectors: this depth is exhausted
                break
            m = min(2 * m, MAX_CHUNK)
        ranks.append(basis.size)
        if basis.size == D or (depth > 1 and ranks[-1] == ranks[-2]):
            break
    saturated = basis.size == D or (len(ranks) > 1 and ranks[-1] == ranks[-2])
    r, s = basis.size, torch.cat(residuals).sort(descending=True).values
    kept, dropped, evidence = float(s[r - 1]) if r else 0.0, float(s[r:].norm()), "residuals"
    if D <= SPECTRUM_MAX_D or kept < GAP * dropped:
        s = torch.linalg.svdvals(torch.cat(stacked))
        kept, dropped, evidence = float(s[r - 1]) if r else 0.0, float(s[r]) if r < len(s) else 0.0, "spectrum"
    return _Rank(r, len(ranks), tuple(ranks), s.numpy(), kept, dropped, evidence, saturated)


def _derivative_mismatch(
    f: Field, theta: torch.Tensor, directions: list[torch.Tensor], n_out: int, gen: torch.Generator
) -> float:
    """Relative disagreement of ``⟨a, D^k f(θ)[u, v, (w)]⟩``, k = 2, 3: forward-only vs forward over reverse.

    Both are the same number when torch's derivatives are right; the brackets use
    the second way, and through it the forward pass under two forward levels. The
    forward-only way also runs f under ``vjp``, so that θ requires grad as in the brackets
    (some modules, e.g. ``nn.MultiheadAttention``, take an inference kernel otherwise).
    """
    a = torch.randn(n_out, generator=gen, dtype=torch.float64)
    u, v, w = directions
    try:
        tracked = lambda t: vjp(f, t)[0]  # noqa: E731  f, with θ tracked for reverse mode innermost
        Du = lambda t: jvp(tracked, (t,), (u,))[1]  # noqa: E731
        Duv = lambda t: jvp(Du, (t,), (v,))[1]  # noqa: E731
        Xa_v = lambda t: jvp(_gradient_field(f, a), (t,), (v,))[1]  # noqa: E731  (Hessian of ⟨a, f⟩ times v)
        forward = [a @ Duv(theta), a @ jvp(Duv, (theta,), (w,))[1]]
        reverse = [u @ Xa_v(theta), u @ jvp(Xa_v, (theta,), (w,))[1]]
    except NotImplementedError as err:  # e.g. a kernel without a forward-mode derivative
        first_line = str(err).splitlines()[0]
        raise ValueError(f"torch cannot take the brackets' derivatives of this model: {first_line}") from err
    size = float(a.norm() * f(theta).norm())  # D^k f[u, v, ..] is about f's size: u, v, w are θ-sized
    return max(float((p - q).abs()) / (float(p.abs() + q.abs()) + 1e-9 * size) for p, q in zip(forward, reverse))


def _zero_gradient(f: Field, theta: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The coordinates (D,) of θ that ``FIRST_CHUNK`` random ``∇_θ⟨a, f⟩`` leave exactly zero."""
    a = torch.randn(FIRST_CHUNK, f(theta).numel(), generator=gen, dtype=torch.float64)
    return (vmap(lambda a: _gradient_field(f, a)(theta))(a) == 0).all(dim=0)


@dataclass(frozen=True)
class _Draw:
    """One θ with its inputs, the output map ``f`` there, and what the counter saw of its activation pattern."""

    theta: torch.Tensor
    f: Field
    n_out: int
    gen: torch.Generator  # the stream the rank at this θ draws its brackets from
    stratum: Stratum
    patterns: str  # LawCount.patterns
    zero: torch.Tensor | None = None  # (D,) coordinates whose gradient is exactly zero on every input
    factor: float = 1.0  # θ's scale relative to the model's (or to the standard scale)
    standard: bool = False  # θ drawn at nn.Linear's standard scale, not the model's (Problem.random_theta)


def _draw(
    problem: _Problem,
    index: int,
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
    seed: int,
    num_samples: int | None,
    at: torch.Tensor | None = None,
    factor: float = 1.0,
    standard: bool = False,
) -> _Draw:
    """θ number ``index`` of the seed's sequence (or ``at``), fresh inputs, and the output map to rank there.

    ``factor`` scales the random θ (:func:`_ranks_at_points` shrinks it where a tensor's gradient vanished).

    A model with ReLUs is ranked with the patterns random θ' realize on the inputs
    (:func:`conslaw_lite.strata.realized_patterns`), or with its own, on ``PIECEWISE_SAMPLES``
    times more inputs (so that small activation regions are met): at a given θ, and where a
    ReLU acts on a tensor without the inputs' batch (its pattern cannot be paired with an input).
    """
    gen = torch.Generator().manual_seed(1_000_003 * seed + index)
    theta = problem.random_theta(gen, factor, standard) if at is None else at
    forward = lambda t, x: problem.apply(problem.unflatten(t), x)  # noqa: E731
    probe = _sample_inputs(input_shape, inputs, 1, gen)
    n_out_one = _checked_outputs(problem, theta, probe).numel() // max(len(probe), 1)
    outputs = max(OUTPUTS_PER_PARAM * theta.numel(), MIN_OUTPUTS)
    batch = num_samples or min(MAX_SAMPLES, math.ceil(outputs / max(n_out_one, 1)))
    calls, per_input = kinked_calls(lambda x: forward(theta, x), torch.cat([probe[:1]] * 3))
    own = calls > 0 and (at is not None or not per_input)  # ranked with the patterns θ realizes itself
    if own and num_samples is None:
        batch *= PIECEWISE_SAMPLES
    x, weights, n_out = _balanced_inputs(problem, theta, _sample_inputs(input_shape, inputs, batch, gen))
    f, patterns, stratum = problem.outputs(x, weights), "", Stratum(index)
    if calls and not own:
        thetas = [problem.random_theta(gen, _pattern_factor(gen)) for _ in range(min(PATTERN_DRAWS, len(x)))]
        masks = realized_patterns(forward, thetas, x)
        f, patterns = _with_patterns(problem.outputs(x, weights), masks), "realizable"
    elif own:
        tracked = theta.detach().requires_grad_()  # the pattern asks which units reach the output
        dead, linear, _ = activation_pattern(lambda: forward(tracked, x), len(x), problem.module)
        stratum, patterns = Stratum(index, dead, linear), "at θ"
    if _zero_gradient(f, theta, gen).all():
        return _Draw(theta, f, n_out, gen, replace(stratum, constant=True), patterns, None, factor, standard)
    zero = _zero_gradient(_probe_outputs(problem, x, weights) if not patterns else f, theta, gen)
    if patterns == "at θ":  # a dead unit's weights: laws near this θ (strata), not saturation
        zero = problem.whole_tensors(zero)
    if bool(zero.any()):
        zero = zero & ~problem.unread(theta, x[:1])
    if bool(zero.all()):
        return _Draw(theta, f, n_out, gen, replace(stratum, constant=True), patterns, None, factor, standard)
    return _Draw(theta, f, n_out, gen, stratum, patterns, zero if bool(zero.any()) else None, factor, standard)


def _pattern_factor(gen: torch.Generator) -> float:
    """The scale of a θ' whose patterns the inputs take: ``10^u``, u uniform in ``INPUT_DECADES``.

    Any θ' will do (a law holds at every θ), and behind a norm the inputs' scale cannot reach a
    cap: θ' over six decades do (relu6 after an RMSNorm at nn.Linear's scale is never capped).
    """
    low, high = INPUT_DECADES
    return 10.0 ** (low + (high - low) * float(torch.rand((), generator=gen, dtype=torch.float64)))


def _probe_outputs(problem: _Problem, x: torch.Tensor, weights: torch.Tensor | None) -> Field:
    """The outputs on the first ``SATURATION_PROBE`` inputs: where a softmax is saturated, a coordinate's gradient
    can be nonzero on a few inputs of thousands (near-ties) and zero on all the others, which hides its laws."""
    n = min(SATURATION_PROBE, len(x))
    return problem.outputs(x[:n], None if weights is None else weights[:n])


def _with_patterns(f: Field, patterns: list[torch.Tensor]) -> Field:
    """θ ↦ f(θ) with every ReLU applied as its recorded pattern (:func:`conslaw_lite.strata.forced_patterns`)."""

    def forced(theta: torch.Tensor) -> torch.Tensor:
        with forced_patterns(patterns):
            return f(theta)

    return forced


def _rank_or_reason(problem: _Problem, d: _Draw, seed: int, k: int) -> _Rank | str:
    """:func:`_lie_rank` at the draw's θ, or why not: torch's derivatives of the model fail the check there."""
    check_gen = torch.Generator().manual_seed(1_000_003 * seed + 4999 + k)  # leaves d.gen as it was
    directions = [problem.random_theta(check_gen, d.factor, d.standard) for _ in range(3)]
    mismatch = _derivative_mismatch(d.f, d.theta, directions, d.n_out, check_gen)
    if mismatch > DERIVATIVE_TOL:
        return (
            f"torch's higher derivatives of this model are wrong: two ways of computing D²f, D³f differ by "
            f"{mismatch:.1e} (relative): an op torch differentiates wrongly, see conslaw_lite.exact_ops"
        )
    rank = _lie_rank(d.f, d.theta, d.n_out, d.gen, [math.prod(s) for s in problem.shapes.values()])
    return replace(rank, noise=mismatch)


def _ranks_at_points(
    problem: _Problem,
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
    seed: int,
    num_samples: int | None,
    at: torch.Tensor | None = None,
) -> tuple[list[tuple[_Draw, _Rank]], list[_Draw], str]:
    """Ranks at ``NUM_POINTS`` θ of the seed's sequence (``at``: that θ alone), every θ drawn, and why no ranks.

    The second θ is drawn at ``nn.Linear``'s standard scale, the first at the model's own. Both must
    give the same rank; a model saturated at its own scale (a GELU or softmax of large pre-activations
    behind a norm, which the inputs' scale cannot undo: GELU ×245 counted the 3 ReLU laws), or so
    small that its brackets fall to round-off (a residual net ×10⁻³), is not at both.

    A θ where the output's gradient vanishes on every sampled input is passed over
    (the output can be constant on an open set of θ: a dead ReLU layer); an output
    constant at all ``MAX_DRAWS`` θ is an error.

    So is a θ where a coordinate the output reads gets exactly zero gradient on every input: a
    softmax or sigmoid saturated to exactly 0 or 1 (MHA with weights ×1000: each attention row
    one-hot, Q and K frozen) would make each such coordinate a spurious law. The following θ are
    drawn ten times smaller each time this happens, down to ``MIN_FACTOR``. Zeros on the same
    entries at every θ there are structural and counted as laws (a gate behind a top-1 softmax that
    renormalizes to exactly 1, a tensor the output does not read); zeros that move from θ to θ are
    an error naming their tensors.
    """
    if at is not None:
        drawn = [_draw(problem, 0, input_shape, inputs, seed, num_samples, at)]
        if drawn[0].stratum.constant:
            raise ValueError("the output's gradient in θ is zero at the given θ, on every sampled input")
    else:
        drawn, factor = [], 1.0
        for index in range(MAX_DRAWS):
            standard = sum(_usable(d) for d in drawn) == 1
            drawn.append(_draw(problem, index, input_shape, inputs, seed, num_samples, None, factor, standard))
            if drawn[-1].zero is not None:
                factor = max(factor / 10, MIN_FACTOR)
            elif drawn[-1].stratum.constant:  # too small for the output to move (a threshold): back up
                factor = min(factor * 10, 1.0)
            if sum(_usable(d) for d in drawn) == NUM_POINTS:
                break
        else:
            if all(d.stratum.constant for d in drawn):
                raise ValueError(
                    f"the output's gradient in θ is zero at all {MAX_DRAWS} random θ tried, on every sampled "
                    "input: the model's output does not depend on θ"
                )
            if sum(_usable(d) for d in drawn) < NUM_POINTS:
                error = _frozen_error(problem, drawn)
                if error is not None:
                    raise error
                drawn = [replace(d, zero=None) if d.factor <= MIN_FACTOR else d for d in drawn]
    results: list[tuple[_Draw, _Rank]] = []
    for d in [d for d in drawn if _usable(d) or at is not None][:NUM_POINTS]:
        rank = _rank_or_reason(problem, d, seed, len(results))
        if isinstance(rank, str):
            return [], drawn, rank
        results.append((d, rank))
    if at is None and len({r.rank for _, r in results}) > 1:
        return _confirm_highest(problem, input_shape, inputs, seed, num_samples, results, drawn)
    return results, drawn, ""


def _confirm_highest(problem, input_shape, inputs, seed, num_samples, results, drawn):
    """Two θ that agree on the highest rank met, or the disagreement (:func:`_ranks_at_points`).

    In exact arithmetic no θ has a larger dim Lie(W)(θ) than a generic one: a lower rank is a θ
    where something saturates (a GELU acting as a ReLU, a one-hot softmax). Up to ``CONFIRM_DRAWS``
    more θ are drawn at the scale of the one with the highest rank; the first that reaches it (with
    its own gap) confirms it, and the two are the result.
    """
    best = max(results, key=lambda dr: dr[1].rank)
    for index in range(len(drawn), len(drawn) + CONFIRM_DRAWS):
        d = _draw(problem, index, input_shape, inputs, seed, num_samples, None, best[0].factor, best[0].standard)
        drawn.append(d)
        if not _usable(d):
            continue
        rank = _rank_or_reason(problem, d, seed, len(results))
        if isinstance(rank, str):
            return [], drawn, rank
        results.append((d, rank))
        if rank.rank == best[1].rank:
            return [best, (d, rank)], drawn, ""
    return results, drawn, ""


def _usable(d: _Draw) -> bool:
    """The output moves with θ at this draw, and every coordinate's gradient is nonzero on some input."""
    return not d.stratum.constant and d.zero is None


def _frozen_error(problem: _Problem, drawn: list[_Draw]) -> ValueError | None:
    """``None`` if the draws at ``MIN_FACTOR`` share their zero coordinates (structural: accepted by
    :func:`_ranks_at_points`), else the error naming the tensors whose zeros change from θ to θ."""
    smallest = [d.zero for d in drawn if not d.stratum.constant and d.factor <= MIN_FACTOR]
    if len(smallest) >= NUM_POINTS and all(z is not None and torch.equal(z, smallest[0]) for z in smallest):
        return None
    seen = torch.stack([d.zero for d in drawn if d.zero is not None]).any(dim=0)
    names = [name for name, part in problem.split(seen) if bool(part.any())]
    return ValueError(
        f"parameter {', '.join(map(repr, names))} gets exactly zero gradient on every sampled input at "
        f"{sum(d.zero is not None for d in drawn)} of {len(drawn)} random θ, down to {MIN_FACTOR:g} times the "
        "model's scale, but not at the same entries: an op whose derivative vanishes there (a softmax or sigmoid "
        "saturated to exactly 0 or 1) would make each such entry a spurious law; count the model at a smaller "
        "weight scale"
    )


def _strata(results: list[tuple[_Draw, _Rank]], drawn: list[_Draw]) -> tuple[Stratum, ...]:
    """The θ passed over (output constant there) and, at a given θ of a ReLU model, its pattern with the rank."""
    ranks = {d.stratum.draw: r.rank for d, r in results}
    return tuple(
        replace(d.stratum, rank=ranks.get(d.stratum.draw)) for d in drawn if d.stratum.constant or d.patterns == "at θ"
    )


def count_laws(
    model: Model,
    input_shape: tuple[int, ...] | None = None,
    *,
    inputs: torch.Tensor | None = None,
    params: Params | None = None,
    seed: int = 0,
    num_samples: int | None = None,
    exact_ops: bool = True,
    at: Params | None = None,
) -> LawCount:
    """The number of conservation laws, ``N = D − dim Lie(W)(θ)``, computed at random θ.

    ``model`` is an ``nn.Module`` called as ``model(x)`` with ``x`` of shape
    ``(S, *input_shape)``, or a function ``f(params, x)`` with ``params`` a dict
    of tensors (their names and shapes; values set the scale of the random θ).
    Inputs are standard normal, ``S = num_samples`` of them (default: enough
    that S·out ≥ max(1.25 D, 4096), at most 512), unless ``inputs`` are given. See the
    module docstring for the method, the evidence and when it answers *inconclusive*.
    ``exact_ops=False`` differentiates torch's fused kernels as they are (only to
    show why :func:`conslaw_lite.exact_ops.exact_derivatives` is needed).

    *ReLU units* (:mod:`conslaw_lite.strata`): the count is that of the laws of the
    whole parameter space, which every activation pattern some θ realizes must
    respect; the fields are taken with such patterns (``patterns == "realizable"``),
    so it does not depend on which units a random θ happens to leave dead.
    ``at`` (parameter values, by name) counts near that one θ instead, with the
    patterns it realizes itself (``patterns == "at θ"``; the units found dead or
    always active there are in ``strata``): near a trained model's dead unit there
    are more laws. A ReLU of a tensor without the inputs' batch (of the weights
    alone, say) cannot take another θ's pattern, so such a model is counted with
    its own patterns at every θ.

    A θ where the output's gradient is zero on every input is passed over (listed
    in ``strata``); an output with zero gradient at every θ tried is an error.

    A module is counted in the mode it is in (train mode, for a fresh one). A forward that would
    be counted wrongly is refused first, with one line naming the layer
    (:func:`conslaw_lite.module_checks.check_countable`): one that computes in float32, float16 or
    bfloat16, is random (dropout in train mode), computes otherwise in train than in eval mode
    (BatchNorm), couples the inputs of a batch, or has no derivative in θ (``round``).

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> count_laws(ToyProduct(a=1.0, b=2.0), (1,)).num_laws  # a·b·x keeps a² − b²
    1
    >>> linear = lambda p, x: x @ p["B"].T @ p["A"].T  # two-layer linear net, r = 2
    >>> count_laws(linear, (3,), params={"B": torch.ones(2, 3), "A": torch.ones(3, 2)}).num_laws  # r(r+1)/2
    3
    """
    start = time.perf_counter()
    problem = _problem(model, params)
    probe_gen = torch.Generator().manual_seed(1_000_003 * seed + 6007)  # not a stream the count draws from
    probe_theta, probe = problem.random_theta(probe_gen), _sample_inputs(input_shape, inputs, PROBE_SAMPLES, probe_gen)
    _checked_outputs(problem, probe_theta, probe[:PROBE_SAMPLES])
    check_countable(problem.apply, problem.unflatten(probe_theta), probe[:PROBE_SAMPLES], problem.module)
    D = problem.num_params
    theta = None if at is None else problem.flatten(at)
    with exact_derivatives() if exact_ops else nullcontext():
        results, drawn, reason = _ranks_at_points(problem, input_shape, inputs, seed, num_samples, theta)
    strata = _strata(results, drawn)
    patterns = drawn[-1].patterns
    if not results:
        seconds = time.perf_counter() - start
        return LawCount(D, None, None, 0, 0.0, 0.0, seconds, False, reason, patterns=patterns, strata=strata)
    ranks = [r for _, r in results]
    if len({r.rank for r in ranks}) > 1:
        reason = f"the random θ disagree: ranks {sorted({r.rank for r in ranks})}"
    kept, dropped = min(r.sigma_kept for r in ranks), max(r.sigma_dropped for r in ranks)
    if not reason and not all(r.saturated for r in ranks):
        reason = f"the rank was still growing at bracket depth {MAX_DEPTH}"
    if not reason and kept < GAP * dropped:
        reason = f"no clear gap: smallest kept singular value {kept:.2e}, largest dropped {dropped:.2e}"
    noise = max(max(r.noise for r in ranks), ROUNDOFF)
    if not reason and dropped == 0 and kept < NOISE_MARGIN * noise:  # nothing dropped: the gap test is vacuous
        reason = (
            f"the smallest kept singular value {kept:.2e} is within {NOISE_MARGIN:g}× of the derivatives' round-off "
            f"{noise:.1e} (two ways of computing D²f, D³f differ by that much): the directions it keeps may be "
            "round-off; is part of the forward computed in lower precision (a cast to float32)?"
        )
    rank = ranks[0].rank if not reason else None
    return LawCount(
        num_params=D,
        rank_lie=rank,
        num_laws=None if rank is None else D - rank,
        depth=max(r.depth for r in ranks),
        sigma_kept=float(kept),
        sigma_dropped=float(dropped),
        seconds=time.perf_counter() - start,
        conclusive=not reason,
        reason=reason,
        ranks_by_depth=ranks[0].ranks_by_depth,
        singular_values=ranks[0].singular_values,
        evidence="spectrum" if all(r.evidence == "spectrum" for r in ranks) else "residuals",
        patterns=patterns,
        strata=strata,
    )


def _law_entries(laws: Mapping[str, Law], problem: _Problem) -> Callable:
    """θ ↦ every entry of every law, flattened (L,); a law that fails names itself."""

    def h(theta: torch.Tensor) -> torch.Tensor:
        p = problem.unflatten(theta)
        values = []
        for name, law in laws.items():
            try:
                values.append(torch.as_tensor(law(p)).reshape(-1))
            except (KeyError, IndexError, RuntimeError, TypeError) as err:
                raise ValueError(f"law {name!r} cannot be evaluated on the model's parameters: {err}") from err
        return torch.cat(values)

    return h


def _law_sizes(laws: Mapping[str, Law], problem: _Problem, theta: torch.Tensor):
    p = problem.unflatten(theta)
    return [torch.as_tensor(law(p)).numel() for law in laws.values()]


def check_laws(
    model: Model,
    laws: Mapping[str, Law],
    input_shape: tuple[int, ...] | None = None,
    *,
    inputs: torch.Tensor | None = None,
    params: Params | None = None,
    seed: int = 0,
    num_samples: int = 8,
    count: LawCount | None = None,
) -> LawCheck:
    """Check closed-form laws against the criterion ``⟨∇h(θ), ∇_θ f_i(x; θ)⟩ = 0`` and against the count.

    At two random θ and ``num_samples`` fresh inputs (other than the counter's),
    every entry h of every law (a matrix-valued law contributes each entry) gets
    the relative residual ``max_i,x |⟨∇h, ∇f_i(x)⟩| / (‖∇h‖ ‖∇f_i(x)‖)``;
    ``independent`` is the rank of the stacked, normalized ∇h (largest over
    the θ: functional independence is a generic rank). ``complete`` means
    residuals ≤ ``RESIDUAL_TOL`` and ``independent`` equals the (conclusive)
    :func:`count_laws` result, computed here unless ``count`` is given.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> toy = ToyProduct(a=1.0, b=2.0)
    >>> check_laws(toy, {"a²−b²": lambda p: p["a"] ** 2 - p["b"] ** 2}, (1,)).complete
    True
    >>> check_laws(toy, {"a²+b²": lambda p: p["a"] ** 2 + p["b"] ** 2}, (1,)).max_residual > 0.1
    True
    """
    problem = _problem(model, params)
    count = count if count is not None else count_laws(model, input_shape, inputs=inputs, params=params, seed=seed)
    h = _law_entries(laws, problem)
    residuals = dict.fromkeys(laws, 0.0)
    independent = 0
    for point in range(NUM_POINTS if laws else 0):  # no laws (e.g. a GELU FFN): nothing to check, 0 independent
        gen = torch.Generator().manual_seed(1_000_003 * seed + 7919 + point)  # not the counter's θ and inputs
        theta = problem.random_theta(gen)
        # standard-normal inputs: where a softmax saturates, ∇f_i is round-off and so is its cosine with ∇h; a
        # law that only inputs of other scales break (a cap) is caught by the count, drawn over six decades
        x = _sample_inputs(input_shape, inputs, num_samples, gen, spread=False)
        _checked_outputs(problem, theta, x)
        grad_f = jacrev(problem.outputs(x))(theta)  # (S·out, D)
        grad_h = jacrev(h)(theta)  # (L, D)
        norms_h = grad_h.norm(dim=1)
        varying = norms_h > CUT * norms_h.max().clamp_min(torch.finfo(torch.float64).tiny)  # constants carry no law
        cosines = (grad_h @ grad_f.T).abs() / (norms_h[:, None] * grad_f.norm(dim=1)[None, :]).clamp_min(1e-300)
        per_entry = torch.where(varying, cosines.max(dim=1).values, torch.zeros_like(norms_h))
        for name, part in zip(laws, torch.split(per_entry, _law_sizes(laws, problem, theta))):
            residuals[name] = max(residuals[name], float(part.max()))
        if varying.any():
            s = torch.linalg.svdvals(grad_h[varying] / norms_h[varying, None])
            independent = max(independent, int((s > CUT * s[0]).sum()))
    max_residual = max(residuals.values(), default=0.0)
    complete = count.conclusive and independent == count.num_laws and max_residual <= RESIDUAL_TOL
    return LawCheck(max_residual, residuals, independent, count.num_laws, complete, count)
