"""Check a list of laws against the count: each conserved to round-off, and how many are independent."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch.func import jacrev, jvp, vjp, vmap

from conslaw_lite.counting.count import NUM_POINTS, LawCount, count_laws, outputs_over_pieces
from conslaw_lite.counting.exact_ops import quiet_vmap
from conslaw_lite.counting.lie_rank import CUT
from conslaw_lite.counting.problem import (
    NEAR_STANDARD,
    Field,
    Model,
    Problem,
    checked_outputs,
    problem_of,
    sample_inputs,
    transformable,
)
from conslaw_lite.counting.sample_sizes import saved_by
from conslaw_lite.laws import Law, Params
from conslaw_lite.seeding import Stream, generator
from conslaw_lite.time_limit import check_time

RESIDUAL_TOL = 1e-9  # a law's relative residual |⟨∇h, ∇f_i⟩| / (‖∇h‖‖∇f_i|_h‖) at round-off
SUPPORT_FLOOR = 1e-4  # ‖∇f_i|_h‖ taken as at least this much of ‖∇f_i‖: where the gradients of the tensors h reads
# vanish (an attention's key bias, which the softmax ignores), they are round-off of the rest's, 3.5·10⁻¹⁷ of ‖∇f_i‖
# for a key bias, so the cosine of a law there stays 10⁻¹² or less; a wrong law passes only where its tensors get less
# than 10⁻¹³ of ‖∇f_i‖, against 10⁻⁹ with ‖∇f_i‖ itself
WHOLE_ENTRIES = 2**25  # law entries × D up to which ∇h is held whole (256 MiB of float64)
NORM_PROBES = 16  # Gaussian directions that estimate ‖∇h‖ where ∇h is not held (LawGradients): each is a jvp of h
# over all of θ (64 took 57 of the 84 s of a timm resnet10t's monitor, D = 4.9 M)
ROWS_BYTES = 2**28  # what the backward passes of one chunk of gradient rows may hold (256 MiB): a language model's
# 8 windows give thousands of outputs, and their backward passes all at once held more than 24 GB (a two-layer
# Mistral of d = 32, D = 20,000)


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


class LawEntries:
    """θ ↦ every entry of every law, flattened (L,); a law that fails names itself. :meth:`jacobian` takes ∇h law by
    law: one reverse pass of all entries at once would pull each of them back through every law's graph, a cost that
    grows as the square of the number of laws (617 proposed blocks of a Llama block: 80 s, against 7 s for 137).

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> h = LawEntries({"a²": lambda p: p["a"] ** 2, "b": lambda p: p["b"]}, problem_of(ToyProduct(a=1.0, b=2.0), None))
    >>> h.jacobian(torch.tensor([1.0, 2.0], dtype=torch.float64)).tolist()
    [[2.0, 0.0], [0.0, 1.0]]
    """

    def __init__(self, laws: Mapping[str, Law], problem: Problem) -> None:
        self.laws, self.problem = laws, problem

    def _entries(self, name: str, law: Law, theta: torch.Tensor) -> torch.Tensor:
        try:
            return torch.as_tensor(law(self.problem.unflatten(theta))).reshape(-1)
        except (KeyError, IndexError, RuntimeError, TypeError) as err:
            why = f"{err}{_frozen(err, self.problem)}"
            raise ValueError(f"law {name!r} cannot be evaluated on the model's parameters: {why}") from err

    def __call__(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._entries(name, law, theta) for name, law in self.laws.items()])

    def reads(self, theta: torch.Tensor) -> torch.Tensor:
        """``(L, T)``: :func:`law_reads` of θ's tensors (T: the model's parameters, in its order)."""
        return law_reads(self.laws, self.problem.unflatten(theta), list(self.problem.shapes))

    def jacobian(self, theta: torch.Tensor) -> torch.Tensor:
        """∇h (L, D), one law at a time."""
        return torch.cat(
            [
                jacrev(lambda t, name=name, law=law: self._entries(name, law, t))(theta)
                for name, law in self.laws.items()
            ]
        )


def law_reads(laws: Mapping[str, Law], params: Mapping[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    """``(L, T)``: 1 where law entry l reads tensor ``names[t]`` of ``params``, else 0; each entry reads what its law
    does, which one backward pass of the law alone finds (the tensors that get a gradient), whatever the size of θ.

    Examples
    ========
    >>> laws = {"a² − b²": lambda p: p["a"] ** 2 - p["b"] ** 2, "c": lambda p: p["c"]}
    >>> params = {n: torch.ones(2, dtype=torch.float64) for n in "abc"}
    >>> law_reads(laws, params, ["a", "b", "c"]).tolist()  # two entries a law
    [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    """
    leaves = {name: t.detach().requires_grad_() for name, t in params.items()}
    read = [leaves[name] for name in names]
    rows = []
    with torch.enable_grad():
        for law in laws.values():
            out = torch.as_tensor(law(leaves)).reshape(-1)
            grads = torch.autograd.grad(out.sum(), read, allow_unused=True) if out.requires_grad else [None] * len(read)
            row = torch.tensor([g is not None for g in grads], dtype=torch.float64)
            rows.append(row.expand(out.numel(), -1))
    return torch.cat(rows) if rows else torch.zeros(0, len(names), dtype=torch.float64)


def _frozen(err: Exception, problem: Problem) -> str:
    """Why a parameter a law reads is not in θ, when it is one of the module's with ``requires_grad=False``."""
    module = problem.module
    if not isinstance(err, KeyError) or module is None:
        return ""
    named = dict(module.named_parameters())
    if err.args[0] not in named:  # a name the module does not have: say which it has
        names = list(named)
        return f" is no parameter of the model ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
    frozen = not named[err.args[0]].requires_grad
    return " is frozen (requires_grad=False): no coordinate of θ, and gradient flow does not move it" if frozen else ""


def _law_sizes(laws: Mapping[str, Law], problem: Problem, theta: torch.Tensor):
    p = problem.unflatten(theta)
    return [torch.as_tensor(law(p)).numel() for law in laws.values()]


def cosine_residuals(
    grad_h: torch.Tensor, grad_f: torch.Tensor, sizes: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per law entry h (rows of ``grad_h``), ``max_i |⟨∇h, ∇f_i⟩| / (‖∇h‖ ‖∇f_i|_h‖)`` over the rows of ``grad_f``, and
    which entries vary (``‖∇h‖ > CUT · max``: a constant entry carries no law, its residual is 0).

    ``∇f_i|_h`` is ∇f_i on the tensors h reads (θ cut in tensors of ``sizes``; default one), at least
    ``SUPPORT_FLOOR ‖∇f_i‖``: the scale of the round-off of ``⟨∇h, ∇f_i⟩``. Against ‖∇f_i‖ itself, a wrong law on
    layers whose gradients vanish (the first of a deep MLP's) would pass, its cosine as small as they are.

    Examples
    ========
    >>> grad_h = torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])  # h₁ = a − b; h₂ constant
    >>> grad_f = torch.tensor([[1.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    >>> cosine_residuals(grad_h, grad_f)[0].tolist()
    [0.7071067690849304, 0.0]
    >>> vanishing = torch.tensor([[1e-3, 0.0, 1.0]])  # ∇f on a 1000 times below ∇f on c
    >>> round(cosine_residuals(grad_h, vanishing, sizes=[2, 1])[0][0].item(), 6)  # (a, b) and c: a − b's cosine, 1/√2
    0.707107
    >>> round(cosine_residuals(grad_h, vanishing)[0][0].item(), 6)  # θ one tensor: as small as ∇f on (a, b)
    0.000707
    """
    sizes = [grad_h.shape[1]] if sizes is None else sizes
    return _cosines(grad_h @ grad_f.T, grad_h.norm(dim=1), _norms_on_reads(_reads(grad_h, sizes), grad_f, sizes))


def _reads(grad_h: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """``(L, T)``: 1 where entry l's gradient is nonzero on tensor t (θ cut in tensors of ``sizes``), else 0."""
    return torch.stack([part.ne(0).any(dim=1) for part in grad_h.split(sizes, dim=1)], dim=1).to(grad_h.dtype)


def _norms_on_reads(reads: torch.Tensor, rows: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """``(L, rows)``: ``‖g_i|_l‖``, row i's norm on the tensors entry l reads, at least ``SUPPORT_FLOOR ‖g_i‖``."""
    per_tensor = torch.stack([torch.linalg.vector_norm(part, dim=1) for part in rows.split(sizes, dim=1)], 1).square()
    return torch.maximum((reads @ per_tensor.T).sqrt(), SUPPORT_FLOOR * per_tensor.sum(dim=1).sqrt())


def _cosines(inner: torch.Tensor, norms_h: torch.Tensor, norms_f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`cosine_residuals` from the products ``⟨∇h, ∇f_i⟩`` (L, rows), the norms of ∇h (L) and those of ∇f_i on
    what each entry reads (L, rows)."""
    varying = norms_h > CUT * norms_h.max().clamp_min(torch.finfo(torch.float64).tiny)  # constants carry no law
    cosines = inner.abs() / (norms_h[:, None] * norms_f).clamp_min(1e-300)
    return torch.where(varying, cosines.max(dim=1).values, torch.zeros_like(norms_h)), varying


class LawGradients:
    """∇h of every law entry at θ, held whole (L, D); or, where ``whole`` is False and L·D is over ``WHOLE_ENTRIES``,
    never held: a product ``⟨∇h, g⟩`` is the derivative of h along g (a jvp), and the norms are estimated from
    ``NORM_PROBES`` Gaussian directions z, ``‖∇h‖² ≈ mean ⟨∇h, z⟩²`` (a χ² of 16 degrees over 16: the norm within a
    factor 3 either way but with probability below 10⁻⁵ per entry, which moves a cosine that much, never a law's from
    round-off, 10⁻¹⁵, to the tolerance). A screen of the 2,048 rescaled units of an MLP 784-1024-1024-10
    (D = 1,863,690) would otherwise hold 30 GB of ∇h, or take 2,048 pullbacks of length D. Which of θ's tensors
    each entry reads (:attr:`reads`, for the norms of :func:`cosine_residuals`) is read off ∇h where it is held, and
    is what its law reads (:func:`law_reads`) where not.

    Examples
    ========
    >>> h = lambda t: torch.stack([t[0] ** 2 - t[1] ** 2, t[2]])
    >>> theta = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    >>> whole = LawGradients(h, theta)
    >>> whole.norms.tolist(), whole.inner(torch.eye(3, dtype=torch.float64)[:1]).flatten().tolist()
    ([4.47213595499958, 1.0], [2.0, 0.0])
    >>> never = LawGradients(h, theta, whole=False, gen=torch.Generator().manual_seed(0), whole_entries=0)
    >>> ratio = never.norms / whole.norms  # estimated: within a factor 3
    >>> first = torch.eye(3, dtype=torch.float64)[:1]  # the direction of θ₀
    >>> bool(((1 / 3 < ratio) & (ratio < 3)).all()), never.inner(first).flatten().tolist()
    (True, [2.0, 0.0])
    >>> LawGradients(h, theta, sizes=[2, 1]).reads.tolist()  # θ as (a, b) and c: h₁ reads (a, b), h₂ reads c
    [[1.0, 0.0], [0.0, 1.0]]
    """

    def __init__(
        self,
        h: Callable,
        theta: torch.Tensor,
        whole: bool = True,
        gen: torch.Generator | None = None,
        whole_entries: int | None = None,
        sizes: list[int] | None = None,
        reads: torch.Tensor | None = None,
    ) -> None:
        """``sizes``: θ's tensors, on those of which each entry reads its cosine's ‖∇f_i‖ is taken (default: θ one
        tensor); ``reads``: which (:func:`law_reads`), where ∇h is not held (default: a :class:`LawEntries`' own,
        else every tensor)."""
        self.h, self.theta = h, theta
        self.sizes = [theta.numel()] if sizes is None else sizes
        most = WHOLE_ENTRIES if whole_entries is None else whole_entries
        held = whole or h(theta).numel() * theta.numel() <= most
        jacobian = h.jacobian if isinstance(h, LawEntries) else jacrev(h)
        self.whole = jacobian(theta) if held else None
        self.norms = self.whole.norm(dim=1) if held else self._estimated_norms(gen)
        if held:
            self.reads = _reads(self.whole, self.sizes)
        elif reads is None and isinstance(h, LawEntries):
            self.reads = h.reads(theta)
        else:
            self.reads = torch.ones(len(self.norms), len(self.sizes), dtype=theta.dtype) if reads is None else reads
        self.reads = self.reads.to(theta.device)

    def _estimated_norms(self, gen: torch.Generator | None) -> torch.Tensor:
        z = torch.randn(NORM_PROBES, self.theta.numel(), generator=gen, dtype=self.theta.dtype).to(self.theta.device)
        squares = sum(self.inner(part).square().sum(1) for part in z.split(_at_once(self.theta)))
        return (squares / NORM_PROBES).sqrt()

    def inner(self, rows: torch.Tensor) -> torch.Tensor:
        """``⟨∇h_l, g_i⟩`` for the rows g_i of ``rows``: (L, rows)."""
        if self.whole is not None:
            return self.whole @ rows.T
        check_time()
        with quiet_vmap():
            return vmap(lambda g: jvp(self.h, (self.theta,), (g,))[1])(rows).T

    def cosines(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`cosine_residuals` of these ∇h and ``rows``."""
        return _cosines(self.inner(rows), self.norms, _norms_on_reads(self.reads, rows, self.sizes))


def _at_once(theta: torch.Tensor, saved: int = 0) -> int:
    """How many D-vectors one batched pass may compute within ``ROWS_BYTES``: each holds two of length D and what
    the forward ``saved`` for its backward."""
    return max(1, ROWS_BYTES // (saved + 2 * theta.numel() * theta.element_size()))


def gradient_rows(
    f: Field, theta: torch.Tensor, most: int | None = None, gen: torch.Generator | None = None
) -> Iterator[torch.Tensor]:
    """∇f_i(θ) for every output i of ``f`` (or ``most`` of them drawn at random, in order, where there are more), as
    chunks of rows (chunk, D): one forward, then the pullbacks of one-hot cotangents, as many at once as keep their
    backward passes within ``ROWS_BYTES`` (each holds about what the forward saved, and its D-vector).

    Examples
    ========
    >>> f = lambda t: torch.stack([t[0] * t[1], t[0] ** 2, t[1]])
    >>> torch.cat(list(gradient_rows(f, torch.tensor([1.0, 2.0])))).tolist()  # the Jacobian, row by row
    [[2.0, 1.0], [2.0, 0.0], [0.0, 1.0]]
    """
    with transformable():
        saved = saved_by(lambda: f(theta.detach().requires_grad_()))  # torch.func's vjp takes no saved-tensor hooks
        out, pullback = vjp(f, theta)
    n = out.numel()
    drawn = most is not None and n > most
    outputs = torch.randperm(n, generator=gen)[:most].sort().values if drawn else torch.arange(n)
    chunk = min(len(outputs), _at_once(theta, saved))
    for picked in outputs.split(chunk):
        check_time()
        one_hot = torch.zeros(len(picked), n, dtype=out.dtype, device=out.device)
        one_hot[torch.arange(len(picked)), picked] = 1.0
        with quiet_vmap():  # the module's own kernels (check_laws reads no exact copy): sdpa's backward has no rule
            rows = vmap(pullback)(one_hot.reshape(len(picked), *out.shape))[0]
        yield rows


@quiet_vmap()  # torch's note on vmap's speed, at each of the search's many calls
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
    problem = problem_of(model, params)
    count = count if count is not None else count_laws(model, input_shape, inputs=inputs, params=params, seed=seed)
    check_count_of(count, problem, input_shape, inputs)
    residuals, independent = law_residuals(problem, laws, input_shape, inputs, seed, num_samples)
    max_residual = max(residuals.values(), default=0.0)
    complete = count.conclusive and independent == count.num_laws and max_residual <= RESIDUAL_TOL
    return LawCheck(max_residual, residuals, independent, count.num_laws, complete, count)


def check_count_of(
    count: LawCount, problem: Problem, input_shape: tuple[int, ...] | None, inputs: torch.Tensor | None
) -> None:
    """``ValueError`` when a ``count=`` given to :func:`check_laws` or ``find_laws`` is not this problem's: another
    number of parameters, or another model or input shape (:meth:`~conslaw_lite.counting.problem.Problem.key`), or
    a count near a θ given with ``at=`` (their laws are taken at random θ, where a unit dead near it is not).

    Examples
    ========
    >>> from torch import nn
    >>> relu = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    >>> count = count_laws(relu, (2,))
    >>> check_count_of(count, problem_of(relu, None), (2,), None)  # its own count
    >>> gelu = nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 1))
    >>> try:
    ...     check_count_of(count, problem_of(gelu, None), (2,), None)
    ... except ValueError as err:
    ...     print(str(err)[:30])
    count is that of another model
    """
    if count.num_params != problem.num_params:
        raise ValueError(
            f"count is that of a model of {count.num_params} parameters, and this one has {problem.num_params}: "
            f"give the count of this model (count_laws(model, ...)) or none"
        )
    if count.near_given:  # a dead unit's coordinates are laws near its θ: "not quadratic" to a search at random θ
        raise ValueError(
            "count was taken near the θ given with at= (count_laws(..., at=...)): its N holds near that θ, and "
            "check_laws and find_laws take their laws at random θ: give a count without at=, or none"
        )
    if count.counted and count.counted != problem.key(input_shape, inputs):
        raise ValueError(
            "count is that of another model, or of inputs of another shape (its layers, parameter shapes or input "
            "shape differ from this call's): give the count of this model (count_laws(model, ...)) or none"
        )


def law_residuals(
    problem: Problem,
    laws: Mapping[str, Law],
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
    seed: int = 0,
    num_samples: int = 8,
    max_rows: int | None = None,
    rank: bool = True,
    pieces: bool = True,
) -> tuple[dict[str, float], int | None]:
    """:func:`check_laws` without the count: each law's relative residual ``max |⟨∇h, ∇f_i(x)⟩| / (‖∇h‖ ‖∇f_i(x)‖)``
    over its entries, two random θ and ``num_samples`` fresh inputs, and the number of independent entries;
    ``max_rows``: over that many outputs i at each θ, drawn at random, where there are more (a screen of proposed laws,
    which fail on every output a broken unit reaches; :func:`check_laws` takes them all). ``rank=False``: no number
    of independent entries (``None``), and ∇h need not be held whole (:class:`LawGradients`). ``pieces=False``: the
    plain outputs of the batch, not those of each input's pieces (a model whose BatchNorms train couples them).

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> residuals, independent = law_residuals(problem_of(ToyProduct(a=1.0, b=2.0), None),
    ...                                        {"a²−b²": lambda p: p["a"] ** 2 - p["b"] ** 2}, (1,), None)
    >>> residuals["a²−b²"] < 1e-12, independent
    (True, 1)
    """
    h = LawEntries(laws, problem)
    residuals = dict.fromkeys(laws, 0.0)
    independent = 0
    for point in range(NUM_POINTS if laws else 0):  # no laws (e.g. a GELU FFN): nothing to check, 0 independent
        gen = generator(seed, Stream.LAW_CHECK, point)  # not the counter's θ and inputs
        theta = problem.random_theta(gen, decades=NEAR_STANDARD)  # laws hold at every θ; a tiny tensor hides terms
        # standard-normal inputs: where a softmax saturates, ∇f_i is round-off and so is its cosine with ∇h; the
        # pieces that only other scales reach (a cap) are taken from random θ' of many decades, as the count does
        x = sample_inputs(input_shape, inputs, num_samples, gen, spread=False)
        checked_outputs(problem, theta, x)
        grad_h = LawGradients(h, theta, whole=rank, gen=gen, sizes=problem.sizes)
        per_entry = torch.zeros_like(grad_h.norms)
        f = outputs_over_pieces(problem, theta, x, gen, num_samples) if pieces else problem.outputs(x)
        for grad_f in gradient_rows(f, theta, max_rows, gen):
            chunk, varying = grad_h.cosines(grad_f)
            per_entry = torch.maximum(per_entry, chunk)
        for name, part in zip(laws, torch.split(per_entry, _law_sizes(laws, problem, theta))):
            residuals[name] = max(residuals[name], float(part.max()))
        if rank and varying.any():
            s = torch.linalg.svdvals(grad_h.whole[varying] / grad_h.norms[varying, None])
            independent = max(independent, int((s > CUT * s[0]).sum()))
    return residuals, independent if rank else None
