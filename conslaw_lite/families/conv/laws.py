"""Laws of convolutional ReLU nets: one per hidden channel, ``‖W2[:, c]‖² − ‖W1[c]‖²`` summed over the kernel.

Hidden channel c is written by the filter ``W1[c]`` (c_in×k, or c_in×k×k) and its bias ``b1[c]``, and read
by ``W2[:, c]`` (c_out×k). A positively homogeneous ρ lets the channel be rescaled against its reader, so
per channel (Marcotte, Gribonval & Peyré 2025 prove these are all the laws of a two-layer conv ReLU net):

* ``‖W2[:, c]‖² − ‖W1[c]‖² − b1[c]²`` (the bias joins the incoming side; the output bias enters nothing),

N = c_h per hidden layer: the count of an FFN with c_h hidden units, however long the input and whatever
the kernel. GELU and SiLU keep no law (the control is ReLU's law). Controls: ``‖W2[:, c]‖²`` alone.

The finder serves :class:`~.block.ConvBlock` and a user's ``nn.Sequential`` of ``Conv1d``/``Conv2d``
layers with one known activation between each pair (``Conv, ReLU, Conv[, ReLU, Conv, ...]``); any other
layer in the Sequential (pooling, a norm, dropout, grouped convolutions) and it makes no claim.
"""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.activations import ACTIVATIONS, activation_of
from conslaw_lite.families.conv.block import CONVS, ConvBlock
from conslaw_lite.laws import BlockLaws, Law, Params, register_laws

LAW = "‖W2[*,c]‖²−‖W1[c]‖²"  # '*': every output channel (a ':' would end the law's name in its key)
BIAS_LAW = "‖W2[*,c]‖²−‖[W1[c],b1_c]‖²"
CONTROL = "‖W2[*,c]‖²"


def formula(hidden: int, activation: str = "relu", layers: int = 1) -> tuple[int, str]:
    """The number of laws of a conv net with ``layers`` hidden layers of ``hidden`` channels, and how.

    Examples
    ========
    >>> formula(3), formula(3, layers=2), formula(4, "gelu")
    ((3, 'c_h = 3'), (6, 'L·c_h = 2·3 = 6'), (0, '0: no rescaling survives a non-homogeneous activation'))
    """
    if activation not in ACTIVATIONS or ACTIVATIONS[activation].rescaling == "all":
        raise ValueError(f"activation must be one of {[a for a, r in ACTIVATIONS.items() if r.rescaling != 'all']}")
    if ACTIVATIONS[activation].rescaling == "none":
        return 0, "0: no rescaling survives a non-homogeneous activation"
    if layers == 1:
        return hidden, f"c_h = {hidden}"
    return layers * hidden, f"L·c_h = {layers}·{hidden} = {layers * hidden}"


def _reader_sq(p: Params, W2: str) -> torch.Tensor:
    """``‖W2[:, c]‖²`` per hidden channel c, summed over output channels and kernel positions: (c_h,)."""
    w = p[W2]
    return (w * w).sum(dim=[i for i in range(w.dim()) if i != 1])


def _writer_sq(p: Params, W1: str, b1: str | None) -> torch.Tensor:
    """``‖W1[c]‖² (+ b1[c]²)`` per hidden channel c: (c_h,)."""
    w = p[W1]
    h = (w * w).flatten(1).sum(1)
    return h if b1 is None else h + p[b1] * p[b1]


def channel_balance(W2: str, W1: str, b1: str | None = None) -> Law:
    """``h_c = ‖W2[:, c]‖² − ‖W1[c]‖² (− b1[c]²)`` for every hidden channel c (a vector of c_h laws).

    Examples
    ========
    >>> p = {"W1": torch.ones(2, 1, 3), "W2": 2 * torch.ones(1, 2, 3), "b1": torch.tensor([1.0, 0.0])}
    >>> channel_balance("W2", "W1", "b1")(p).tolist()  # 3·4 − (3 + 1), 3·4 − 3
    [8.0, 9.0]
    """
    return lambda p: _reader_sq(p, W2) - _writer_sq(p, W1, b1)


def conv_stack_laws(convs: list[tuple[str, nn.Module]], activation: str) -> BlockLaws | None:
    """The laws of ``conv_L ∘ ρ ∘ ⋯ ∘ ρ ∘ conv_1``: per hidden layer, one per channel; ``None``: no claim.

    ``convs``: ``(parameter prefix, layer)`` in order. A linear ρ (a GL(c_h) symmetry, not one scalar per
    channel) or a grouped convolution is not modelled here, and gets ``None``.

    Examples
    ========
    >>> net = nn.Sequential(nn.Conv1d(1, 3, 3), nn.ReLU(), nn.Conv1d(3, 1, 3))
    >>> sorted(conv_stack_laws([("0.", net[0]), ("2.", net[2])], "relu").laws)
    ['‖W2[*,c]‖²−‖[W1[c],b1_c]‖²']
    """
    if ACTIVATIONS[activation].rescaling == "all" or any(conv.groups != 1 for _, conv in convs):
        return None
    laws, controls = {}, {}
    for layer, ((inner, conv_in), (outer, _)) in enumerate(zip(convs[:-1], convs[1:])):
        tag = f"layer{layer + 1}/" if len(convs) > 2 else ""
        bias = f"{inner}bias" if conv_in.bias is not None else None
        laws[tag + (BIAS_LAW if bias else LAW)] = channel_balance(f"{outer}weight", f"{inner}weight", bias)
        controls[tag + CONTROL] = lambda p, w=f"{outer}weight": _reader_sq(p, w)
    if ACTIVATIONS[activation].rescaling == "none":
        return BlockLaws(f"conv-{activation}", {}, {**controls, **laws})
    return BlockLaws(f"conv-{activation}", laws, controls)


@register_laws(ConvBlock)
def _conv_block(module: ConvBlock, prefix: str) -> BlockLaws | None:
    return conv_stack_laws([(f"{prefix}conv1.", module.conv1), (f"{prefix}conv2.", module.conv2)], module.activation)


@register_laws(nn.Sequential)
def _conv_sequential(module: nn.Sequential, prefix: str) -> BlockLaws | None:
    """``Conv, ρ, Conv[, ρ, Conv, ...]`` with one conv type and one known ρ; anything else: no claim."""
    layers = list(module.named_children())
    convs, acts = layers[0::2], [activation_of(m) for _, m in layers[1::2]]
    conv_types = {type(m) for _, m in convs}
    if len(layers) < 3 or len(layers) % 2 == 0 or len(conv_types) != 1 or conv_types - set(CONVS.values()):
        return None
    if None in acts or len({a.name for a in acts}) != 1:
        return None
    return conv_stack_laws([(f"{prefix}{name}.", m) for name, m in convs], acts[0].name)
