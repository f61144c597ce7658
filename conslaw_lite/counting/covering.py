"""Activation patterns that random θ' realize on the inputs, drawn until they cover every piece and every pairing.

A law of the whole parameter space is conserved by the fields of every pattern some θ realizes on some input
(:mod:`.strata`), so the count must see, for each unit, each piece, and also the pieces of units that meet only
together. A unit of ``hardtanh(z, 0, 10⁶)`` on its cap breaks its law (‖w_in‖² − ‖w_out‖²) only on the inputs
where a unit that reads it lies between 0 and its own cap: its outgoing weights then move, its incoming ones do
not. θ' of one scale never put the two there together, since a layer large enough to reach the cap makes the
next one large too: every unit met its three pieces, and the count was 2 laws, conclusive, where there are none.

So the θ' of the odd chunks of inputs scale each tensor on its own (``thetas_at``), and the rounds go on while
some *pairing* is unmet: a piece of one unit together with a piece of a unit of the next call, on one input. A
chunk takes a new θ' only where no pairing met by it alone is lost. Not every pairing can be met (a unit that
reads only positive inputs), so these rounds stop after ``SETTLE_ROUNDS``: over 30 seeds each, they took the
2-2-2-2 net of ``hardtanh(z, 0, c)`` to 0 laws at c = 10³ and 10⁶ (it counted 1 or 2 at some seeds with
pieces alone), and a 2-3-3-3-2 one at c = 10⁶ to 0 or no count (it counted 6).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from conslaw_lite.counting.strata import Signs

SETTLE_ROUNDS = 4  # rounds, once every piece is met, while some pairing is unmet
PAIRING_LIMIT = 1 << 22  # (unit, piece) pairings of two calls kept track of; wider pairs of calls: pieces alone


def chunk_signs(
    forward: Callable[[torch.Tensor, torch.Tensor], object], theta: torch.Tensor, chunk: torch.Tensor
) -> Signs:
    """The pieces ``forward(θ', chunk)`` puts each unit on, for each input of ``chunk`` (:class:`.strata.Signs`)."""
    with Signs(len(chunk)) as signs:
        forward(theta, chunk)
    if any(on.dim() == 0 or on.shape[0] != len(chunk) for on in signs.on):
        raise ValueError(
            "a ReLU (or another piecewise op) acts on a tensor whose first dimension is the batch of inputs for some "
            "inputs and not for others (rows the model selects, as an expert applied only when inputs are routed to "
            "it, under an `if`): its pieces cannot be paired with the inputs; call it on every batch, even an empty "
            "selection"
        )
    return signs


def _joined(per_chunk: Sequence[Signs], x: torch.Tensor) -> list[torch.Tensor]:
    if len({len(signs.on) for signs in per_chunk}) > 1:
        raise ValueError("the model applies a different number of ReLUs at different θ (data-dependent control flow)")
    dtype = x.dtype if x.is_floating_point() else torch.float64
    return [torch.cat(ons).to(dtype) for ons in zip(*(signs.on for signs in per_chunk))]


def _units(m: torch.Tensor) -> torch.Tensor:
    """A call's pieces as (inputs, samples, units): a unit is an index of the last dimension."""
    return m.reshape(len(m), -1, m.shape[-1]) if m.dim() > 1 else m.reshape(-1, 1, 1)


def unmet_pieces(masks: Sequence[torch.Tensor], pieces: Sequence[tuple[int, ...]]) -> int:
    """How many (unit, piece) pairs no input meets: a unit is an index of a call's last dimension.

    Examples
    ========
    >>> relu6 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # two inputs, two units, never above the cap (code 2)
    >>> unmet_pieces([relu6], [(0, 1, 2)])
    2
    """
    unmet = 0
    for m, codes in zip(masks, pieces):
        units = _units(m).flatten(0, 1)
        unmet += sum(int((~(units == code).any(0)).sum()) for code in codes)
    return unmet


def met_pairings(masks: Sequence[torch.Tensor], pieces: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """Which (unit, piece) of each call some input meets, then which (unit, piece, unit, piece) of each two
    consecutive calls one input meets together: a flat boolean vector.

    Examples
    ========
    >>> first, second = torch.tensor([[2.0], [1.0]]), torch.tensor([[2.0], [2.0]])  # one unit each, two inputs
    >>> met_pairings([first, second], [(0, 1, 2)] * 2).int().tolist()  # pieces 1 and 2, 2; then (1, 2), (2, 2)
    [0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1]
    """
    hot = [torch.stack([(_units(m) == c).any(1) for c in codes], -1).flatten(1) for m, codes in zip(masks, pieces)]
    met = [h.any(0) for h in hot]
    for a, b in zip(hot, hot[1:]):
        if a.shape[1] * b.shape[1] <= PAIRING_LIMIT:
            met.append((a.T.double() @ b.double() > 0).flatten())
    return torch.cat(met) if met else torch.zeros(0, dtype=torch.bool)


def covering_patterns(
    forward: Callable[[torch.Tensor, torch.Tensor], object],
    thetas_at: Callable[[int, int], list[torch.Tensor]],
    x: torch.Tensor,
    draws: int,
    rounds: int,
) -> list[torch.Tensor]:
    """The pieces of every piecewise-linear call, input ``x[s]`` taking them from the θ' of its chunk, redrawn until
    each unit of each call meets all its pieces, then while some pairing is unmet (:func:`met_pairings`).

    The inputs are split into ``draws`` consecutive chunks and chunk k runs ``forward(θ'_k, x_chunk)``, so every
    pattern returned is realized by some θ on its input (the only ones the laws of the whole parameter space must
    respect: :mod:`.strata`); one float tensor of codes per call (:func:`.strata.piece_of`), of the shape that
    call's input has for the whole batch ``x``. ``thetas_at(r, n)`` gives n θ' of round r, wider in scale as r
    grows. Round 0 gives every chunk of inputs its θ'; each later round redraws the odd chunks' only (the even ones
    keep the pieces near the model's scale). Round r widens while a unit misses a piece, for at most ``rounds``
    rounds, then at most ``SETTLE_ROUNDS`` more stay at its width while a pairing is unmet. A chunk whose activations
    overflow at its new θ', or that alone met a pairing its new θ' misses, keeps the pattern it had. A cap that θ'
    of the model's scale never reach (``relu6`` after a layer initialized at 10⁻⁶) is met this way; a unit that
    no θ' brings to a piece (a cap above a bounded input) leaves the patterns met until then.

    Examples
    ========
    >>> import torch.nn.functional as F
    >>> thetas_at = lambda r, n: [torch.tensor([10.0 ** (3 * r)])] * n
    >>> patterns = covering_patterns(lambda t, x: F.relu6(t * x), thetas_at, torch.ones(4, 1), draws=4, rounds=2)
    >>> patterns[0].flatten().tolist()  # 1 · x below the cap, 1000 · x above it on the odd chunks
    [1.0, 2.0, 1.0, 2.0]
    """
    chunks = torch.tensor_split(x, draws)
    per_chunk = [chunk_signs(forward, theta, chunk) for theta, chunk in zip(thetas_at(0, len(chunks)), chunks)]
    pieces = per_chunk[0].pieces
    held = lambda signs: met_pairings(signs.on, pieces).short()  # noqa: E731
    met = sum(held(signs) for signs in per_chunk)
    r = 0
    for _ in range(rounds + SETTLE_ROUNDS):
        widen = r < rounds and unmet_pieces(_joined(per_chunk, x), pieces) > 0
        if not widen and bool((met > 0).all()):
            break
        r += widen
        odd = range(1, len(chunks), 2)
        for k, theta in zip(odd, thetas_at(r, len(odd))):
            signs = chunk_signs(forward, theta, chunks[k])
            after = met - held(per_chunk[k]) + held(signs) if signs.finite else met
            if signs.finite and not bool(((after == 0) & (met > 0)).any()):
                per_chunk[k], met = signs, after
    return _joined(per_chunk, x)
