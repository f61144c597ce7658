"""Inputs for a model of one's own: a batch of two to run its forward on, and, for one that takes token ids, every id
of the vocabulary, as many inputs as the counter uses.

:func:`~conslaw_lite.counting.count_laws` draws standard-normal inputs from ``input_shape``, which a model
that starts with an ``nn.Embedding`` cannot take; given ``inputs`` it uses those, as they are, at every θ.
Two things make such inputs a fair sample. Every id must occur: an id never seen leaves its embedding row
without gradient, and each of its entries would be counted as a law (``V·d`` spurious laws for ``V`` ids
unseen). And there must be as many inputs as the counter draws itself: ``S·out ≥ max(1.25 D, 4096)``
output entries, at most 512 inputs, unless the vocabulary needs more to be covered.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from conslaw_lite.counting.embedding_rows import EMBEDDINGS
from conslaw_lite.counting.problem import one_output
from conslaw_lite.counting.sample_sizes import MAX_SAMPLES, output_entries
from conslaw_lite.seeding import generator


def inputs_needed(model: nn.Module, example: torch.Tensor) -> int:
    """How many inputs the counter would draw for ``model``: ``⌈max(1.25 D, 4096) / out⌉``, at most 512.

    ``out`` is the number of output entries of one input (``model(example[:1])``), D the parameter count. A model
    that rejects the example as it is (float64 inputs to a float32 module: the counter casts a copy) gets 512.

    Examples
    ========
    >>> inputs_needed(nn.Linear(3, 2), torch.zeros(1, 3))  # ⌈4096 / 2⌉ = 2048, capped at 512
    512
    >>> inputs_needed(nn.Linear(3, 64), torch.zeros(1, 3))  # ⌈4096 / 64⌉
    64
    """
    try:
        with torch.no_grad():
            out = one_output(model(example[:1]), 1).numel()  # several outputs, a ModelOutput: as the counter sees them
    except (RuntimeError, ValueError, TypeError, AttributeError):  # the count names what the model rejects, if it does
        return MAX_SAMPLES
    D = sum(p.numel() for p in model.parameters())
    return min(MAX_SAMPLES, math.ceil(output_entries(D) / max(out, 1)))


def token_inputs(input_shape: tuple[int, ...], vocab: int, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` inputs of ``input_shape`` token ids in ``0..vocab−1`` (more when needed), every id equally often.

    The ids ``0, 1, ..., V−1, 0, 1, ...`` fill ``max(n, ⌈V / T⌉)`` inputs of ``T = prod(input_shape)`` ids, in an
    order shuffled from ``seed``: each id occurs ``⌊nT / V⌋`` or ``⌈nT / V⌉`` times, at random positions.

    Examples
    ========
    >>> x = token_inputs((3,), vocab=10, n=2)  # 2 inputs of 3 ids cannot hold 10 ids: 4 inputs
    >>> x.shape, x.dtype, sorted(set(x.flatten().tolist())) == list(range(10))
    (torch.Size([4, 3]), torch.int64, True)
    >>> token_inputs((3,), vocab=0, n=2)
    Traceback (most recent call last):
    ...
    ValueError: --vocab must be a positive integer, got 0
    """
    if not isinstance(vocab, int) or vocab < 1:
        raise ValueError(f"--vocab must be a positive integer, got {vocab!r}")
    T = math.prod(input_shape)
    n = max(n, math.ceil(vocab / T))
    ids = torch.arange(n * T) % vocab
    order = torch.randperm(n * T, generator=generator(seed))  # the count's own stream: its inputs
    return ids[order].reshape(n, *input_shape)


def example_inputs(model: nn.Module, input_shape: tuple[int, ...] | None, inputs: torch.Tensor | None) -> torch.Tensor:
    """A batch of two inputs: ``inputs[:2]``, or standard normal of ``input_shape`` in the model's dtype and device.

    Examples
    ========
    >>> example_inputs(nn.Linear(3, 2), 3, None).shape
    torch.Size([2, 3])
    """
    if inputs is not None:
        if input_shape is not None:
            raise ValueError("give input_shape (one input's shape) or inputs (a batch of inputs), not both")
        if not isinstance(inputs, torch.Tensor) or inputs.dim() < 1 or len(inputs) < 1:
            got = f"shape {tuple(inputs.shape)}" if isinstance(inputs, torch.Tensor) else f"a {type(inputs).__name__}"
            raise ValueError(f"inputs must be a batch of inputs (one tensor with a batch dimension), got {got}")
        return inputs[:2]
    shape = (input_shape,) if isinstance(input_shape, int) else tuple(input_shape)
    if not shape or any(not isinstance(n, int) or n < 1 for n in shape):
        raise ValueError(f"input_shape must be positive integers (one input, no batch dimension), got {input_shape}")
    param = next(model.parameters())
    dtype = param.dtype if param.is_floating_point() else torch.float64
    return torch.randn(2, *shape, dtype=dtype, device=param.device)


def part_inputs(module: nn.Module, x: torch.Tensor, seed: int) -> tuple[tuple[int, ...], torch.Tensor | None]:
    """The input shape a part (:mod:`conslaw_lite.own_laws`) is searched on, from ``x`` (a batch of what it reads),
    and for token ids the inputs themselves: every id of its first ``nn.Embedding``.

    Examples
    ========
    >>> part_inputs(nn.Linear(3, 2), torch.randn(5, 3), 0)
    ((3,), None)
    >>> shape, ids = part_inputs(nn.Embedding(4, 2), torch.tensor([[1, 2]]), 0)
    >>> shape, sorted(set(ids.flatten().tolist()))
    ((2,), [0, 1, 2, 3])
    """
    shape = tuple(x.shape[1:])
    if x.is_floating_point():
        return shape, None
    embedding = next((m for m in module.modules() if isinstance(m, EMBEDDINGS)), None)
    if embedding is None:
        raise ValueError(f"its input is {x.dtype} and it has no nn.Embedding or EmbeddingBag to read the vocabulary of")
    example = token_inputs(shape, embedding.num_embeddings, 1, seed)
    return shape, token_inputs(shape, embedding.num_embeddings, inputs_needed(module, example), seed)
