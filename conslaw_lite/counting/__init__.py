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
  spectrum is computed after all, up to ``STACK_MAX_D`` = 8,192 parameters.
* Beyond ``STACK_MAX_D`` the rank is found through its orthogonal complement (:mod:`.complement`), the
  laws' own subspace, small when N is: D random gradients A (D × D) have null space Z, found with one
  LU of ``A + B C`` (B, C random of a width above N); brackets of depth k only shrink Z. Its evidence
  is two bounds on A's spectrum, ``σ_{D−N+1}(A) ≤ ‖A Z‖`` and a lower bound on ``σ_{D−N}(A)`` from
  power steps on a matrix equal to A off Z, and the deeper depths' residuals. A ReLU MLP 50-200-50
  (D = 20,000): N = 200 in 107 s on 2 cores, where the basis took 784 s.

θ is drawn at random, each parameter tensor standard normal times the root mean
square of the model's own tensor (of all its parameters where that tensor is
zero, e.g. a bias initialized to 0): the model's scale, but a generic point (no
accidental symmetry of an initialization); the second θ at a hundredth of that
scale. Half the inputs are standard normal, the other half are scaled by
``10^u``, u uniform in ``INPUT_DECADES`` = (−3, 3), enough of them (``MIN_OUTPUTS``)
that every unit meets every piece: a cap or threshold at any height, a softmax or
sigmoid both saturated and not. Each input's outputs are divided by their norm so
that no scale buries the others. At most 512 inputs are drawn, unless a model of few outputs would get fewer
gradient rows than parameters from them: then as many as 1.25 D rows need, within a budget of what their forward
saves for its backward (:mod:`.sample_sizes`).

**Soundness guards.** A wrong count marked conclusive is the worst failure this
counter can have, and what fooled naive sampling is guarded against by what the
forward computes, not by a list of activations: a forward in lower precision,
random, train-mode dependent or batch-coupled is refused before counting
(:mod:`conslaw_lite.counting.module_checks`); a coordinate the output reads whose gradient is
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
:func:`conslaw_lite.counting.exact_ops.exact_derivatives`, which routes those ops to
elementary formulas, and checks, at each θ, that ``⟨a, D²f[u, v]⟩`` and
``⟨a, D³f[u, v, w]⟩`` agree when computed forward-only and as the brackets
compute them (forward over reverse). If they do not (an op that is not routed),
the result is *inconclusive*, never a wrong count.

Piecewise-linear models (ReLU) are counted for the whole parameter space: a law
holds at every θ, so it is conserved by the fields of every activation pattern
some θ realizes on some input (it is analytic, and conserved on the open set of θ
where that pattern holds), and the counter takes the fields with such patterns
(:mod:`conslaw_lite.counting.strata`), drawn at θ' whose layers are scaled apart, so that a layer on its cap
meets the next ones in their middle pieces (:mod:`.covering`). ``at=`` counts near one θ, with its own patterns,
where a dead unit adds laws. An output whose gradient in θ vanishes at a drawn θ
(a dead layer) is passed over. A kink those patterns do not see (``torch.ops.aten.relu``, a
ReLU spelled with ``amax``, a fused kernel) is found at the dispatcher, and four θ without a dead
unit are ranked instead of two (:mod:`.unseen_kinks`); one of the weights alone (the clamp of ‖w‖ inside
``F.normalize(W, eps=...)``), like a clamp of a weight, gives no count at random θ.

**Size.** The basis of Lie(W)(θ) has up to D rows of D float64 entries (8 D² bytes: 3.2 GB at
D = 20,000) and projecting on it costs O(D³) per θ; above ``STACK_MAX_D`` the complement needs the
gradients and their LU instead (16 D² bytes: 6.4 GB at D = 20,000, 40 GB at D = 50,000), or the LU alone
where both do not fit (the gradients recomputed at each use), and ⅔ D³ for the LU. Before allocating, the
counter estimates both (:mod:`.budget`) and refuses at once,
naming the estimate, a count that would not fit in the memory free (``max_memory=`` overrides);
above ``SPECTRUM_MAX_D`` it keeps no copy of the vectors unless they fit. ``device="cuda"`` runs the
same code on a GPU, in float64. A progress bar (:mod:`.progress`) shows the rank so far, the bracket
depth and the outputs.

Modules: :mod:`.problem` (the model as a function of θ, its θ and inputs), :mod:`.lie_rank` (the
rank at one θ; :mod:`.complement` above ``STACK_MAX_D``), :mod:`.count` (:func:`count_laws`: θ drawn
until the ranks agree), :mod:`.check` (:func:`check_laws`), with the guards :mod:`.module_checks`,
:mod:`.strata` (activation patterns; drawn by :mod:`.covering`), :mod:`.unseen_kinks` (the kinks they miss)
and :mod:`.exact_ops` (derivatives torch gets wrong; with :mod:`.unrolled_rnn`),
:mod:`.budget` (memory, time, device) and :mod:`.progress`. The counter imports no block family.
"""

from conslaw_lite.counting.budget import TooLarge
from conslaw_lite.counting.check import RESIDUAL_TOL, LawCheck, check_laws
from conslaw_lite.counting.count import (
    NOISE_MARGIN,
    PATTERN_DRAWS,
    PIECEWISE_SAMPLES,
    LawCount,
    count_laws,
)
from conslaw_lite.counting.lie_rank import CUT, GAP, ROUNDOFF, SPECTRUM_MAX_D, STACK_MAX_D
from conslaw_lite.counting.problem import Model

__all__ = [
    "CUT",
    "GAP",
    "NOISE_MARGIN",
    "PATTERN_DRAWS",
    "PIECEWISE_SAMPLES",
    "RESIDUAL_TOL",
    "ROUNDOFF",
    "SPECTRUM_MAX_D",
    "STACK_MAX_D",
    "TooLarge",
    "LawCheck",
    "LawCount",
    "Model",
    "check_laws",
    "count_laws",
]
