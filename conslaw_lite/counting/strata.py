"""Activation patterns of piecewise-linear models: which pattern each input takes, and which units a θ leaves dead.

A ReLU network is a different polynomial on each region of (θ, x) where the signs
of its pre-activations are fixed: with the pattern m of those signs, the model is
``f_m(x; θ)``, every ReLU replaced by multiplication with m. A unit of layer ≥ 2
reads post-ReLU inputs, which are never negative: if its incoming weights are all
negative it is **dead** for every input (output 0), if they are all positive it is
**linear** (ReLU acts as the identity). Both happen on open sets of θ (probability
about 2^(1−width) per unit), and near such θ the unit's weights are conserved
trivially or two layers merge: there are more laws there.
:func:`activation_pattern` records, with one plain forward pass, which units a θ
leaves on one piece for the sampled inputs.

Recorded: ``torch.relu``, ``F.relu``, ``Tensor.relu`` (hence ``nn.ReLU``) and
``F.leaky_relu`` (``nn.LeakyReLU``), the activations with one kink at 0, applied
to a tensor whose first dimension is the batch of inputs. The laws of the whole
parameter space are also taken with the pieces of ``|z|`` and of every clamp at
number bounds (``torch.clamp``/``clip``, ``clamp_min``, ``clamp_max``, ``F.hardtanh``,
``F.relu6``, hence ``nn.ReLU6``, ``nn.Hardtanh``), ``F.hardsigmoid`` and ``F.hardswish`` (clamps of ``z/6 + 1/2``
and ``z + 3``, however the model reached them: ``exact_ops`` routes ``F.hardsigmoid`` by name only),
``F.prelu``, ``F.rrelu`` in eval mode, ``F.hardshrink`` and ``F.softshrink`` (pieces at ±λ): a unit that one θ
leaves below its cap (or inside ±λ) for every input is capped for others (:data:`PIECEWISE`).
So are the activations made of two analytic pieces at 0, ``F.elu``, ``F.selu`` and ``F.celu`` (``z`` and
``α(eᶻ − 1)``): an ELU unit that one θ keeps positive on every input (behind a ``tanh``, whose output is bounded)
is linear there, with the law of a linear unit, and the other piece breaks it. So are the branches a
forward takes on the batch of inputs (:func:`_branch`): a comparison's result (``torch.where(z > 0, z, 0)``,
``z * (z > 0)``) and the operand a select keeps (``torch.maximum``/``minimum``, ``F.threshold``): a ReLU written
that way counted the laws of the pieces one θ realized (5 instead of 3). A unit is an index of
the last dimension (a feature in ``nn.Linear`` layout); the other dimensions
(inputs, tokens) are its samples.

**The laws of the whole parameter space.** A law h of the model holds at every θ,
so on the open set of θ where an input x has activation pattern m it is a law of
the polynomial ``f_m(x; θ)`` (every ReLU replaced by multiplication with m). h is
analytic (the laws of these models are polynomials), so ``⟨∇h, ∇f_m(x; θ)⟩ = 0``,
zero on an open set, is zero at every θ: each law is conserved by the fields of
*every* pattern that some θ realizes on some input, not only of those the θ at
hand realizes. :func:`.covering.covering_patterns` collects such patterns (each realized by
a random θ' on its input) and :func:`forced_patterns` evaluates the model with
them, so the counter sees all these fields at one θ. Near a particular θ there
can be more laws, which hold only there: a dead unit's weights, or a rank that
drops on an open set of θ (a ReLU net's *functional dimension* is not the same
everywhere; Grigsby et al. 2022).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from conslaw_lite.activations import kinked_at_zero
from conslaw_lite.counting import exact_ops

KINKED_AT_ZERO = kinked_at_zero()  # the activations' kinks, from their table
ABS = frozenset({torch.abs, torch.abs_, torch.Tensor.abs, torch.Tensor.abs_})
CLAMPS = frozenset(
    {torch.clamp, torch.clamp_, torch.clip, torch.clip_, torch.Tensor.clamp, torch.Tensor.clamp_, torch.Tensor.clip,
     torch.Tensor.clip_, torch.clamp_min, torch.clamp_min_, torch.Tensor.clamp_min, torch.Tensor.clamp_min_,
     torch.clamp_max, torch.clamp_max_, torch.Tensor.clamp_max, torch.Tensor.clamp_max_, F.hardtanh, F.hardtanh_,
     F.relu6}
)  # fmt: skip
# Clamps of an affine map of the input, torch's one-kernel activations: u = a·z + b clamped to [lo, hi] as (a, b, lo,
# hi); hardswish is z·clamp(z + 3, 0, 6)/6. exact_ops routes F.hardsigmoid and F.hardswish to clamps by name; a model
# holding torch's function from before reaches torch's kernel, or under a torch function mode, exact_ops' function
# as the call's func (torch looks the name up again), whose clamp inside the mode's handler no mode sees.
HARDSWISH = frozenset({F.hardswish, exact_ops.hardswish})
HARD = {f: (1 / 6, 0.5, 0.0, 1.0) for f in (F.hardsigmoid, exact_ops.hardsigmoid)} | {
    f: (1.0, 3.0, 0.0, 6.0) for f in HARDSWISH
}
PRELU = frozenset({F.prelu, torch.prelu})  # z and a·z, the slope a a parameter
RRELU = frozenset({F.rrelu, F.rrelu_})  # in eval mode z and a·z, a = (lower + upper)/2; random in training
# Three pieces at ±λ: hardshrink z, 0, z; softshrink z + λ, 0, z − λ. Behind a bounded layer (a tanh) a θ can keep a
# unit inside ±λ for every input, dead there.
SHRINK = frozenset({F.hardshrink, torch.Tensor.hardshrink, F.softshrink})
# Two analytic pieces at 0, z and α·expm1(z/c) (selu: both times its scale): each unit's piece is recorded and
# forced as a ReLU's is.
EXPONENTIAL = frozenset({F.elu, F.elu_, F.selu, torch.selu, torch.selu_, F.celu, torch.celu, torch.celu_})
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
# How far past 0 the exponential piece is continued: an input that puts a unit on it where z > this at θ is flagged
# (_Forced.far) and left out by the counter. e^20 ≈ 5·10⁸: its gradient row keeps the other terms 10⁷ above round-off,
# and the brackets' e^(3z) stays finite (an ELU on its exp piece at z = 600 gave a finite output, NaN brackets).
EXP_CONTINUATION = 20.0
# Every piecewise primitive whose pattern the counter records and forces: units kinked at 0 (their pieces z and αz,
# or z and an exponential), |z| (z and −z), and clamps at any bounds (lo, z, hi).
RANGED = CLAMPS | frozenset(HARD) | SHRINK  # the calls with pieces below, between and above two bounds (codes 0/1/2)
PIECEWISE = KINKED_AT_ZERO | ABS | RANGED | PRELU | RRELU | EXPONENTIAL
# Branches on the batch of inputs: a comparison's result (torch.where(z > 0, z, 0), z * (z > 0)) and which operand a
# select takes (torch.maximum(z, 0): a ReLU written another way) are pieces too, recorded and forced as a ReLU's are.
COMPARISONS = frozenset(
    {torch.gt, torch.lt, torch.ge, torch.le, torch.greater, torch.less, torch.greater_equal, torch.less_equal,
     torch.Tensor.gt, torch.Tensor.lt, torch.Tensor.ge, torch.Tensor.le, torch.Tensor.greater, torch.Tensor.less,
     torch.Tensor.greater_equal, torch.Tensor.less_equal, torch.Tensor.__gt__, torch.Tensor.__lt__,
     torch.Tensor.__ge__, torch.Tensor.__le__}
)  # fmt: skip
LARGER = frozenset({torch.maximum, torch.Tensor.maximum, torch.fmax, torch.Tensor.fmax, torch.max, torch.Tensor.max})
SMALLER = frozenset({torch.minimum, torch.Tensor.minimum, torch.fmin, torch.Tensor.fmin, torch.min, torch.Tensor.min})
BRANCHES = COMPARISONS | LARGER | SMALLER | {F.threshold}


def clamp_bounds(func, args: tuple, kwargs: dict) -> tuple[float | None, float | None] | None:
    """``(lo, hi)`` of a clamp-like call (``None`` for a missing side); ``None`` if a bound is a tensor."""
    if func in HARD:
        return HARD[func][2:]
    if func in SHRINK:
        lambd = call_argument(args, kwargs, 1, "lambd", 0.5)
        return -lambd, lambd
    if func is F.relu6:
        return 0.0, 6.0
    name = func.__name__.rstrip("_")
    first = args[1] if len(args) > 1 else kwargs.get("min")
    if func in (F.hardtanh, F.hardtanh_):  # Hardtanh(0, inf): a ReLU
        lo, hi = call_argument(args, kwargs, 1, "min_val", -1.0), call_argument(args, kwargs, 2, "max_val", 1.0)
    elif name == "clamp_min":
        lo, hi = first, None
    elif name == "clamp_max":
        lo, hi = None, (args[1] if len(args) > 1 else kwargs.get("max"))
    else:
        lo, hi = first, args[2] if len(args) > 2 else kwargs.get("max")
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        return None
    return tuple(None if b is not None and math.isinf(b) else b for b in (lo, hi))  # ±inf: no piece beyond


def call_argument(args: tuple, kwargs: dict, position: int, name: str, default: object) -> object:
    """A call's argument, given by position or by name."""
    return args[position] if len(args) > position else kwargs.get(name, default)


def _clamped(func, z: torch.Tensor) -> torch.Tensor:
    """What a clamp-like call clamps: its input, or ``a·z + b`` for :data:`HARD`."""
    if func not in HARD:
        return z
    a, b, _, _ = HARD[func]
    return z * a + b


def _is_piecewise(func, args: tuple, kwargs: dict) -> bool:
    """A call of a piecewise-linear primitive on a tensor (a clamp with number bounds)."""
    if func not in PIECEWISE or not args or not isinstance(args[0], torch.Tensor):
        return False
    if func in RRELU:
        return not call_argument(args, kwargs, 3, "training", False)
    return func not in CLAMPS or clamp_bounds(func, args, kwargs) is not None


def _branch(func, args: tuple, kwargs: dict, batch: int | None) -> tuple | None:
    """``(taken, first, second, shape)`` of a comparison or select whose result has the batch of inputs first:
    ``taken()`` computes the boolean the branch takes (a comparison's result; whether a select takes ``first``),
    ``first`` and ``second`` are a select's operands, ``shape`` the result's; ``None`` for any other call (a mask of
    the weights alone, a causal mask, ``torch.max(z, dim)``)."""
    if batch is None or not args or func not in BRANCHES:
        return None
    if func is F.threshold:
        z, at, value = (*args, None, None)[:3]
        first, second, taken = z, kwargs.get("value", value), lambda: z.detach() > kwargs.get("threshold", at)
    else:
        first, second = args[0], args[1] if len(args) > 1 else kwargs.get("other")
        if func not in COMPARISONS and not isinstance(second, torch.Tensor):
            return None  # torch.max(z, dim): a reduction
        larger = func in LARGER

        def taken():
            a, b = (t.detach() if isinstance(t, torch.Tensor) else t for t in (first, second))
            return func(a, b) if func in COMPARISONS else (a >= b if larger else a <= b)

    tensors = [t for t in (first, second) if isinstance(t, torch.Tensor)]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors)) if tensors else ()
    if not shape or shape[0] != batch:
        return None
    return taken, first, second, shape


def piece_of(func, args: tuple, kwargs: dict, batch: int | None = None) -> torch.Tensor | None:
    """The piece each entry of a piecewise-linear call's input is on: ``z > 0`` for a kink at 0 or |z|,
    0/1/2 (below lo, between, above hi) for a clamp, the branch taken for a comparison or select on the ``batch`` of
    inputs (:func:`_branch`); ``None`` for any other call."""
    branch = _branch(func, args, kwargs, batch)
    if branch is not None:
        return branch[0]()
    if not _is_piecewise(func, args, kwargs):
        return None
    z = args[0]
    if func not in RANGED:
        return z.detach() > 0
    lo, hi = clamp_bounds(func, args, kwargs)
    u = _clamped(func, z.detach())
    code = torch.ones_like(u, dtype=torch.int64)
    if lo is not None:
        code = code - (u < lo).long()
    if hi is not None:
        code = code + (u > hi).long()
    return code


def _on_piece(func, args: tuple, kwargs: dict, m: torch.Tensor, branch: tuple | None = None) -> torch.Tensor:
    """The call's output with each entry on its recorded piece ``m`` (0/1 or 0/1/2, as :func:`piece_of` gives);
    ``branch``: the call's :func:`_branch`, when it is one."""
    if branch is not None:
        _, first, second, _ = branch
        return m.bool() if func in COMPARISONS else torch.where(m.bool(), first, second)
    z = args[0]
    if func in ABS:
        return z * (2 * m - 1)
    if func in SHRINK:
        lo, hi = clamp_bounds(func, args, kwargs)
        if func is F.softshrink:
            return (z - lo) * (m == 0).to(z.dtype) + (z - hi) * (m == 2).to(z.dtype)
        return z * (m != 1).to(z.dtype)
    if func in CLAMPS or func in HARD:
        lo, hi = clamp_bounds(func, args, kwargs)
        out = _clamped(func, z) * (m == 1).to(z.dtype)
        if lo is not None:
            out = out + lo * (m == 0).to(z.dtype)
        if hi is not None:
            out = out + hi * (m == 2).to(z.dtype)
        return z * out / 6 if func in HARDSWISH else out
    if func in EXPONENTIAL:
        return _exponential(func, args, kwargs, m.bool())
    if func in PRELU:
        a = call_argument(args, kwargs, 1, "weight", None)
        a = a.reshape(1, -1, *[1] * (z.dim() - 2)) if a.numel() > 1 and z.dim() >= 2 else a
        return z * (m + a * (1 - m))
    if func in RRELU:
        slope = (call_argument(args, kwargs, 1, "lower", 1 / 8) + call_argument(args, kwargs, 2, "upper", 1 / 3)) / 2
        return z * (m + slope * (1 - m))
    leaky = func in (F.leaky_relu, F.leaky_relu_)
    slope = call_argument(args, kwargs, 1, "negative_slope", 0.01) if leaky else 0.0
    return z * (m + slope * (1 - m))


def _exponential(func, args: tuple, kwargs: dict, on: torch.Tensor) -> torch.Tensor:
    """An ELU-like call with each entry on its recorded piece: ``z`` where ``on``, ``α·expm1(z/c)`` elsewhere (the
    analytic piece continued past 0), both times SELU's scale for ``selu``."""
    z = args[0]
    if func in (F.selu, torch.selu, torch.selu_):
        alpha, inner, scale = SELU_ALPHA, 1.0, SELU_SCALE
    else:
        alpha = call_argument(args, kwargs, 1, "alpha", 1.0)
        inner, scale = alpha if func in (F.celu, torch.celu, torch.celu_) else 1.0, 1.0
    negative = alpha * torch.expm1(torch.where(on, 0.0, z) / inner)  # 0 on the other piece: no exp of a large z
    return scale * torch.where(on, z, negative)


@dataclass(frozen=True)
class Stratum:
    """The activation pattern met at one random θ (the ``draw``-th of the counter's sequence for its seed).

    ``dead`` units were never active on the sampled inputs (pre-activation ≤ 0 on
    all of them), ``linear`` units never inactive; units are named
    ``"<module>[j]"`` (``"relu#k[j]"`` for the k-th ReLU call outside a named
    module). ``constant``: the output's gradient in θ was zero there. ``rank`` is
    dim Lie(W) at that θ when the counter computed it.
    """

    draw: int
    dead: tuple[str, ...] = ()
    linear: tuple[str, ...] = ()
    constant: bool = False
    rank: int | None = None

    @property
    def generic(self) -> bool:
        """Every unit active on some inputs and inactive on others, and the output moves with θ."""
        return not (self.dead or self.linear or self.constant)

    def describe(self) -> str:
        """One line: which θ, which units on one piece, the rank if known.

        Examples
        ========
        >>> Stratum(3, dead=("2[0]",), rank=17).describe()
        'θ #3: dead 2[0]; rank 17'
        """
        parts = [f"dead {', '.join(self.dead)}"] if self.dead else []
        parts += [f"always active {', '.join(self.linear)}"] if self.linear else []
        parts += ["output constant in θ"] if self.constant else []
        parts += [f"rank {self.rank}"] if self.rank is not None else []
        return f"θ #{self.draw}: " + ("; ".join(parts) or "generic")


class _Recorder(TorchFunctionMode):
    """Keeps the input of every activation kinked at 0 applied to a batch of ``batch`` inputs."""

    def __init__(self, batch: int, where: Callable[[], str]) -> None:
        super().__init__()
        self.batch, self.where = batch, where
        self.calls: list[tuple[str, torch.Tensor]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        x = args[0] if args else None
        if func in KINKED_AT_ZERO and isinstance(x, torch.Tensor) and x.dim() >= 2 and x.shape[0] == self.batch:
            in_place = exact_ops.modified_tensor(func, args, kwargs or {}) is not None
            self.calls.append((self.where(), x.detach().clone() if in_place else x))  # in place: overwritten
        return func(*args, **(kwargs or {}))


@contextmanager
def _module_names(module: nn.Module | None) -> Iterator[Callable[[], str]]:
    """While active, a function giving the name of the innermost submodule running (``""`` outside any)."""
    stack: list[str] = []
    hooks = []
    for name, sub in module.named_modules() if module is not None else ():
        if name:
            hooks.append(sub.register_forward_pre_hook(lambda _m, _x, name=name: stack.append(name)))
            hooks.append(sub.register_forward_hook(lambda _m, _x, _y: stack.pop() and None))  # None: output kept
    try:
        yield lambda: stack[-1] if stack else ""
    finally:
        for hook in hooks:
            hook.remove()


def _reach(out: object, pre: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """``∂⟨w, out⟩/∂pre`` for a fixed random w, per tensor (``None`` where it cannot be taken)."""
    tracked = [p for p in pre if p.requires_grad]
    if not isinstance(out, torch.Tensor) or not out.requires_grad or not tracked:
        return [None] * len(pre)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=out.dtype).to(out.device)
    grads = iter(torch.autograd.grad((out * w).sum(), tracked, allow_unused=True))
    return [next(grads) if p.requires_grad else None for p in pre]


def activation_pattern(
    forward: Callable[[], object], batch: int, module: nn.Module | None = None
) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """``(dead, linear, units)``: the units ``forward()`` leaves on one piece over its ``batch`` inputs, of ``units``.

    ``forward`` runs the model once and returns its output; ``module``, if given, names the units.
    Dead: no sample where the unit is active (pre-activation > 0) *and* reaches the
    output (a random combination of the outputs has a nonzero derivative in its
    pre-activation there: a unit active only where every path after it is off is
    dead too); linear: pre-activation ≥ 0 at every sample (a sample at exactly 0,
    e.g. all of a unit's inputs off, decides nothing).

    Examples
    ========
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Linear(2, 2, bias=False), nn.ReLU(), nn.Linear(2, 2, bias=False), nn.ReLU())
    >>> with torch.no_grad():
    ...     _ = net[0].weight.copy_(torch.eye(2))
    ...     _ = net[2].weight.copy_(torch.tensor([[-1.0, -2.0], [1.0, -1.0]]))  # unit 0 of layer 2: dead
    >>> x = torch.randn(64, 2, generator=torch.Generator().manual_seed(0))
    >>> activation_pattern(lambda: net(x), 64, net)
    (('3[0]',), (), 4)
    """
    with _module_names(module) as where, _Recorder(batch, where) as recorder, torch.enable_grad():
        out = forward()
    reach = _reach(out, [pre for _, pre in recorder.calls])
    dead, linear, seen, units = [], [], {}, 0
    for (where, pre), g in zip(recorder.calls, reach):
        seen[where] = seen.get(where, 0) + 1
        label = where if where and seen[where] == 1 else f"{where or 'relu'}#{seen[where]}"
        samples = pre.detach().reshape(-1, pre.shape[-1])
        units += samples.shape[1]
        on, off = (samples > 0).any(0), (samples < 0).any(0)
        used = on if g is None else ((samples > 0) & (g.reshape(samples.shape) != 0)).any(0)
        dead += [f"{label}[{j}]" for j in torch.nonzero(~used).flatten().tolist()]
        linear += [f"{label}[{j}]" for j in torch.nonzero(on & ~off).flatten().tolist()]
    return tuple(dead), tuple(linear), units


class Signs(TorchFunctionMode):
    """Keeps the piece of every entry of every piecewise-linear call's input (:func:`piece_of`; branches on a ``batch``
    of inputs too), in call order, and whether each call's input entries were all finite (a boolean tensor each, so
    that it runs under ``torch.func.vmap`` too, where a batched tensor has no single truth value)."""

    def __init__(self, batch: int | None = None) -> None:
        super().__init__()
        self.batch = batch
        self.on: list[torch.Tensor] = []
        self.of_theta: list[bool] = []  # whether each call's operand requires grad (where θ does)
        self.checks: list[torch.Tensor] = []

    def all_finite(self) -> torch.Tensor:
        """Whether every input entry of every piecewise call was finite, as a boolean tensor."""
        return torch.stack(self.checks).all() if self.checks else torch.ones((), dtype=torch.bool)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        piece = piece_of(func, args, kwargs or {}, self.batch)
        if piece is not None:
            self.on.append(piece)
            operand = args[0] if isinstance(args[0], torch.Tensor) else args[1]
            self.of_theta.append(operand.requires_grad)
            self.checks.append(torch.isfinite(operand.detach()).all())
        return func(*args, **(kwargs or {}))


def parameter_pieces(forward: Callable[[torch.Tensor], object], x: torch.Tensor) -> tuple[tuple[int, ...], ...]:
    """The pieces each piecewise call that does not act per input (a clamp or ReLU of the weights alone) puts its
    entries on, at the θ ``forward`` computes with (which requires grad: a call of constants alone, positions
    clamped to a window, is no kink of θ): one sorted tuple of codes (:func:`piece_of`) per such call.

    Examples
    ========
    >>> W, P = torch.tensor([[1.0, -2.0], [0.5, 0.2]], requires_grad=True), torch.arange(4.0).reshape(2, 2)
    >>> parameter_pieces(lambda x: x @ W.clamp(-0.5, 0.5) @ P.clamp(max=2) + torch.relu(x), torch.ones(11, 2))
    ((0, 1, 2),)
    """
    with Signs(len(x)) as signs:
        forward(x)
    return tuple(
        tuple(sorted(set(on.flatten().long().tolist())))
        for on, of_theta in zip(signs.on, signs.of_theta)
        if of_theta and (on.dim() == 0 or on.shape[0] != len(x))
    )


PROBE_BATCHES = (11, 13)  # batch sizes kinked_calls runs: a tensor of θ alone rarely has that many rows, so a mask
# of the weights is not taken for a branch on the inputs (a weight with 2 rows was, at a batch of 2)


def kinked_calls(forward: Callable[[torch.Tensor], object], x: torch.Tensor) -> tuple[int, bool]:
    """``(calls, per_input)``: how many piecewise-linear calls ``forward`` applies to copies of the input ``x[0]``,
    and whether each acts per input.

    *Per input*: the call's input has the batch of inputs as its first dimension, at each of the
    ``PROBE_BATCHES``, so a pattern can be paired with each input (:func:`.covering.covering_patterns`); a ReLU of the
    weights alone has no such dimension (and a comparison or select of them is no branch: :func:`_branch`).

    Examples
    ========
    >>> import torch
    >>> x = torch.ones(1, 2)
    >>> kinked_calls(lambda x: torch.relu(x) + torch.tanh(x), x)
    (1, True)
    >>> kinked_calls(lambda x: x @ torch.relu(torch.ones(2, 2)), x)
    (1, False)
    >>> kinked_calls(lambda x: torch.where(x > 0, x, 0.0) + (torch.ones(2, 2) > 0).sum(), x)  # a mask of θ: no branch
    (1, True)
    """
    calls, per_input = set(), True
    for batch in PROBE_BATCHES:
        part = torch.cat([x[:1]] * batch)
        with Signs(batch) as signs:
            forward(part)
        calls.add(len(signs.on))
        per_input = per_input and all(on.dim() > 0 and on.shape[0] == batch for on in signs.on)
    if len(calls) > 1:
        raise ValueError("the model applies a different number of ReLUs to different batches of inputs")
    return calls.pop(), per_input


class _Forced(TorchFunctionMode):
    """Applies the j-th piecewise-linear call on its recorded pieces ``m_j`` (:func:`_on_piece`): a unit kinked
    at 0 as ``z · (m_j + α (1 − m_j))`` (α: the leaky slope, 0 for ReLU), |z| as ``z (2m_j − 1)``, a clamp as
    lo, z or hi entry by entry."""

    def __init__(self, patterns: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.patterns, self.calls = patterns, 0
        self.batch = patterns[0].shape[0] if patterns and patterns[0].dim() else None  # branches: on the inputs' batch
        # the inputs that put a unit on an exponential piece past EXP_CONTINUATION (on the batch of the patterns)
        self.far = torch.zeros(self.batch or 0, dtype=torch.bool)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        branch = _branch(func, args, kwargs, self.batch)
        if branch is None and not _is_piecewise(func, args, kwargs):
            return func(*args, **kwargs)
        if self.calls == len(self.patterns):
            raise ValueError(
                f"the model applies more than the {len(self.patterns)} ReLUs whose patterns were recorded: a "
                "piecewise operation (relu, abs, clamp) that the recording did not see, as inside a custom "
                "autograd.Function's forward; write it with torch operations outside the Function, or give laws="
            )
        m = self.patterns[self.calls]
        self.calls += 1
        shape = branch[3] if branch is not None else args[0].shape
        if tuple(shape) != tuple(m.shape):
            raise ValueError(
                f"ReLU #{self.calls}: input of shape {tuple(shape)}, pattern recorded for {tuple(m.shape)}"
            )
        if func in EXPONENTIAL and self.batch is not None and m.dim() and m.shape[0] == self.batch:
            far = (m == 0) & (args[0].detach() > EXP_CONTINUATION)
            self.far = self.far | far.reshape(self.batch, -1).any(1).cpu()
        return exact_ops.as_torch_writes(func, args, kwargs, lambda a: _on_piece(func, a, kwargs, m, branch))


@contextmanager
def forced_patterns(patterns: Sequence[torch.Tensor]) -> Iterator[_Forced]:
    """While active, every activation kinked at 0 multiplies by its recorded pattern instead of testing signs;
    the mode it yields flags, in ``far``, the inputs that took an exponential piece past ``EXP_CONTINUATION``.

    The model becomes the polynomial ``f_m`` of the patterns m (one per ReLU call, in
    order, as :func:`.covering.covering_patterns` returns them); torch's derivatives in θ are then
    those of ``f_m``, at any θ.

    Examples
    ========
    >>> import torch
    >>> with forced_patterns([torch.tensor([1.0, 0.0])]):
    ...     torch.relu(torch.tensor([-2.0, 3.0]))
    tensor([-2., 0.])
    """
    with _Forced(patterns) as mode:
        yield mode
