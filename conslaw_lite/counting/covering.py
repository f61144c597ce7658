"""Activation patterns that random θ' realize on the inputs, drawn from scale profiles that put units of
different layers on different pieces together.

A law of the whole parameter space is conserved by the fields of every pattern some θ realizes on some input
(:mod:`.strata`), so the count must see, for each unit, each piece, and also the pieces of units that meet only
together. A unit of ``hardtanh(z, 0, 10⁶)`` on its cap breaks its law (‖w_in‖² − ‖w_out‖²) only on the inputs
where a path of units after it lies between 0 and their caps: its outgoing weights then move, its incoming ones
do not. θ' of one scale never put them there together, since a layer large enough to reach the cap makes the
next ones large too: every unit met its three pieces, and a 2-2-2-2 net counted 2 laws, conclusive, where there
are none.

So the θ' of half the chunks of inputs do not scale the model as a whole (:func:`theta_apart`): a quarter of
them scale each tensor on its own, the others cut the tensors, in the order the forward reads them, into a large part
and a small part after it (a layer on its cap, the layers after it in their middle pieces), a third of these
with every entry positive. Drawing until each piece, or each pairing of pieces of two calls, was met did not
do: over 12 seeds each of eight such nets of 3 to 5 layers (2 or 3 units wide, a cap at 10³ or 10⁶), those
rounds left 21 of 96 counts wrong; these profiles, 256 θ', none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from conslaw_lite.counting.problem import Problem
from conslaw_lite.counting.strata import Signs

PROFILES = 4  # the kinds of θ' scaled apart (theta_apart), taken in turn
VMAP_CHUNKS = 64  # chunks of inputs whose forwards one vmap call runs at once (their θ' and activations in memory)


def log_uniform(gen: torch.Generator, decades: tuple[float, float]) -> float:
    """u uniform in ``decades``, for a scale ``10^u``."""
    low, high = decades
    return low + (high - low) * float(torch.rand((), generator=gen, dtype=torch.float64))


class FirstUse(TorchFunctionMode):
    """Records in ``order`` the index of each of ``tensors`` the first time an op reads it; :meth:`complete` puts
    those no op read directly (through a parametrization) after them, in their own order.

    Examples
    ========
    >>> a, b, c = torch.ones(2), torch.ones(2), torch.ones(2)
    >>> with FirstUse([a, b, c]) as mode:
    ...     _ = torch.add(b, a) * a
    >>> mode.order, mode.complete()
    ([1, 0], [1, 0, 2])
    """

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.tensors, self.order = {id(t): i for i, t in enumerate(tensors)}, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        for a in tree_leaves((args, kwargs or {})):
            i = self.tensors.get(id(a)) if isinstance(a, torch.Tensor) else None
            if i is not None and i not in self.order:
                self.order.append(i)
        return func(*args, **(kwargs or {}))

    def complete(self) -> list[int]:
        """Every index, those read first in reading order."""
        return self.order + [i for i in range(len(self.tensors)) if i not in self.order]


def first_uses(problem: Problem, theta: torch.Tensor, x: torch.Tensor, recorder: type[FirstUse] = FirstUse) -> FirstUse:
    """A ``recorder`` (:class:`FirstUse` or a subclass) of the parameter tensors, after the forward at θ ran on ``x``
    under it without gradients."""
    values = problem.unflatten(theta)
    with torch.no_grad(), recorder(list(values.values())) as mode:
        problem.apply(values, x)
    return mode


def use_order(problem: Problem, theta: torch.Tensor, x: torch.Tensor) -> list[int]:
    """The indices of the parameter tensors in the order the forward first reads them on ``x``; those it reads
    through another tensor only (a parametrization) last, in the order of the parameters.

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.counting.problem import problem_of
    >>> class Reversed(nn.Module):  # the last layer registered first
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.second, self.first = nn.Linear(2, 1), nn.Linear(2, 2)
    ...     def forward(self, x):
    ...         return self.second(torch.relu(self.first(x)))
    >>> problem = problem_of(Reversed().double(), None)
    >>> use_order(problem, problem.random_theta(torch.Generator()), torch.ones(1, 2, dtype=torch.float64))
    [2, 3, 0, 1]
    """
    return first_uses(problem, theta, x).complete()


def theta_apart(
    problem: Problem, gen: torch.Generator, decades: tuple[float, float], kind: int, order: Sequence[int]
) -> torch.Tensor:
    """A random θ' whose tensors are scaled apart, by ``10^u`` with u in ``decades`` (:func:`log_uniform`).

    ``kind`` 0: each tensor by its own factor. 1 and 2: the tensors up to a random one, in the ``order`` the
    forward reads them (:func:`use_order`), by the larger of two factors, the others by the smaller (a layer on its
    cap, the ones after it in their middle pieces). 3: the same cut, every entry positive, the largest factor
    before it and one of at most 1 after it, so that the units after the cut stay in their middle pieces whatever
    their signs would have been.

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.counting.problem import problem_of
    >>> problem, gen = problem_of(nn.Linear(2, 2).double(), None), torch.Generator().manual_seed(0)
    >>> bool((theta_apart(problem, gen, (-3.0, 3.0), kind=3, order=[0, 1]) >= 0).all())
    True
    """
    parts = [p for _, p in problem.split(problem.random_theta(gen))]
    if kind == 0:
        return torch.cat([p * 10.0 ** log_uniform(gen, decades) for p in parts])
    cut, rank = int(torch.randint(len(parts), (), generator=gen)), {i: r for r, i in enumerate(order)}
    after, before = sorted(10.0 ** log_uniform(gen, decades) for _ in range(2))
    if kind == 3:
        parts, before, after = [p.abs() for p in parts], 10.0 ** decades[1], min(after, 1.0)
    return torch.cat([p * (before if rank[i] <= cut else after) for i, p in enumerate(parts)])


class Pieces(NamedTuple):
    """The pieces of each piecewise call on one chunk of inputs, and whether every input of those calls was finite."""

    on: list[torch.Tensor]
    finite: bool


def _chunk_signs(
    forward: Callable[[torch.Tensor, torch.Tensor], object], theta: torch.Tensor, chunk: torch.Tensor
) -> Pieces:
    """The pieces ``forward(θ', chunk)`` puts each unit on, for each input of ``chunk`` (:class:`.strata.Signs`)."""
    with Signs(len(chunk)) as signs:
        forward(theta, chunk)
    return _per_input(Pieces(signs.on, bool(signs.all_finite())), len(chunk))


def _per_input(pieces: Pieces, batch: int) -> Pieces:
    if any(on.dim() == 0 or on.shape[0] != batch for on in pieces.on):
        raise ValueError(
            "a ReLU (or another piecewise op) acts on a tensor whose first dimension is the batch of inputs for some "
            "inputs and not for others (rows the model selects, as an expert applied only when inputs are routed to "
            "it, x[idx == e], under an `if` or not): its pieces cannot be paired with the inputs; apply each expert to "
            "every input and weight its output by its gate, zero where the input is not routed to it (the same "
            "function: gates = torch.zeros_like(p).scatter(1, idx, w), then sum(gates[:, e, None] * expert(x)))"
        )
    return pieces


def _batched_signs(
    forward: Callable[[torch.Tensor, torch.Tensor], object], thetas: list[torch.Tensor], chunks: list[torch.Tensor]
) -> list[Pieces] | None:
    """:func:`_chunk_signs` of every chunk (all of one size) at its θ', the forwards run as one under
    ``torch.func.vmap`` (``VMAP_CHUNKS`` at a time): one forward of a small model costs its dispatch, and a search
    draws 256 of them per θ (a residual MLP of D = 381 spent 136 of its 221 s there). None where vmap cannot run the
    model (control flow on values, ops it has no rule for, randomness): the caller runs them one by one, as before."""

    def one(theta: torch.Tensor, chunk: torch.Tensor) -> tuple:
        with Signs(len(chunk)) as signs:
            forward(theta, chunk)
        return tuple(signs.on), signs.all_finite()

    try:
        with torch.no_grad():
            on, finite = torch.func.vmap(one, chunk_size=VMAP_CHUNKS)(torch.stack(thetas), torch.stack(chunks))
    except Exception:  # whatever vmap refuses, the loop runs (and raises what the model itself raises)
        return None
    return [_per_input(Pieces([o[k] for o in on], bool(finite[k])), len(chunks[k])) for k in range(len(chunks))]


def _joined(per_chunk: Sequence[Pieces], x: torch.Tensor) -> list[torch.Tensor]:
    if len({len(signs.on) for signs in per_chunk}) > 1:
        raise ValueError("the model applies a different number of ReLUs at different θ (data-dependent control flow)")
    dtype = x.dtype if x.is_floating_point() else torch.float64
    return [torch.cat(ons).to(dtype) for ons in zip(*(signs.on for signs in per_chunk))]


def covering_patterns(
    forward: Callable[[torch.Tensor, torch.Tensor], object],
    theta_at: Callable[[int, int], torch.Tensor],
    x: torch.Tensor,
    draws: int,
    rounds: int,
    aim: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """The pieces of every piecewise-linear call, input ``x[s]`` taking them from the θ' of its chunk.

    The inputs are split into ``draws`` consecutive chunks and chunk k runs ``forward(θ'_k, x_chunk)`` (the chunks of
    one size in one ``torch.func.vmap`` call where the model allows it: :func:`_batched_signs`), so every
    pattern returned is realized by some θ on its input (the only ones the laws of the whole parameter space must
    respect: :mod:`.strata`); one float tensor of codes per call (:func:`.strata.piece_of`), of the shape that
    call's input has for the whole batch ``x``. ``theta_at(r, j)`` gives the j-th θ' of width r, wider in scale
    as r grows: the even chunks take width 0 (pieces near the model's scale), the j-th odd one width ``rounds``
    down to 1 in turn, so that a few inputs meet the widest first. A chunk whose activations overflow at its θ'
    takes one of width 0. A cap that θ' of the model's scale never reach (``relu6`` after a layer initialized at
    10⁻⁶) is met this way. ``aim(x_chunk)``, where given, gives the θ' of one even chunk in two instead, aimed at
    windows that scales miss (:func:`.windows.aimed_theta`).

    Examples
    ========
    >>> import torch.nn.functional as F
    >>> theta_at = lambda r, j: torch.tensor([10.0 ** (3 * r)])
    >>> patterns = covering_patterns(lambda t, x: F.relu6(t * x), theta_at, torch.ones(4, 1), draws=4, rounds=2)
    >>> patterns[0].flatten().tolist()  # 1 · x below the cap, 10⁶ · x and 1000 · x above it on the odd chunks
    [1.0, 2.0, 1.0, 2.0]
    """
    chunks = torch.tensor_split(x, draws)

    def theta_of(k: int) -> torch.Tensor:
        if k % 2:
            return theta_at(rounds - k // 2 % max(rounds, 1), k // 2)
        return aim(chunks[k][:1]) if aim is not None and k % 4 == 2 else theta_at(0, k)

    thetas = [theta_of(k) for k in range(len(chunks))]
    pieces: list[Pieces | None] = [None] * len(chunks)
    for size in {len(c) for c in chunks}:  # tensor_split's chunks come in two sizes at most
        ks = [k for k, c in enumerate(chunks) if len(c) == size]
        batched = _batched_signs(forward, [thetas[k] for k in ks], [chunks[k] for k in ks]) if len(ks) > 1 else None
        for k, got in zip(ks, batched or [_chunk_signs(forward, thetas[k], chunks[k]) for k in ks], strict=True):
            pieces[k] = got
    for k, p in enumerate(pieces):  # a chunk whose activations overflow at θ' of other scales takes one of the model's
        if not p.finite and (k % 2 or (aim is not None and k % 4 == 2)):
            pieces[k] = _chunk_signs(forward, theta_at(0, k), chunks[k])
    return _joined(pieces, x)
