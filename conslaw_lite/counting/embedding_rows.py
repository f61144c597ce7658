"""Rows of an ``nn.Embedding`` that get no gradient: each of their entries is a conserved quantity, and said.

Two kinds: the rows that the given token ids never read (a law of training on such data, not of the model), and the
row ``padding_idx``, which torch's backward never moves (the counter holds it constant:
:func:`~conslaw_lite.counting.exact_ops.embedding`). The warnings name the layer and the rows.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

import torch
from torch import nn

from conslaw_lite.counting.layer_kinds import describe_layer
from conslaw_lite.laws import user_stacklevel

Params = Mapping[str, torch.Tensor]
EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)  # the layers that read rows of a table by token id


class UnreadRows(UserWarning):
    """Given token ids leave rows of an embedding unread: each entry of such a row counts as a law."""


def warn_padding_rows(module: nn.Module | None) -> None:
    """Warn (:class:`UnreadRows`) for each ``nn.Embedding`` with a ``padding_idx``: torch gives that row no gradient,
    so training never moves it and each of its entries is a law (the counter holds it constant:
    :func:`~conslaw_lite.counting.exact_ops.embedding`).

    Examples
    ========
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_padding_rows(nn.Sequential(nn.Embedding(5, 2, padding_idx=0), nn.Linear(2, 1)))
    >>> print(caught[0].message)
    `0` (Embedding) gets no gradient on its padding row 0 (padding_idx=0): each of its 2 entries counts as a law
    """
    for name, m in module.named_modules() if module is not None else ():
        if isinstance(m, EMBEDDINGS) and m.padding_idx is not None:
            warnings.warn(
                f"{describe_layer(name, m)} gets no gradient on its padding row {m.padding_idx} (padding_idx="
                f"{m.padding_idx}): each of its {m.embedding_dim} entries counts as a law",
                UnreadRows,
                stacklevel=user_stacklevel(),
            )


def warn_unread_rows(module: nn.Module | None, inputs: torch.Tensor | None, apply: Callable, params: Params) -> None:
    """Warn (:class:`UnreadRows`) for each ``nn.Embedding`` that the given ``inputs`` leave rows of unread, and that
    get no gradient otherwise either (a table tied to the output layer reads every row there).

    Those rows get no gradient on these inputs, so each of their entries is conserved: a law of training on data
    like these inputs, not of the model. The warning names the rows, so that a count meant for the model can be
    taken on inputs that hold every id.

    Examples
    ========
    >>> import warnings
    >>> net = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 1)).double()
    >>> apply = lambda p, x: torch.func.functional_call(net, p, (x,))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_unread_rows(net, torch.tensor([[0], [1], [1]]), apply, dict(net.named_parameters()))
    >>> print(caught[0].message)  # doctest: +NORMALIZE_WHITESPACE
    `0` (Embedding) reads rows 0, 1 of 5 on the given inputs: rows 2..4 get no gradient, and each of their
    6 entries counts as a law
    """
    if module is None or inputs is None or inputs.is_floating_point():
        return
    embeddings = {m: name for name, m in module.named_modules() if isinstance(m, EMBEDDINGS)}
    read: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}
    def record(m: nn.Module, args: tuple) -> None:
        read.setdefault(m, (args[0], m.weight))

    hooks = [m.register_forward_pre_hook(record) for m in embeddings]
    try:
        out = apply({key: value.detach().requires_grad_() for key, value in params.items()}, inputs)
    finally:
        for hook in hooks:
            hook.remove()
    partly = {}  # the tables with rows the ids leave unread: only these need a backward
    for m, (ids, weight) in read.items():
        seen = torch.zeros(m.num_embeddings, dtype=torch.bool)
        seen[ids.reshape(-1).long().cpu().clamp(0, m.num_embeddings - 1)] = True
        if not bool(seen.all()):
            partly[m] = (seen, weight)
    moved = _rows_moved(out, [weight for _, weight in partly.values()])
    for (m, (seen, _)), rows_moved in zip(partly.items(), moved, strict=True):
        unread = torch.nonzero(~(seen | rows_moved)).flatten().tolist()
        if not unread:
            continue
        read_ids = torch.nonzero(seen).flatten().tolist()
        warnings.warn(
            f"{describe_layer(embeddings[m], m)} reads rows {_ranges(read_ids)} of {m.num_embeddings} "
            f"on the given inputs: rows {_ranges(unread)} get no gradient, and each of their "
            f"{len(unread) * m.embedding_dim} entries counts as a law",
            UnreadRows,
            stacklevel=user_stacklevel(),
        )


def _rows_moved(out: object, weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """For each table, which rows a random cotangent of the output gives a nonzero gradient (all False where the
    output is no tensor or the table no tensor of θ)."""
    grads: list[torch.Tensor | None] = [None] * len(weights)
    tracked = [k for k, w in enumerate(weights) if w.requires_grad]
    if isinstance(out, torch.Tensor) and out.requires_grad and tracked:
        cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=out.dtype).to(out.device)
        found = torch.autograd.grad(out, [weights[k] for k in tracked], cotangent, allow_unused=True)
        for k, g in zip(tracked, found, strict=True):
            grads[k] = g
    return [
        torch.zeros(len(w), dtype=torch.bool) if g is None else (g != 0).reshape(len(w), -1).any(1).cpu()
        for w, g in zip(weights, grads, strict=True)
    ]


def _ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0..2, 5"`` (two in a row: ``"0, 1"``)."""
    parts, start = [], 0
    for k in range(1, len(ids) + 1):
        if k == len(ids) or ids[k] != ids[k - 1] + 1:
            run = ids[start:k]
            parts.append(f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
            start = k
    return ", ".join(parts)
