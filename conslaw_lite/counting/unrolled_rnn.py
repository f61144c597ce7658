"""``nn.RNN`` and ``nn.RNNCell`` with ``nonlinearity="relu"``, unrolled into ``torch.relu`` steps the counter sees.

torch runs a ReLU RNN as one fused op (``_VF.rnn_relu``, ``_VF.rnn_relu_cell``), inside which no ``torch.relu``
call reaches the activation patterns of :mod:`.strata`. Counted through it, a random θ's own pattern was counted:
``nn.RNN(2, 2, num_layers=2, nonlinearity="relu")`` with a linear head, whose parameter space has 8 laws (each
layer's two biases read as one sum, 4, and a positive rescaling of each hidden unit, 4), counted 9, conclusive, at
seed 1, where both θ drawn left a unit on one piece for every input. Unrolled, each step
``h_t = relu(W_ih x_t + b_ih + W_hh h_{t−1} + b_hh)`` is a ``torch.relu`` of a (batch, H) tensor: a unit per
hidden coordinate, whose samples are the batch's inputs, as :mod:`.strata` takes them.
:func:`~conslaw_lite.counting.exact_ops.exact_derivatives` routes both ops here while a count runs. Packed
sequences and dropout between layers in train mode still run torch's kernel (the latter is refused as random).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

_RNN_RELU = torch._VF.rnn_relu  # torch's own, for what is not unrolled


def rnn_relu_cell(
    input: torch.Tensor,
    hx: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    b_ih: torch.Tensor | None = None,
    b_hh: torch.Tensor | None = None,
) -> torch.Tensor:
    """One step, ``relu(W_ih x + b_ih + W_hh h + b_hh)``.

    Examples
    ========
    >>> cell = torch.nn.RNNCell(3, 2, nonlinearity="relu").double()
    >>> x, h = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    >>> torch.allclose(rnn_relu_cell(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh), cell(x, h))
    True
    """
    return torch.relu(F.linear(input, w_ih, b_ih) + F.linear(hx, w_hh, b_hh))


def rnn_relu(input: torch.Tensor, hx: torch.Tensor, params: Sequence[torch.Tensor], *options: object):
    """``_VF.rnn_relu(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)``:
    the output of the last layer at every step and the last state of every layer and direction.

    Examples
    ========
    >>> rnn = torch.nn.RNN(3, 2, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True).double()
    >>> x, h0 = torch.randn(5, 4, 3, dtype=torch.float64), torch.randn(4, 5, 2, dtype=torch.float64)
    >>> out, h = rnn_relu(x, h0, rnn._flat_weights, True, 2, 0.0, False, True, True)
    >>> all(torch.allclose(a, b) for a, b in zip((out, h), rnn(x, h0)))
    True
    """
    if not isinstance(params, (list, tuple)):  # the packed-sequence overload (data, batch_sizes, hx, params, ...)
        return _RNN_RELU(input, hx, params, *options)
    has_biases, num_layers, dropout, train, bidirectional, batch_first = options
    if dropout and train:
        return _RNN_RELU(input, hx, params, *options)
    x = input.transpose(0, 1) if batch_first else input  # (T, batch, features)
    per, directions, last = 4 if has_biases else 2, 2 if bidirectional else 1, []
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            h, steps = hx[k], [None] * len(x)
            for t in range(len(x)) if direction == 0 else reversed(range(len(x))):
                h = steps[t] = rnn_relu_cell(x[t], h, *params[k * per : (k + 1) * per])
            outputs.append(torch.stack(steps))
            last.append(h)
        x = torch.cat(outputs, dim=-1)
    return (x.transpose(0, 1) if batch_first else x), torch.stack(last)
