"""Elementary stand-ins for torch ops whose higher derivatives ``torch.func`` gets wrong.

The law counter (:mod:`conslaw_lite.counting`) takes brackets of brackets: third
derivatives, ``jvp`` over ``jvp`` over ``vjp``. Inside them the model's forward pass
runs under two forward-mode levels, so every op needs a correct *second* forward
derivative. In torch 2.14 (float64; checked on CPU) these do not have one:

* ``layer_norm`` (``F.layer_norm``, ``torch.layer_norm``, hence ``nn.LayerNorm`` and
  timm's ``LayerNorm``), and ``batch_norm`` / ``instance_norm`` when they normalize
  with the statistics of their input. The fused kernel also returns the mean and
  ``1/√(var + ε)`` it used, and its forward-mode formula (``layer_norm_jvp``) reads
  them as constants, but they carry no tangent of their own: the outer forward
  level never sees how they move. Forward-over-forward ``d²LN(x)[u, v]`` is then
  off by about 100 % of its size (a 6-wide LayerNorm, see ``tests/test_counting.py``),
  and differentiated that way a ``Linear → nn.LayerNorm → Linear`` net (3 → 4 → 2)
  counts 3 laws instead of 7 (4 instead of 8 with ε = 0), with a clear gap.
* ``hardsigmoid`` and ``hardswish``: their backward kernels have no forward-mode derivative
  (``NotImplementedError``), so brackets of ``nn.Hardsigmoid`` and ``nn.Hardswish`` (MobileNetV3's
  gate and activation) could not be taken at all.
* ``gelu`` with ``approximate="tanh"`` and ``mish``: torch's own third derivative (mish: second too) is NaN at
  large |z| (past 30 and 10³), an overflow in the derivative formulas: the counter's θ' reach such z.
* ``glu`` (``nn.GLU``) and ``_weight_norm`` (``nn.utils.parametrizations.weight_norm``): no forward-mode
  derivative of their derivative kernels (``glu_jvp``, ``_weight_norm_interface``).
* ``scaled_dot_product_attention`` on CPU dispatches to a flash kernel that has no
  forward-mode derivative at all (``NotImplementedError``).
* ``embedding_bag`` (``nn.EmbeddingBag``): its fused kernel has no forward-mode derivative.
* ``embedding`` with a ``padding_idx``: its backward gives the padding row no gradient, its forward-mode
  derivative moves it, so two ways of taking D²f disagree. Training never moves that row: the stand-in holds it
  constant.
* ``rnn_relu`` and ``rnn_relu_cell`` (``nn.RNN``, ``nn.RNNCell`` with ``nonlinearity="relu"``): exact, but fused,
  so the ReLUs inside are not seen by the activation patterns of :mod:`.strata`; unrolled in
  :mod:`.unrolled_rnn`.

:func:`exact_derivatives` routes these to formulas built from elementary ops (whose
derivatives of every order are composed from exact ones) while it is active, and
puts torch's own back on exit, also after an error. Already exact and left alone:
``rms_norm``, ``group_norm``, ``normalize``, ``softmax``, ``log_softmax``, ``gelu``
(erf form), ``silu`` and the other activations. An op reached another way (a
module that imported ``layer_norm`` by name, a custom kernel) is not routed; the
counter's own derivative self-check then reports the count as inconclusive.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from conslaw_lite.counting.unrolled_rnn import rnn_relu, rnn_relu_cell
from conslaw_lite.laws import counted_eps


def _normalize(x: torch.Tensor, dims: tuple[int, ...], eps: float) -> torch.Tensor:
    """``(x − x̄) / √(mean((x − x̄)²) + ε)``, means over ``dims``."""
    centered = x - x.mean(dims, keepdim=True)
    return centered / torch.sqrt((centered * centered).mean(dims, keepdim=True) + eps)


def _affine(y: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, shape: Sequence[int]):
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def layer_norm(
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *_: object,  # torch.layer_norm's cudnn_enable
) -> torch.Tensor:
    """``γ ⊙ (x − x̄) / √(var x + ε) + β`` over the last ``len(normalized_shape)`` dimensions (``F.layer_norm``).

    Examples
    ========
    >>> x = torch.randn(2, 5, dtype=torch.float64)
    >>> torch.allclose(layer_norm(x, (5,)), F.layer_norm(x, (5,)))
    True
    """
    dims = tuple(range(-len(normalized_shape), 0))
    eps = counted_eps(eps)  # F.layer_norm written in a forward: ε as nn.LayerNorm's is counted
    return _affine(_normalize(input, dims, eps), weight, bias, tuple(normalized_shape))


def _channel_shape(x: torch.Tensor) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.dim() - 2)  # a per-channel (C,) weight broadcast over (N, C, ...)


def batch_norm(
    input: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.batch_norm``; with batch statistics, normalizes over every dimension but the channel (1).

    With running statistics the map is affine in x and torch's kernel is exact: it is used.
    Running statistics are not updated while counting (they do not change the output).

    Examples
    ========
    >>> x = torch.randn(4, 3, 2, dtype=torch.float64)
    >>> torch.allclose(batch_norm(x, None, None), F.batch_norm(x, None, None, training=True))
    True
    """
    if not training and running_mean is not None and running_var is not None:
        return _TORCH["batch_norm"](input, running_mean, running_var, weight, bias, training, momentum, eps)
    dims = (0, *range(2, input.dim()))
    return _affine(_normalize(input, dims, eps), weight, bias, _channel_shape(input))


def instance_norm(
    input: torch.Tensor,
    running_mean: torch.Tensor | None = None,
    running_var: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``F.instance_norm``; with input statistics, normalizes each (sample, channel) over the remaining dimensions.

    Examples
    ========
    >>> x = torch.randn(4, 3, 2, dtype=torch.float64)
    >>> torch.allclose(instance_norm(x), F.instance_norm(x))
    True
    """
    if not use_input_stats:
        return _TORCH["instance_norm"](input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
    dims = tuple(range(2, input.dim()))
    return _affine(_normalize(input, dims, eps), weight, bias, _channel_shape(input))


@functools.cache
def _inplace_position(func: Callable) -> int | None:
    """Where ``func`` takes ``inplace`` (``F.relu``: 1, ``F.hardtanh``: 3), or None."""
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: torch.relu, Tensor.clamp
        return None
    return names.index("inplace") if "inplace" in names else None


def modified_tensor(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The tensor a call writes in place: its ``out=``, or its input for ``relu_``, ``Tensor.clamp_`` and a call with
    ``inplace=True``; None for a call that returns a new tensor.

    Examples
    ========
    >>> h = torch.zeros(2)
    >>> modified_tensor(F.relu, (h,), {"inplace": True}) is h, modified_tensor(F.relu, (h, True), {}) is h
    (True, True)
    >>> modified_tensor(torch.Tensor.relu_, (h,), {}) is h, modified_tensor(torch.relu, (h,), {})
    (True, None)
    """
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor):
        return out
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    name = getattr(func, "__name__", "")
    if name.endswith("_") and not name.endswith("__"):
        return args[0]
    at = _inplace_position(func) if callable(func) else None
    return args[0] if kwargs.get("inplace", args[at] if at is not None and len(args) > at else False) else None


def as_torch_writes(func: Callable, args: tuple, kwargs: dict, stand_in: Callable[[tuple], torch.Tensor]):
    """``stand_in(args)``, a call's replacement, with the call's writes: for an in-place call (:func:`modified_tensor`)
    computed on a copy of its input (a tensor its derivative saved stays as it was) and written into the tensor torch
    would write, which it returns. A model that discards the result (``h.relu_()``) or reads an alias of the input
    (the view it was, its base) sees the change, as it does outside the counter (without it, ``h.relu_()`` counted as
    the identity: a ReLU MLP's N was 10 instead of 4, conclusive).

    Examples
    ========
    >>> h = torch.tensor([-1.0, 2.0])
    >>> as_torch_writes(torch.Tensor.relu_, (h,), {}, lambda a: a[0].clamp_min(0)) is h, h.tolist()
    (True, [0.0, 2.0])
    """
    target = modified_tensor(func, args, kwargs)
    if target is None:
        return stand_in(args)
    return target.copy_(stand_in((args[0].clone(), *args[1:])))


def hardsigmoid(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``clamp(z/6 + 1/2, 0, 1)`` (``F.hardsigmoid``, whose backward kernel has no forward-mode derivative).

    Examples
    ========
    >>> z = torch.linspace(-5, 5, 11, dtype=torch.float64)
    >>> torch.allclose(hardsigmoid(z), F.hardsigmoid(z))
    True
    """
    return as_torch_writes(hardsigmoid, (input,), {"inplace": inplace}, lambda a: (a[0] / 6 + 0.5).clamp(0, 1))


def hardswish(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``z · clamp(z + 3, 0, 6) / 6`` (``F.hardswish``, whose backward kernel has no forward-mode derivative).

    Examples
    ========
    >>> z = torch.linspace(-5, 5, 11, dtype=torch.float64)
    >>> torch.allclose(hardswish(z), F.hardswish(z))
    True
    """
    return as_torch_writes(hardswish, (input,), {"inplace": inplace}, lambda a: a[0] * (a[0] + 3).clamp(0, 6) / 6)


_GELU = F.gelu  # torch's own, which the stand-in calls for the erf form


def gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``F.gelu``; its tanh form as ``½ z (1 + tanh(√(2/π) (z + 0.044715 z³)))`` in elementary ops. Torch's own third
    derivative of that form is NaN past |z| ≈ 30 (an overflow in its derivative formula, not in the function), which
    refused every count of a model with ``nn.GELU(approximate="tanh")``.

    Examples
    ========
    >>> z = torch.linspace(-50, 50, 11, dtype=torch.float64)
    >>> torch.allclose(gelu(z, approximate="tanh"), F.gelu(z, approximate="tanh")), torch.equal(gelu(z), F.gelu(z))
    (True, True)
    """
    if approximate != "tanh":
        return _GELU(input, approximate=approximate)
    return 0.5 * input * (1 + torch.tanh(math.sqrt(2 / math.pi) * (input + 0.044715 * input**3)))


def mish(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``z · tanh(softplus(z))`` (``F.mish``, whose second and third derivatives from torch are NaN past |z| ≈ 10³).

    Examples
    ========
    >>> z = torch.linspace(-50, 50, 11, dtype=torch.float64)
    >>> torch.allclose(mish(z), F.mish(z))
    True
    """
    return as_torch_writes(mish, (input,), {"inplace": inplace}, lambda a: a[0] * torch.tanh(F.softplus(a[0])))


def glu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``a ⊙ σ(b)``, ``(a, b)`` the halves of the input along ``dim`` (``F.glu``, whose ``glu_jvp`` has no
    forward-mode derivative of its own: ``nn.GLU`` could not be counted).

    Examples
    ========
    >>> z = torch.randn(4, 6, dtype=torch.float64)
    >>> torch.allclose(glu(z), F.glu(z)), torch.allclose(glu(z, 0), F.glu(z, 0))
    (True, True)
    """
    a, b = input.chunk(2, dim)
    return a * torch.sigmoid(b)


def weight_norm(v: torch.Tensor, g: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``g · v / ‖v‖``, the norm over every axis but ``dim`` (all of them for ``dim = −1``): ``torch._weight_norm``,
    which ``nn.utils.parametrizations.weight_norm`` calls, and whose fused kernel has no forward-mode derivative.

    Examples
    ========
    >>> v, g = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64)
    >>> torch.allclose(weight_norm(v, g, 0), torch._weight_norm(v, g, 0))
    True
    """
    axes = [a for a in range(v.dim()) if a != dim % v.dim()] if dim != -1 else list(range(v.dim()))
    return v * (g / v.square().sum(axes, keepdim=True).sqrt())


_EMBEDDING = F.embedding  # torch's own, which the stand-in calls


def embedding(
    input: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None, max_norm: float | None = None,
    norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False,
) -> torch.Tensor:  # fmt: skip
    """``F.embedding`` with row ``padding_idx`` of ``weight`` held constant: torch's backward gives that row no
    gradient, so training never moves it, while its forward-mode derivative moves it (two ways of taking D²f
    disagreed on every ``nn.Embedding(padding_idx=…)``). Held constant, each of the row's entries is a law, as for a
    row the inputs never read. ``sparse`` is dropped: the same function, whose gradient torch's transforms take dense
    (a sparse one raised torch's NotImplementedError from inside the count).

    Examples
    ========
    >>> w, ids = torch.randn(4, 2, dtype=torch.float64), torch.tensor([0, 3, 0])
    >>> torch.equal(embedding(ids, w, 0), F.embedding(ids, w, 0))
    True
    >>> torch.func.jvp(lambda w: embedding(ids, w, 0), (w,), (torch.ones_like(w),))[1][:, 0].tolist()
    [0.0, 1.0, 0.0]
    """
    if padding_idx is not None:
        pad = torch.arange(weight.shape[0], device=weight.device) == padding_idx % weight.shape[0]
        weight = torch.where(pad[:, None], weight.detach(), weight)
    return _EMBEDDING(input, weight, None, max_norm, norm_type, scale_grad_by_freq, False)


_EMBEDDING_BAG = F.embedding_bag


def embedding_bag(
    input: torch.Tensor,
    weight: torch.Tensor,
    offsets: torch.Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: torch.Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> torch.Tensor:
    """``F.embedding_bag``: per bag, the sum, mean or max of the rows of ``weight`` its ids read (each times its
    ``per_sample_weights`` entry), ids equal to ``padding_idx`` left out (of the mean's count too), an empty bag 0.
    A bag is a row of a 2-D ``input``, or the ids of a 1-D one from one offset to the next.

    Examples
    ========
    >>> w, ids = torch.randn(5, 3, dtype=torch.float64), torch.tensor([[0, 2, 2], [4, 1, 0]])
    >>> all(torch.allclose(embedding_bag(ids, w, mode=m), F.embedding_bag(ids, w, mode=m)) for m in ("sum", "max"))
    True
    >>> flat, offsets = torch.tensor([1, 0, 3, 0]), torch.tensor([0, 1, 1])  # bags [1], [], [0, 3, 0]
    >>> torch.allclose(embedding_bag(flat, w, offsets, padding_idx=0), F.embedding_bag(flat, w, offsets, padding_idx=0))
    True
    """
    if max_norm is not None:  # renormalizes rows in place: the counter refuses it (module_checks), torch's says why
        return _EMBEDDING_BAG(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                              per_sample_weights, include_last_offset, padding_idx)  # fmt: skip
    ids, kept, scale = _bags(input, offsets, include_last_offset, per_sample_weights)
    if padding_idx is not None:
        kept = kept & (ids != padding_idx % len(weight))
    rows = _EMBEDDING(ids, weight)
    rows = rows if scale is None else rows * scale[..., None]
    if mode == "max":
        top = torch.where(kept[..., None], rows, -torch.inf).amax(1)
        return torch.where(kept.any(1)[:, None], top, 0)
    out = (rows * kept[..., None]).sum(1)
    return out if mode == "sum" else out / kept.sum(1).clamp(min=1)[:, None]


def _bags(
    input: torch.Tensor, offsets: torch.Tensor | None, include_last_offset: bool, weights: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Bags as the rows of an (n, L) matrix of ids, with which entries are ids (``kept``) and their weights: a 2-D
    ``input`` as it is; a 1-D one cut at its ``offsets``, each bag padded to the longest."""
    if input.dim() == 2:
        return input, torch.ones_like(input, dtype=torch.bool), weights
    starts = offsets[:-1] if include_last_offset else offsets
    bags = torch.bucketize(torch.arange(len(input), device=input.device), starts, right=True) - 1
    position = torch.arange(len(input), device=input.device) - starts[bags]
    shape = (len(starts), int(position.max()) + 1 if len(input) else 1)
    ids, kept = input.new_zeros(shape), torch.zeros(shape, dtype=torch.bool, device=input.device)
    ids[bags, position], kept[bags, position] = input, True
    if weights is None:
        return ids, kept, None
    padded = weights.new_zeros(shape)
    padded[bags, position] = weights
    return ids, kept, padded


_TORCH = {"layer_norm": F.layer_norm, "batch_norm": F.batch_norm, "instance_norm": F.instance_norm}
_ROUTES = [(F, "layer_norm", layer_norm), (torch, "layer_norm", layer_norm), (F, "batch_norm", batch_norm),
           (F, "instance_norm", instance_norm), (F, "hardsigmoid", hardsigmoid),
           (F, "hardswish", hardswish), (F, "gelu", gelu), (F, "mish", mish), (F, "glu", glu),
           (torch, "_weight_norm", weight_norm),
           (F, "embedding", embedding), (F, "embedding_bag", embedding_bag), (torch._VF, "rnn_relu", rnn_relu),
           (torch._VF, "rnn_relu_cell", rnn_relu_cell)]  # fmt: skip


@contextmanager
def quiet_vmap() -> Iterator[None]:
    """Without torch's note, at every call, that vmap loops over an op without a batching rule (rrelu's backward, a
    fused attention kernel's): of its speed only, and the callers say how long they run.

    Examples
    ========
    >>> with quiet_vmap():
    ...     warnings.warn("There is a performance drop because we have not yet implemented the batching rule")
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "There is a performance drop because we have not yet implemented")
        yield


@contextmanager
def exact_derivatives() -> Iterator[None]:
    """Within the block, the ops listed in the module docstring have exact derivatives of every order.

    ``F.layer_norm``, ``torch.layer_norm``, ``F.batch_norm``, ``F.instance_norm``, ``F.hardsigmoid``,
    ``F.hardswish``, ``F.gelu`` (its tanh form), ``F.mish``, ``F.glu``, ``torch._weight_norm``, ``F.embedding``
    (holding its padding row constant), ``F.embedding_bag`` and torch's ReLU RNN ops (``_VF.rnn_relu``,
    ``_VF.rnn_relu_cell``) are replaced by the elementary formulas of this module (of :mod:`.unrolled_rnn` for the
    RNN), and ``F.scaled_dot_product_attention`` runs torch's composite ``MATH`` backend (``softmax(QKᵀ/√k + mask)
    V`` in elementary ops). A reference to one of those ops taken before the block (``functools.partial(F.gelu,
    approximate="tanh")``) is routed too (:class:`_Routed`). Everything is restored on exit.

    Examples
    ========
    >>> with exact_derivatives():
    ...     F.layer_norm is layer_norm
    True
    >>> F.layer_norm is layer_norm
    False
    """
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in _ROUTES]
    with ExitStack() as stack:
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        stack.enter_context(quiet_vmap())
        stack.callback(lambda: [setattr(owner, name, op) for owner, name, op in saved])
        for owner, name, op in _ROUTES:
            setattr(owner, name, op)
        stack.enter_context(_Routed({op: route for (_, _, op), (_, _, route) in zip(saved, _ROUTES, strict=True)}))
        yield


class _Routed(TorchFunctionMode):
    """A call of one of the ops replaced, through a reference taken before the block (transformers' ``GELUTanh``
    holds ``functools.partial(F.gelu, approximate="tanh")``), goes to its replacement too."""

    def __init__(self, routes: dict) -> None:
        super().__init__()
        self.routes = routes

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.routes.get(func, func)(*args, **(kwargs or {}))  # a stand-in does an in-place call's writes
