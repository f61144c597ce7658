"""Kinks the activation patterns do not see: piecewise aten ops of θ run outside the calls :mod:`.strata` knows.

:mod:`.strata` takes the pieces of the calls it knows by their torch function (``torch.relu``, clamps, comparisons
and selects on the batch of inputs, ...), and a model with such calls is ranked with the patterns that any θ
realizes. A kink reached another way is not seen there: ``torch.ops.aten.relu``, ``torch.stack([z, 0]).amax(0)``,
``z·(sign z + 1)/2``, a max-pool over ``(z, 0)``, a fused kernel of one's own. A random θ that leaves one of its
units on one piece for every input is then ranked with that θ's own laws: a 2-2-2-2 ReLU MLP with biases,
whose parameter space keeps 4, counted 5, conclusive, about once in 30 seeds for each of the spellings above,
when both θ drawn had such a unit. No law of the parameter space fails at a θ, so no θ ranks above a generic
one: where :func:`unseen_kinks` finds such ops, the count ranks ``POINTS`` θ instead of 2 and takes the highest rank
that two of them meet. It ranks only θ where every unit of those ops takes two pieces or more over the inputs
(:func:`one_piece`: an entry of their output, the inputs aside, whose piece is the same for every input), and
every coordinate has a gradient; where fewer than ``POINTS`` such θ are drawn, there is no count
(:func:`too_few`); four θ without that check still counted 5 at one seed in 100. Counted so, the 2-2-2-2 net
above, at 100 seeds and for each spelling, gave 4 at 12 of them
and no count at the others (a ReLU written ``torch.relu`` is counted there); a net of one hidden layer, 4 at each
seed tried.

Found at the dispatcher, where every kink is an aten op whatever torch function reached it (``KINK_OPS``), with a
parameter among its operands' sources (an operand that requires grad): a mask of the inputs alone is no kink of θ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from conslaw_lite.counting.problem import Problem, sample_inputs
from conslaw_lite.counting.strata import PROBE_BATCHES, piece_of
from conslaw_lite.seeding import Stream, generator

POINTS = 4  # θ ranked where a kink is unseen (count.NUM_POINTS elsewhere)
# Elementwise kinks, the maxima that pick an entry per output, and sorts (GroupSort: a pair kept in one order for
# every input counted 12 where the parameter space keeps 10). Not the selections of a set (topk, argmax: a mixture
# of experts' routing), whose degenerate θ, a set picked for every input, leaves the others' parameters without
# gradient, which the count passes over, and whose zeros at every θ (a top-1 gate renormalized to 1) are laws it
# must keep.
UNARY = frozenset(
    {"relu", "relu_", "threshold", "threshold_", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max",
     "clamp_max_", "hardtanh", "hardtanh_", "leaky_relu", "leaky_relu_", "_prelu_kernel", "rrelu_with_noise",
     "hardshrink", "softshrink", "hardsigmoid", "hardswish", "elu", "elu_", "abs", "abs_"}
)  # fmt: skip
LEVELS = frozenset({"sign", "sgn", "heaviside", "gt", "lt", "ge", "le"})  # the output is the piece
PICKS = frozenset(
    {"maximum", "minimum", "fmax", "fmin", "max", "min", "amax", "amin", "aminmax", "max_pool1d", "max_pool2d",
     "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
     "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "sort", "kthvalue", "median", "cummax",
     "cummin"}
)  # fmt: skip
KINK_OPS = UNARY | LEVELS | PICKS
SORTS = frozenset({"sort", "kthvalue", "median", "cummax", "cummin"})  # with the pools: no ReLU spelled another way


class _Known(TorchFunctionMode):
    """Marks the calls :mod:`.strata` takes the pieces of, on a ``batch`` of inputs: the aten ops inside are seen."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch, self.depth = batch, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        known = piece_of(func, args, kwargs or {}, self.batch) is not None
        self.depth += known
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.depth -= known


class _Unseen(TorchDispatchMode):
    """The kink ops of θ that run outside a known call. Per input (their output has the batch first): their names,
    and whether one keeps an entry on one piece for every input of the batch. The others, with the shapes they
    read and give (:func:`kinks_of` keeps those whose shapes another batch size leaves alone: of the weights alone,
    no input's pattern to miss, :func:`unpaired`)."""

    def __init__(self, known: _Known) -> None:
        super().__init__()
        self.known, self.names, self.one_piece, self.unbatched = known, set(), False, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name, batch = func.overloadpacket.__name__, self.known.batch
        if name not in KINK_OPS or self.known.depth or not _of_theta(args, kwargs or {}):
            return out
        first = out[0] if isinstance(out, (tuple, list)) else out
        if not _batched(first, batch):
            shapes = [tuple(t.shape) for t in [first, *_operands(args, kwargs or {})] if isinstance(t, torch.Tensor)]
            self.unbatched.add((name, tuple(shapes)))
        else:
            self.names.add(name)
            piece = None if self.one_piece or batch < 2 else _piece(name, args, out)
            if piece is not None and piece.dim() > 0 and len(piece) == batch:
                self.one_piece = bool((piece == piece[:1]).reshape(batch, -1).all(0).any())
        return out


def _piece(name: str, args: tuple, out: object) -> torch.Tensor | None:
    """The piece of each entry of an unseen kink's output: for a unary op which of ``out = z``, ``out = 0`` and
    ``out > z`` hold; the level of a step; the operand a maximum keeps; the entry a max or max-pool picks."""
    first = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if isinstance(out, (tuple, list)):  # max.dim, sort, max_pool*_with_indices, ...: (values, indices)
        return out[1] if len(out) > 1 and isinstance(out[1], torch.Tensor) else None
    if first is None or not isinstance(out, torch.Tensor):
        return None
    if name in UNARY and first.shape == out.shape:
        return (out == first).long() + 2 * (out == 0).long() + 4 * (out > first).long()
    if name in LEVELS:
        return out
    if name in ("maximum", "minimum", "fmax", "fmin"):
        return out == first
    if name in ("amax", "amin") and len(args) > 1:
        dims = [d % first.dim() for d in ([args[1]] if isinstance(args[1], int) else args[1])]
        if not dims:  # every dimension reduced: no batch left
            return None
        kept = [d for d in range(first.dim()) if d not in dims]
        values = out.reshape(*(first.shape[d] for d in kept), 1)  # with keepdim too
        hits = first.permute(*kept, *dims).flatten(len(kept)) == values
        return hits.long().argmax(-1)
    return None


def one_piece(forward: Callable[[torch.Tensor, torch.Tensor], object], theta: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether ``forward(θ, x)`` keeps a unit of an unseen kink on one piece for every input of ``x`` (a dead ReLU, or
    one that acts as the identity): a θ where the rank is that of its own pieces.

    Examples
    ========
    >>> x = torch.tensor([[1.0], [2.0], [3.0]])
    >>> relu = lambda t, x: torch.ops.aten.relu(x * t)  # unit j: t_j·x, x > 0 for every input
    >>> one_piece(relu, torch.tensor([1.0, -1.0]), x), one_piece(relu, torch.tensor([1.0, 1.0]), x - 2)
    (True, False)
    """
    return _watched(forward, theta, x).one_piece


def _operands(args: tuple, kwargs: dict) -> list:
    operands = [*args, *kwargs.values()]
    return operands + [t for a in operands if isinstance(a, (list, tuple)) for t in a]


def _of_theta(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in _operands(args, kwargs))


def _batched(t: object, batch: int) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() > 0 and len(t) == batch


def kinks_of(forward: Callable[[torch.Tensor, torch.Tensor], object], theta: torch.Tensor, x: torch.Tensor):
    """The kink ops of θ (aten names, sorted) that ``forward(θ, inputs)`` runs outside the calls :mod:`.strata`
    knows, on a batch of copies of the input ``x[0]``: per input (the output has the batch first), of the weights
    alone (operands and output keep their shapes at another batch size: the clamp inside ``F.normalize(W,
    eps=ε)``), and flattened (the other ones: tokens flattened with the batch, a layout (features, batch)).

    Examples
    ========
    >>> W = torch.tensor([[1.0, -1.0], [0.5, 2.0]])
    >>> relu = lambda t, x: torch.relu(x @ t)
    >>> amax = lambda t, x: torch.stack([x @ t, torch.zeros(len(x), 2)]).amax(0)
    >>> kinks_of(relu, W, torch.ones(1, 2)), kinks_of(amax, W, torch.ones(1, 2))
    (Kinks(per_input=[], of_weights=[], flattened=[]), Kinks(per_input=['amax'], of_weights=[], flattened=[]))
    >>> kinks_of(lambda t, x: x @ torch.nn.functional.normalize(t, eps=0.5), W, torch.ones(1, 2)).of_weights
    ['clamp_min']
    >>> kinks_of(lambda t, x: torch.ops.aten.relu(x.reshape(-1, 1) * t[0]), W, torch.ones(1, 2)).flattened
    ['relu']
    """
    unseen, other = (_watched(forward, theta, torch.cat([x[:1]] * batch)) for batch in PROBE_BATCHES)
    alone, moved = unseen.unbatched & other.unbatched, unseen.unbatched - other.unbatched
    return Kinks(sorted(unseen.names), sorted({name for name, _ in alone}), sorted({name for name, _ in moved}))


class Kinks(NamedTuple):
    """The unseen kink ops of θ by where they act (:func:`kinks_of`); aten names."""

    per_input: list[str]
    of_weights: list[str]
    flattened: list[str]


def _watched(forward: Callable[[torch.Tensor, torch.Tensor], object], theta: torch.Tensor, x: torch.Tensor) -> _Unseen:
    """What :class:`_Unseen` saw of ``forward(θ, x)``, θ tracked so that its kinks are told from the inputs'."""
    with _Known(len(x)) as known, _Unseen(known) as unseen:
        forward(theta.detach().requires_grad_(), x)
    return unseen


def unseen_kinks(problem: Problem, input_shape: tuple[int, ...] | None, inputs: torch.Tensor | None, seed: int):
    """:func:`kinks_of` the problem's model, at the first θ of the seed's sequence."""
    gen = generator(seed, Stream.THETA_DRAWS, 0)
    probe = problem.to_device(sample_inputs(input_shape, inputs, 1, gen))
    return kinks_of(lambda t, x: problem.apply(problem.unflatten(t), x), problem.random_theta(gen), probe)


def too_few(kinks: Sequence[str], usable: int, draws: int) -> str:
    """Why no count: fewer than ``POINTS`` of the θ drawn had each unit of the model's unseen kinks on two pieces
    and a gradient for every coordinate. A ReLU spelled another way can be written so that its patterns are taken;
    a max-pool or sort cannot, but more inputs let each of its outputs pick two entries.

    Examples
    ========
    >>> too_few(["amax"], 2, 16)[:60]
    'a kink of θ the counter does not see (aten.amax), and only 2'
    >>> "give more inputs" in too_few(["max_pool2d_with_indices"], 0, 16)
    True
    >>> "without the floor" in too_few(["clamp_min"], 0, 16)  # F.normalize's ε
    True
    """
    advice = []
    if any("pool" not in name and name not in SORTS for name in kinks):  # a ReLU spelled another way, maybe
        advice.append(
            "where it is an activation spelled another way (torch.stack([z, 0]).amax(0)), write it with torch.relu, "
            "F.relu or an nn module so that its patterns are taken (a clamp at a learned bound as "
            "torch.minimum(F.relu(z), bound))"
        )
    if any(name.startswith("clamp_min") for name in kinks):
        advice.append(
            "where it is a norm's floor (F.normalize, cosine_similarity: a norm clamped at a small ε), its other "
            "piece is met only by inputs whose norm falls below ε, so the count depends on whether yours do: write "
            "the norm without the floor (z / z.norm(dim=-1, keepdim=True)) to count the model on inputs that never "
            "do"
        )
    if set(kinks) & PICKS:
        advice.append(
            "give more inputs (inputs=, num_samples=), so that each output of a max-pool, maximum or sort picks two "
            "entries over them"
        )
    return (
        f"a kink of θ the counter does not see ({_aten(kinks)}), and only {usable} of {draws} random θ had each of its "
        f"units on two pieces over the inputs and a gradient for every coordinate: elsewhere the rank is that of "
        f"θ's own pieces (a dead unit, or one that acts as the identity); {'; or '.join(advice)}; or count near "
        "your θ with at=dict(model.named_parameters())"
    )


def unpaired(kinks: Kinks) -> str:
    """Why no count at random θ (``""`` where there is none): an unseen kink whose pieces no input is paired with.

    Of the weights alone (``F.normalize(W, eps=ε)`` clamps ``‖w‖`` at ε inside): as with a clamp of a weight
    (:func:`weight_pieces`), a random θ keeps it on its own piece, and the laws of that piece are not the whole
    parameter space's (``F.normalize(W, eps=0.5)`` counted 3 where there are none). Flattened (tokens flattened with
    the batch): no unit's pieces can be read per input, so θ where a unit keeps one piece are not passed over.

    Examples
    ========
    >>> unpaired(Kinks([], ["clamp_min"], []))[:59]
    'a kink of the weights alone the counter does not see (aten.'
    >>> unpaired(Kinks(["relu"], [], []))
    ''
    """
    if kinks.of_weights:
        return (
            f"a kink of the weights alone the counter does not see ({_aten(kinks.of_weights)}; F.normalize clamps the "
            "norm at eps): a random θ keeps it on θ's own piece, and its laws are that piece's, not the whole "
            "parameter space's; count near your θ with at=dict(model.named_parameters()) (certify --at-own)"
        )
    if kinks.flattened:
        return (
            f"a kink of θ the counter does not see ({_aten(kinks.flattened)}) acts on a tensor whose first dimension "
            "is not the batch of inputs (tokens flattened with the batch, or features laid out (features, batch)): its "
            "pieces cannot be read per input; keep the batch first, or count near your θ with "
            "at=dict(model.named_parameters())"
        )
    return ""


def weight_pieces(pieces: set[tuple[tuple[int, ...], ...]]) -> str:
    """Why no count where a piecewise call of the weights alone runs (``W.clamp(-c, c)``, ``relu(W)``), with the
    pieces (:func:`.strata.parameter_pieces`) random θ put its entries on; ``""`` where none runs. The rank at θ is
    that of θ's own pattern, even where every random θ puts every entry on one piece (``W.clamp(-1, 1)`` at
    nn.Linear's scale counted the linear net's 6 laws, conclusive; entries beyond 1 break all of them).

    Examples
    ========
    >>> weight_pieces({((0, 1),)})[:50], weight_pieces(set())
    ('a piecewise op acts on a tensor without the batch ', '')
    """
    if not pieces:
        return ""
    return (
        "a piecewise op acts on a tensor without the batch of inputs first (a clamp, ReLU or abs of a weight, of "
        "features laid out (features, batch), or of a batch merged with another axis, (B·T, features): keep the "
        "batch first and apart), and a random θ puts its entries on "
        f"{_pieces(pieces)}, other θ on others: the count at such a θ is that of θ's own pattern, not of the whole "
        "parameter space; count near your θ with at=dict(model.named_parameters()) (certify --at-own)"
    )


def _pieces(pieces: set[tuple[tuple[int, ...], ...]]) -> str:
    """How many pieces the entries of each call take at the random θ (codes of :func:`.strata.piece_of`).

    Examples
    ========
    >>> _pieces({((0, 1),)}), _pieces({((1,),), ((0, 1), (2,))})
    ('2 pieces', '1 to 2 pieces')
    """
    taken = {len(call) for calls in pieces for call in calls}
    low, high = min(taken), max(taken)
    return f"{low} piece{'s' if low > 1 else ''}" if low == high else f"{low} to {high} pieces"


def _aten(names: Sequence[str]) -> str:
    return ", ".join(f"aten.{name}" for name in names)
