"""count_laws: random θ drawn until two agree on the rank of Lie(W)(θ), guarded against what fools it.

The method and its guards are described in :mod:`conslaw_lite.counting`.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch.func import vmap

from conslaw_lite.counting import saturation
from conslaw_lite.counting.budget import Estimate, TooLarge, check_fits, estimate, estimate_complement, resolve_device
from conslaw_lite.counting.complement import Buffers, complement_rank
from conslaw_lite.counting.covering import PROFILES, covering_patterns, log_uniform, theta_apart
from conslaw_lite.counting.embedding_rows import warn_padding_rows, warn_unread_rows
from conslaw_lite.counting.exact_ops import exact_derivatives, quiet_vmap
from conslaw_lite.counting.lie_rank import (
    FIRST_CHUNK,
    GAP,
    MAX_DEPTH,
    ROUNDOFF,
    SPECTRUM_MAX_D,
    STACK_MAX_D,
    Rank,
    derivative_mismatch,
    gradient_field,
    lie_rank,
    two_gaps,
)
from conslaw_lite.counting.module_checks import PROBE_SAMPLES, check_countable
from conslaw_lite.counting.problem import (
    INPUT_DECADES,
    Field,
    Model,
    Problem,
    balanced_inputs,
    checked_outputs,
    output_names,
    problem_of,
    sample_inputs,
    transformable,
)
from conslaw_lite.counting.progress import Progress, wanted
from conslaw_lite.counting.sample_sizes import num_inputs, output_entries
from conslaw_lite.counting.saturation import MIN_FACTOR, frozen_error, linear_units, too_few_moving, zeros_everywhere
from conslaw_lite.counting.strata import Stratum, activation_pattern, forced_patterns, kinked_calls, parameter_pieces
from conslaw_lite.counting.training_field import check_training_field
from conslaw_lite.counting.unseen_kinks import POINTS, Kinks, one_piece, too_few, unpaired, unseen_kinks, weight_pieces
from conslaw_lite.counting.windows import aimer, windows
from conslaw_lite.laws import Params
from conslaw_lite.null_space import gap
from conslaw_lite.seeding import Stream, generator
from conslaw_lite.time_limit import time_limit

NUM_POINTS = 2  # random θ that must agree
PIECEWISE_SAMPLES = 16  # times more inputs for a ReLU model at a given θ: W(θ) needs inputs in each small region
# Where the rank reaches D (nothing dropped, so the gap test says nothing), the smallest kept direction must stand
# this far above the derivatives' own round-off, measured at each θ by how much two ways of computing D²f, D³f
# differ: about 1e-15 in float64, 1e-8 where the forward casts to float32, whose rounding otherwise fills every law
# direction (a ReLU net counted N = 0 instead of 3, nothing dropped).
NOISE_MARGIN = 100.0
DERIVATIVE_TOL = 1e-6  # relative disagreement of two ways of computing D²f, D³f that flags a wrong derivative
SATURATION_PROBE = 64  # inputs on which a coordinate with exactly zero gradient makes a θ suspect (_probe_outputs)
CONFIRM_DRAWS = 2  # more θ drawn to confirm the highest of two ranks that disagree (_confirm_highest)
MAX_DRAWS = 16  # random θ tried for NUM_POINTS where the output moves with θ
COMPLEMENT_MIN_D = STACK_MAX_D + 1  # from here on the rank is found through its complement (_memory_plan)
PATTERN_DRAWS = 256  # random θ' whose activation patterns a ReLU model's inputs take (covering.covering_patterns)
WIDEN = 3  # decades each way that each width of θ' adds to INPUT_DECADES
WIDEN_ROUNDS = 3  # up to θ' 10¹² times the model's scale: a cap at 10⁶ behind a layer initialized at 10⁻⁶


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
    found dead or always active there, with its rank). ``estimated``: the memory and time
    :mod:`conslaw_lite.counting.budget` estimated before the count started.
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
    estimated: Estimate | None = field(default=None, repr=False)  # memory and time estimated before starting
    counted: str = field(default="", repr=False)  # the model and input shape counted (Problem.key)
    outputs: tuple[str, ...] = ()  # the tensors a module returns, where several: the laws keep every one
    near_given: bool = False  # counted near the θ given with at=: the laws there, not those of random θ

    @property
    def gap(self) -> float:
        """``sigma_kept / sigma_dropped`` (infinite when nothing was dropped)."""
        return gap(self.sigma_kept, self.sigma_dropped)


def _zero_gradient(f: Field, theta: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The coordinates (D,) of θ that ``FIRST_CHUNK`` random ``∇_θ⟨a, f⟩`` leave exactly zero."""
    a = torch.randn(FIRST_CHUNK, f(theta).numel(), generator=gen, dtype=torch.float64).to(theta.device)
    return (vmap(lambda a: gradient_field(f, a)(theta))(a) == 0).all(dim=0)


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
    pieces: tuple[tuple[int, ...], ...] = ()  # the pieces of each piecewise call of the weights alone (at random θ)
    linear: bool = False  # a softplus unit past torch's threshold on every input (saturation.linear_units), or a
    # unit of an unseen kink on one piece (unseen_kinks.one_piece)


def _draw(
    problem: Problem,
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
    (:func:`conslaw_lite.counting.covering.covering_patterns`), or with its own, on ``PIECEWISE_SAMPLES``
    times more inputs (so that small activation regions are met): at a given θ, and where a
    ReLU acts on a tensor without the inputs' batch (its pattern cannot be paired with an input).
    """
    gen = generator(seed, Stream.THETA_DRAWS, index)
    theta = problem.random_theta(gen, factor, standard) if at is None else at
    forward = lambda t, x: problem.apply(problem.unflatten(t), x)  # noqa: E731
    probe = problem.to_device(sample_inputs(input_shape, inputs, 1, gen))
    n_out_one = checked_outputs(problem, theta, probe).numel() // max(len(probe), 1)
    batch = num_samples or num_inputs(problem, theta, input_shape, inputs, n_out_one)
    calls, per_input = kinked_calls(lambda x: forward(theta, x), probe)
    own = calls > 0 and (at is not None or not per_input)  # ranked with the patterns θ realizes itself
    if own and num_samples is None:
        batch *= PIECEWISE_SAMPLES
    x = problem.to_device(sample_inputs(input_shape, inputs, batch, gen))
    x, weights, n_out = balanced_inputs(problem, theta, x)
    f, patterns, stratum, pieces = problem.outputs(x, weights), "", Stratum(index), ()
    if calls and not own:
        x, on_pieces = realizable_inputs(problem, theta, x, gen, batch)
        x, weights, n_out = balanced_inputs(on_pieces, theta, x)
        f, patterns = on_pieces.outputs(x, weights), "realizable"
    elif own:
        tracked = theta.detach().requires_grad_()  # the pattern asks which units reach the output
        dead, linear, _ = activation_pattern(lambda: forward(tracked, x), len(x), problem.module)
        stratum, patterns = Stratum(index, dead, linear), "at θ"
        pieces = parameter_pieces(lambda inputs: forward(tracked, inputs), x) if at is None else ()
    if _zero_gradient(f, theta, gen).all():
        return _Draw(theta, f, n_out, gen, replace(stratum, constant=True), patterns, None, factor, standard)
    zero = _zero_gradient(_probe_outputs(problem, x, weights) if not patterns else f, theta, gen)
    if patterns == "at θ":  # a dead unit's weights: laws near this θ (strata), not saturation
        zero = problem.whole_tensors(zero)
    if bool(zero.any()):
        zero = zero & ~problem.unread(theta, x[:1])
    if bool(zero.all()):
        return _Draw(theta, f, n_out, gen, replace(stratum, constant=True), patterns, None, factor, standard)
    zero = zero if bool(zero.any()) else None
    linear = at is None and linear_units(lambda: forward(theta, x))
    linear = linear or bool(at is None and problem.unseen_kinks and one_piece(forward, theta, x))
    return _Draw(theta, f, n_out, gen, stratum, patterns, zero, factor, standard, pieces, linear)


def realizable_inputs(
    problem: Problem, theta: torch.Tensor, x: torch.Tensor, gen: torch.Generator, rows: int = 0
) -> tuple[torch.Tensor, Problem]:
    """The inputs, and the model with each input's piecewise units on the pieces a random θ' puts them on; fewer
    than ``rows`` inputs (the user's own) are repeated to ``rows``, each copy under its own θ' (8 inputs of a
    4-3-3-2 ReLU MLP, one pattern each, counted 7 to 10 laws instead of 6).

    ``PATTERN_DRAWS`` θ' (:func:`.covering.covering_patterns`): half scale the model by ``10^u``, u uniform in
    ``INPUT_DECADES`` (half of these aimed into the windows of clamps that exclude 0 instead, :mod:`.windows`), the
    others scale its tensors apart (:func:`.covering.theta_apart`) over ``INPUT_DECADES`` widened by ``WIDEN``
    decades each way, 1 to ``WIDEN_ROUNDS`` times. Any θ' will do (a law holds at every θ); behind a norm the inputs'
    scale cannot reach a cap, θ' over six decades do (relu6 after an RMSNorm at nn.Linear's scale), and a first
    layer at 10⁻⁶ needs more (its relu6 counted 6 laws of relu, not 0). An input whose outputs overflow at θ on its
    pieces is left out, and so is one that puts an ELU unit on its exponential piece where its input at θ is above
    ``EXP_CONTINUATION`` (an exp the model itself never computes, whose brackets overflow).
    """
    forward = lambda t, inputs: problem.apply(problem.unflatten(t), inputs)  # noqa: E731
    if 0 < len(x) < rows:
        x = x.repeat(math.ceil(rows / len(x)), *[1] * (x.dim() - 1))[:rows]
    found = windows(problem, theta, x[:1])  # θ's reading order, and its clamps of windows away from 0
    order = found.complete()

    def theta_at(r: int, j: int) -> torch.Tensor:
        decades = (INPUT_DECADES[0] - WIDEN * r, INPUT_DECADES[1] + WIDEN * r)
        if r == 0:
            return problem.random_theta(gen, 10.0 ** log_uniform(gen, decades))
        return theta_apart(problem, gen, decades, j % PROFILES, order)

    aim = aimer(problem, found, lambda: theta_at(0, 0), gen)  # None without such windows: nothing changes
    patterns = covering_patterns(forward, theta_at, x, min(PATTERN_DRAWS, len(x)), WIDEN_ROUNDS, aim)
    with torch.no_grad(), forced_patterns(patterns) as forced:
        rows = forward(theta, x).reshape(len(x), -1)
    kept = torch.isfinite(rows).all(dim=1) & ~forced.far.to(rows.device)
    if not bool(kept.all()):
        x, patterns = x[kept], [m[kept] for m in patterns]
    return x, _on_pieces(problem, patterns)


def outputs_over_pieces(
    problem: Problem, theta: torch.Tensor, x: torch.Tensor, gen: torch.Generator, rows: int = 0
) -> Field:
    """θ ↦ the outputs on ``x``: those of :func:`realizable_inputs` (on ``rows`` inputs at least) where the model
    applies piecewise units per input, the plain outputs otherwise (for :func:`~conslaw_lite.counting.check_laws`
    and :func:`~conslaw_lite.find_laws`: a law of ``relu`` that ``relu6``'s cap breaks fails there as in the count)."""
    forward = lambda inputs: problem.apply(problem.unflatten(theta), inputs)  # noqa: E731
    calls, per_input = kinked_calls(forward, x)
    if not (calls and per_input):
        return problem.outputs(x)
    x, on_pieces = realizable_inputs(problem, theta, x, gen, rows)
    return on_pieces.outputs(x)


def _probe_outputs(problem: Problem, x: torch.Tensor, weights: torch.Tensor | None) -> Field:
    """The outputs on the first ``SATURATION_PROBE`` inputs: where a softmax is saturated, a coordinate's gradient
    can be nonzero on a few inputs of thousands (near-ties) and zero on all the others, which hides its laws."""
    n = min(SATURATION_PROBE, len(x))
    return problem.outputs(x[:n], None if weights is None else weights[:n])


def _on_pieces(problem: Problem, patterns: list[torch.Tensor]) -> Problem:
    """The model with every piecewise unit applied on its recorded pieces (:func:`.strata.forced_patterns`), on
    the inputs the patterns were recorded for."""

    def apply(p: Params, x: torch.Tensor) -> torch.Tensor:
        with forced_patterns(patterns):
            return problem.apply(p, x)

    return replace(problem, apply=apply)


@dataclass(frozen=True)
class _Run:
    """How the ranks are computed: with a copy of the vectors for their spectrum or not, or through the complement
    (:mod:`.complement`, from ``COMPLEMENT_MIN_D`` parameters on, in buffers shared by the θ), and the progress bar."""

    keep_stack: bool = True
    complement: bool = False
    replay: bool = False  # the complement's gradients recomputed at each use, not stored (Buffers)
    bar: Progress | None = None
    buffers: Buffers | None = None


def _rank_or_reason(problem: Problem, d: _Draw, seed: int, k: int, run: _Run = _Run()) -> Rank | str:
    """:func:`lie_rank` at the draw's θ, or why not: torch's derivatives of the model fail the check there."""
    check_gen = generator(seed, Stream.DERIVATIVE_CHECK, k)  # leaves d.gen as it was
    directions = [problem.random_theta(check_gen, d.factor, d.standard) for _ in range(3)]
    mismatch = derivative_mismatch(d.f, d.theta, directions, d.n_out, check_gen)
    if mismatch > DERIVATIVE_TOL:
        return (
            f"torch's higher derivatives of this model disagree: two ways of computing D²f, D³f differ by "
            f"{mismatch:.1e} (relative): an op torch differentiates wrongly (conslaw_lite.counting.exact_ops), or "
            "round-off of a quotient that is constant (a top-1 gate renormalised, w / w.sum(): write the constant)"
        )
    report = None if run.bar is None else run.bar.point(k, d.n_out)
    if run.complement:
        rank = complement_rank(d.f, d.theta, d.n_out, d.gen, problem.sizes, report, run.buffers)
    else:
        rank = lie_rank(d.f, d.theta, d.n_out, d.gen, problem.sizes, run.keep_stack, report)
    return replace(rank, noise=mismatch)


def _ranks_at_points(
    problem: Problem,
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
    seed: int,
    num_samples: int | None,
    at: torch.Tensor | None = None,
    run: _Run = _Run(),
) -> tuple[list[tuple[_Draw, Rank]], list[_Draw], str]:
    """Ranks at ``NUM_POINTS`` θ of the seed's sequence (``at``: that θ alone; :data:`.unseen_kinks.POINTS` where a
    kink of θ is unseen, :mod:`.unseen_kinks`), every θ drawn, and why no ranks.

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
    renormalizes to exactly 1, a tensor the output does not read), ranked at the smallest θ and, where they are the
    same at the model's scale, at the first θ too (the higher rank is confirmed); zeros that move from θ to θ are
    an error naming their tensors. So is a θ where a softplus unit is past torch's threshold on every input
    (:mod:`.saturation`): there still at ``MIN_FACTOR``, no count (:func:`.saturation.too_few_moving`). Behind a
    kink the counter does not see, the zeros of every θ drawn are structural (:func:`.saturation.zeros_at_every_scale`),
    and up to ``MAX_DRAWS`` more θ are drawn at the model's scale, ranked where they have those zeros and no other.
    """
    structural, points, kinks, reason = None, 1, Kinks([], [], []), ""
    if at is not None:
        drawn = [_draw(problem, 0, input_shape, inputs, seed, num_samples, at)]
        if drawn[0].stratum.constant:
            raise ValueError("the output's gradient in θ is zero at the given θ, on every sampled input")
    else:
        kinks = unseen_kinks(problem, input_shape, inputs, seed)
        problem = replace(problem, unseen_kinks=tuple(kinks.per_input))
        drawn, factor, points = [], 1.0, POINTS if problem.unseen_kinks else NUM_POINTS
        for index in range(MAX_DRAWS):
            standard = sum(_usable(d) for d in drawn) == 1
            drawn.append(_draw(problem, index, input_shape, inputs, seed, num_samples, None, factor, standard))
            if drawn[-1].zero is not None or drawn[-1].linear:
                factor = max(factor / 10, MIN_FACTOR)
            elif drawn[-1].stratum.constant:  # too small for the output to move (a threshold): back up
                factor = min(factor * 10, 1.0)
            if sum(_usable(d) for d in drawn) == points:
                break
        else:
            if all(d.stratum.constant for d in drawn):
                raise ValueError(
                    f"the output's gradient in θ is zero at all {MAX_DRAWS} random θ tried, on every sampled "
                    "input: the model's output does not depend on θ"
                )
            if problem.unseen_kinks:  # a unit on one piece, or zeros: θ at the model's scale again if structural
                structural = saturation.zeros_at_every_scale(drawn, NUM_POINTS)
                for index in range(MAX_DRAWS, 2 * MAX_DRAWS if structural is not None else MAX_DRAWS):
                    standard = sum(_usable(d) for d in drawn) == 1
                    d = _draw(problem, index, input_shape, inputs, seed, num_samples, None, 1.0, standard)
                    drawn.append(saturation.lifted(d, structural))
                    if sum(_usable(d) for d in drawn) == points:
                        break
                else:
                    return [], drawn, too_few(problem.unseen_kinks, sum(_usable(d) for d in drawn), len(drawn))
            elif sum(not d.stratum.constant and not d.linear for d in drawn) < NUM_POINTS:
                flat = sum(d.stratum.constant for d in drawn)
                return [], drawn, too_few_moving(any(d.linear for d in drawn), flat, MAX_DRAWS)
            elif sum(_usable(d) for d in drawn) < NUM_POINTS:
                error = frozen_error(problem, drawn, NUM_POINTS)
                if error is not None:
                    raise error
                first = zeros_everywhere(drawn)
                drawn = [replace(d, zero=None) if d.factor <= MIN_FACTOR or d is first else d for d in drawn]
                structural = first.zero if first is not None else None
    results: list[tuple[_Draw, Rank]] = []
    for d in [d for d in drawn if _usable(d) or at is not None][:points]:
        rank = _rank_or_reason(problem, d, seed, len(results), run)
        if isinstance(rank, str):
            return [], drawn, rank
        results.append((d, rank))
    if at is None and len({r.rank for _, r in results}) > 1:
        results, drawn, reason = _confirm_highest(
            problem, input_shape, inputs, seed, num_samples, results, drawn, run, structural
        )
    return results, drawn, reason or unpaired(kinks)


def _confirm_highest(problem, input_shape, inputs, seed, num_samples, results, drawn, run, structural=None):
    """Two θ that agree on the highest rank met, or the disagreement (:func:`_ranks_at_points`).

    In exact arithmetic no θ has a larger dim Lie(W)(θ) than a generic one: a lower rank is a θ
    where something saturates (a GELU acting as a ReLU, a one-hot softmax). Up to ``CONFIRM_DRAWS``
    more θ are drawn at the scale of the one with the highest rank; the first that reaches it (with
    its own gap) confirms it, and the two are the result.
    """
    best = max(results, key=lambda dr: dr[1].rank)
    met = [dr for dr in results if dr[1].rank == best[1].rank]
    if len(met) > 1:  # of more than two θ ranked, two already agree on it
        return met[:2], drawn, ""
    for index in range(len(drawn), len(drawn) + CONFIRM_DRAWS):
        d = _draw(problem, index, input_shape, inputs, seed, num_samples, None, best[0].factor, best[0].standard)
        d = saturation.lifted(d, structural)  # the zeros of every scale (zeros_everywhere)
        drawn.append(d)
        if not _usable(d):
            continue
        rank = _rank_or_reason(problem, d, seed, len(results), run)
        if isinstance(rank, str):
            return [], drawn, rank
        results.append((d, rank))
        if rank.rank == best[1].rank:
            return [best, (d, rank)], drawn, ""
    return results, drawn, ""


def _usable(d: _Draw) -> bool:
    """The output moves with θ at this draw, every coordinate's gradient is nonzero on some input, and no softplus
    unit is linear on every input."""
    return not d.stratum.constant and d.zero is None and not d.linear


def _strata(results: list[tuple[_Draw, Rank]], drawn: list[_Draw]) -> tuple[Stratum, ...]:
    """The θ passed over (output constant there) and, at a given θ of a ReLU model, its pattern with the rank."""
    ranks = {d.stratum.draw: r.rank for d, r in results}
    return tuple(
        replace(d.stratum, rank=ranks.get(d.stratum.draw)) for d in drawn if d.stratum.constant or d.patterns == "at θ"
    )


def _memory_plan(D: int, device: torch.device, max_memory: float | None) -> tuple[_Run, Estimate]:
    """How the ranks are computed (:class:`_Run`, without its bar and buffers) and the estimate; :class:`TooLarge`
    when it does not fit.

    Up to ``SPECTRUM_MAX_D`` parameters the spectrum is the evidence and always kept. Up to ``STACK_MAX_D``
    it is the fallback where the residuals show no gap: kept when it fits. Beyond, the rank is found through
    its complement (:mod:`.complement`), with bounds on the gradients' spectrum for evidence: the gradients and their
    LU, or where both do not fit the LU alone (``replay``: the gradients recomputed at each use). Refused, the
    estimate named is the LU alone's.
    """
    outputs = output_entries(D)
    if D >= COMPLEMENT_MIN_D:  # the LU alone needs the basis's memory, and takes a fifth of its flops and less
        need = estimate_complement(D, outputs, device, NUM_POINTS)
        try:
            check_fits(need, D, device, max_memory)
            return _Run(keep_stack=False, complement=True), need
        except TooLarge:
            need = estimate_complement(D, outputs, device, NUM_POINTS, replay=True)
            check_fits(need, D, device, max_memory)
            return _Run(keep_stack=False, complement=True, replay=True), need
    without = estimate(D, outputs, False, device, NUM_POINTS)
    with_stack = estimate(D, outputs, True, device, NUM_POINTS)
    if D <= SPECTRUM_MAX_D:
        check_fits(with_stack, D, device, max_memory)
        return _Run(), with_stack
    check_fits(without, D, device, max_memory)
    try:
        check_fits(with_stack, D, device, max_memory)
        return _Run(), without  # the spectrum's time only counts where the residuals show no gap
    except TooLarge:
        return _Run(keep_stack=False), without


@quiet_vmap()  # torch's note on vmap's speed, at each of the search's many calls
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
    device: str | torch.device | None = None,
    max_memory: float | None = None,
    progress: bool | None = None,
    seconds: float | None = None,
) -> LawCount:
    """The number of conservation laws, ``N = D − dim Lie(W)(θ)``, computed at random θ.

    ``model`` is an ``nn.Module`` called as ``model(x)`` with ``x`` of shape
    ``(S, *input_shape)``, or a function ``f(params, x)`` with ``params`` a dict
    of tensors (their names and shapes; values set the scale of the random θ).
    Inputs are standard normal, ``S = num_samples`` of them (default: enough
    that S·out ≥ max(1.25 D, 4096), at most 512), unless ``inputs`` are given. See the
    module docstring for the method, the evidence and when it answers *inconclusive*.
    ``exact_ops=False`` differentiates torch's fused kernels as they are (only to
    show why :func:`conslaw_lite.counting.exact_ops.exact_derivatives` is needed).

    *ReLU units* (:mod:`conslaw_lite.counting.strata`): the count is that of the laws of the
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
    (:func:`conslaw_lite.counting.module_checks.check_countable`): one that computes in float32, float16 or
    bfloat16, is random (dropout in train mode), computes otherwise in train than in eval mode
    (BatchNorm), couples the inputs of a batch, or has no derivative in θ (``round``).

    *Size.* The rank is found in a basis of up to D × D float64 entries: before anything large is
    allocated, the memory and time are estimated (:mod:`conslaw_lite.counting.budget`) and a count that
    would not fit in the memory free on ``device`` (or in ``max_memory`` bytes) is refused at once
    (:class:`~conslaw_lite.counting.budget.TooLarge`, a ``MemoryError`` and a ``ValueError``, naming the
    estimate). ``device="cuda"`` counts on a GPU, in float64 too; θ and the inputs are drawn on the
    CPU, so a seed gives the same ones on every device (through the complement, the random gradients are drawn on
    the device, from a seed drawn on the CPU). ``progress``: a bar on stderr (rank so
    far, bracket depth, outputs) for a count over a few seconds; by default when stderr is a terminal.
    ``seconds``: a limit on the count's time; past it the count stops within one chunk of brackets and raises
    :class:`~conslaw_lite.time_limit.OutOfTime` (a ``TimeoutError``).

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
    with time_limit(seconds):  # stops at a step of the ranks (time_limit)
        device = resolve_device(device)
        problem = problem_of(model, params)
        D, counted = problem.num_params, problem.key(input_shape, inputs)
        plan, need = _memory_plan(D, device, max_memory)
        probe_gen = generator(seed, Stream.SATURATION_PROBE)  # not a stream the count draws from
        probe_theta = problem.random_theta(probe_gen)
        probe = sample_inputs(input_shape, inputs, PROBE_SAMPLES, probe_gen)
        checked_outputs(problem, probe_theta, probe[:PROBE_SAMPLES])
        outputs = output_names(problem.module, probe[:PROBE_SAMPLES])
        checked_at = problem.unflatten(probe_theta if at is None else problem.flatten(at))  # at=: the user's own θ
        check_countable(problem.apply, checked_at, probe[:PROBE_SAMPLES], problem.module, random_theta=at is None)
        # at random θ, even with at=: the user's own θ may put a unit exactly on its kink (zero biases, zero inputs)
        check_training_field(problem.apply, problem.unflatten(probe_theta), probe[:PROBE_SAMPLES])
        warn_unread_rows(problem.module, inputs, problem.apply, problem.unflatten(probe_theta))
        warn_padding_rows(problem.module)
        problem = problem.on(device)
        theta = None if at is None else problem.flatten(at)
        bar = Progress(D, need, wanted(progress))
        try:
            with transformable(), exact_derivatives() if exact_ops else nullcontext():
                run = replace(plan, bar=bar, buffers=Buffers(D, device, plan.replay) if plan.complement else None)
                results, drawn, reason = _ranks_at_points(problem, input_shape, inputs, seed, num_samples, theta, run)
        finally:
            bar.close()
    strata = _strata(results, drawn)
    patterns = drawn[-1].patterns
    seen = dict(patterns=patterns, strata=strata, estimated=need, counted=counted, outputs=outputs,
                near_given=at is not None)  # fmt: skip
    if not results:
        return LawCount(D, None, None, 0, 0.0, 0.0, time.perf_counter() - start, False, reason, **seen)
    ranks = [r for _, r in results]
    if len({r.rank for r in ranks}) > 1:
        reason = reason or f"the random θ disagree: ranks {sorted({r.rank for r in ranks})}"
    reason = reason or weight_pieces({d.pieces for d, _ in results if d.pieces})
    kept, dropped = min(r.sigma_kept for r in ranks), max(r.sigma_dropped for r in ranks)
    if not reason and not all(r.saturated for r in ranks):
        reason = f"the rank was still growing at bracket depth {MAX_DEPTH}"
    if not reason and not kept >= GAP * dropped:  # NaN bounds too
        reason = f"no clear gap: smallest kept singular value {kept:.2e}, largest dropped {dropped:.2e}"
    noise = max(max(r.noise for r in ranks), ROUNDOFF)
    if not reason and dropped == 0 and kept < NOISE_MARGIN * noise:  # nothing dropped: the gap test is vacuous
        reason = (
            f"the smallest kept singular value {kept:.2e} is within {NOISE_MARGIN:g}× of the derivatives' round-off "
            f"{noise:.1e} (two ways of computing D²f, D³f differ by that much): the directions it keeps may be "
            "round-off; is part of the forward computed in lower precision (a cast to float32)?"
        )
    reason = reason or two_gaps(ranks, D, NOISE_MARGIN * ROUNDOFF)
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
        evidence=ranks[0].evidence if len({r.evidence for r in ranks}) == 1 else "residuals",
        **seen,
    )
