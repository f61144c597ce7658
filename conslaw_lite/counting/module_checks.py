"""Is a forward countable: float64 throughout, deterministic, one input at a time, differentiable, in its own mode.

The counter (:func:`conslaw_lite.counting.count_laws`) ranks ``N = D − dim Lie(W)(θ)`` for the
function it evaluates, in float64, one sample per row of its inputs. A forward can defeat that in
ways that give a count with a clear gap which is nevertheless wrong, so they are refused with a
one-line ``ValueError`` naming the layer (its name in ``named_modules`` and its class) and what to do:

* **Lower precision.** An op that turns a float64 tensor into float32, float16 or bfloat16
  (``h.float().to(x.dtype)`` around a softmax or a norm, as mixed-precision code does) adds
  round-off of about 10⁻⁷ relative to every vector the counter stacks; that fills the law
  directions far above ``CUT`` = 10⁻⁸, and a two-layer ReLU net counts N = 0 instead of 3. Found by
  running one forward under a dispatch mode that sees every aten op. A float32 *constant* (a factory
  such as ``full_like`` or ``torch.arange(..., dtype=torch.float32)``) is not data and passes.
  Parameters in float16 or bfloat16 mean a model trained in that precision: the counter would count
  the float64 function instead (it casts a module's copy to float64), so it asks for ``.double()``.
* **Randomness.** Two calls with the same θ and inputs must agree (``dropout`` in train mode does not).
* **Train mode.** A module is counted in the mode it is in, which for a fresh module is train
  mode. Where train and eval mode compute different functions (BatchNorm's batch statistics, any
  forward that reads ``self.training``), the eval-mode laws are not those of train-mode training
  (a BatchNorm makes the rows before it scale-invariant: other laws), so neither is counted silently.
* **Batch coupling.** The outputs of the first k inputs must not change when the batch is cut to
  those k, nor those of the last k (a recurrent layer that reads the batch as time, ``batch_first=False``, passes
  the first test): the counter's W is spanned by per-input gradients ∇_θ f_i(x; θ).
* **A value of θ read into Python.** ``c.item() > 0``, ``float(c)``, ``bool(c)`` of a tensor computed from the
  parameters: a branch on it is taken as the θ drawn decides (the count changed with the seed), and a number read
  out of autograd has no derivative in θ. Found with a function mode on a forward whose parameters require grad.
* **Not the loss's gradient.** An embedding with ``max_norm`` rescales the rows it reads, in place, in every forward;
  one with ``scale_grad_by_freq`` divides each row's gradient by how often its id occurs in the batch. Either way
  training does not follow the gradient flow whose laws are counted, so the option is named instead.
* **A cast of θ to integers.** ``X.diagonal().int()`` (torch's Householder map) is constant in θ between steps, and
  random θ land on other steps than the model's (a ReLU MLP behind it counted N = 20, its own θ at most 10): refused
  at random θ, not near the model's (``at=``).
* **No derivative.** An output whose gradient in θ is zero at every θ tried, behind an op whose
  derivative is zero wherever it exists (``round``, ``floor``, ``sign``, a comparison, ``argmax``),
  has no gradient flow to count.

The differing layer is the first submodule, in the order their calls finish, whose output differs
between the two runs compared (train vs eval, call vs call, the whole batch vs its first rows).
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from conslaw_lite.config import evaluating
from conslaw_lite.counting.layer_kinds import describe_layer, is_batch_norm, is_dropout_layer

Params = Mapping[str, torch.Tensor]

PROBE_SAMPLES = 6  # inputs of the probe batch: ≥ 2 for batch statistics, cut to half of them for coupling
TOL = 1e-9  # relative difference of two float64 outputs that is more than round-off
# Random θ at which an output's gradient must vanish before its op is blamed; where all such ops are comparisons,
# whose pieces the counter forces, at the model's scale times 10^k for k = 0, 1, −1, ... in turn: (z > 1)·z after
# each of three layers at nn.Linear's scale is zero on nearly every input (a cast of θ, as torch's Householder map
# has, is blamed at the model's scale: a count at other scales fails later, with a less helpful message)
GRADIENT_DRAWS = 8
COMPARED = frozenset({"gt", "lt", "ge", "le"})
LOWER_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Ops whose float output takes only the shape (or nothing) of their float64 input: a constant, not a downcast.
_FACTORIES = frozenset(
    "zeros_like ones_like empty_like full_like rand_like randn_like randint_like new_zeros new_ones "
    "new_empty new_full new_empty_strided scalar_tensor".split()
)
# Ops whose derivative is zero wherever it exists: the output behind them does not move with θ.
_FLAT = frozenset(
    "round floor ceil trunc sign sgn signbit heaviside floor_divide bucketize searchsorted argmax argmin "
    "gt lt ge le eq ne".split()
)


def check_dtypes(params: Params, module: nn.Module | None = None) -> None:
    """Refuse parameters in float16 or bfloat16: a model trained in that precision is not its float64 function.

    ``module`` (the model the parameters belong to) lets the message name the layer.

    Examples
    ========
    >>> check_dtypes(dict(nn.Linear(2, 2).named_parameters()))  # float32: cast to float64 and counted
    >>> check_dtypes(dict(nn.Linear(2, 2).half().named_parameters()))
    Traceback (most recent call last):
    ...
    ValueError: parameter 'weight' is float16: ...
    """
    for name, p in params.items():
        if not isinstance(p, torch.Tensor) or not (p.is_complex() or p.dtype in (torch.float16, torch.bfloat16)):
            continue
        owner = name.rpartition(".")[0]
        where = f" of {describe_layer(owner, module.get_submodule(owner))}" if module is not None and owner else ""
        if p.is_complex():
            raise ValueError(
                f"parameter {name!r}{where} is complex ({p.dtype}): the laws are counted in real coordinates; write it "
                f"as two real parameters (its real and imaginary parts) and build the complex tensor in forward"
            )
        raise ValueError(
            f"parameter {name!r}{where} is {_dtype(p.dtype)}: the counter would count its float64 function, not "
            f"the {_dtype(p.dtype)} one that trains; call model.double() to count the exact function's laws"
        )


def check_countable(
    apply: Callable[[Params, torch.Tensor], torch.Tensor],
    params: Params,
    inputs: torch.Tensor,
    module: nn.Module | None = None,
    random_theta: bool = True,
) -> None:
    """Refuse, with a one-line ``ValueError``, a forward that the counter would count wrongly.

    ``apply(params, inputs)`` is the model (float64 ``params`` by name, a batch of ``inputs``);
    ``module`` is the ``nn.Module`` it calls, if any, which names the layer at fault and whose mode
    is checked; ``random_theta``: the count is at random θ, not near ``params``. See the module docstring for the
    checks. Global random state, the module's
    buffers (a BatchNorm's running statistics) and each submodule's mode are left as they were.

    Examples
    ========
    >>> import torch
    >>> from torch import nn
    >>> from torch.func import functional_call
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Linear(4, 2)).double()
    >>> apply = lambda p, x: functional_call(net, p, (x,))
    >>> x = torch.randn(6, 3, dtype=torch.float64)
    >>> check_countable(apply, dict(net.named_parameters()), x, net)  # a fresh module is in train mode
    Traceback (most recent call last):
    ...
    ValueError: `1` (Dropout, p=0.1) is random in train mode: call model.eval() to count the deterministic function
    >>> check_countable(apply, dict(net.eval().named_parameters()), x, net)  # eval mode: countable, no error
    """
    _check_embedding_options(module)
    leaves = {n: p.detach().to(torch.float64).requires_grad_() for n, p in params.items()}
    with _restored(module):
        first = _run(apply, leaves, inputs, module, dispatch=True)
        if first.downcast is not None:
            name, op, dtype, line = first.downcast
            raise ValueError(
                f"{_where(name, module)} computes in {_dtype(dtype)} (aten.{op} of a float64 tensor{line}): its "
                f"round-off fills the directions of the laws and the count would be wrong; cast up, not down "
                f"(h.to(torch.promote_types(h.dtype, torch.float32))), to count the exact function"
            )
        if first.written is not None:
            name, op, param, line = first.written
            raise ValueError(
                f"{_where(name, module)} writes into parameter {param!r} in forward (aten.{op}{line}): θ changes "
                "outside the gradient step, which no law of gradient flow survives; do it after optimizer.step(), "
                "outside forward, or count the model without it"
            )
        if first.theta_cast is not None and random_theta:
            name, dtype, line = first.theta_cast
            raise ValueError(
                f"{_where(name, module)} casts a value computed from θ to {_dtype(dtype)}{line}: the function is "
                "constant in θ between the cast's steps, random θ land on other steps than the model's own θ, with "
                "other laws (torch's Householder orthogonal map zeroes each column whose X.diagonal() lies in "
                "(−1, 1)); count near the model's θ with at=dict(model.named_parameters()) (certify --at-own)"
            )
        _check_deterministic(first, _run(apply, leaves, inputs, module), module)
        if module is not None and any(m.training for m in module.modules()):
            _check_train_is_eval(first, apply, leaves, inputs, module)
        _check_per_input(first, apply, leaves, inputs, module)
        _check_differentiable(first, apply, leaves, inputs, module)


# ---------------------------------------------------------------- runs of the forward


@dataclass
class _Run:
    """One forward: its output, every submodule call (name, output tensors) in the order they finished."""

    output: torch.Tensor
    calls: list[_Call] = field(default_factory=list)
    downcast: tuple[str, str, torch.dtype, str] | None = None  # (innermost module, aten op, dtype, line) of the first
    flat: list[tuple[str, str]] = field(default_factory=list)  # (module, op) of ops with zero derivative
    theta_cast: tuple[str, torch.dtype, str] | None = None  # (module, dtype, line) of the first cast of θ to integers
    written: tuple[str, str, str, str] | None = None  # (module, aten op, parameter, line) of the first op writing one


class _Call(NamedTuple):
    """One submodule call: its name, output and input tensors, and the module whose forward called it (``None``: the
    model itself, called from outside)."""

    name: str
    outputs: list[torch.Tensor]
    inputs: list[torch.Tensor]
    caller: str | None


class _Calls:
    """Forward hooks on every submodule: the innermost one running, and each call when it finishes."""

    def __init__(self, module: nn.Module | None) -> None:
        self.stack: list[str] = []
        self.calls: list[_Call] = []
        self.hooks = []
        for name, sub in module.named_modules() if module is not None else ():
            if "parametrizations" in name.split("."):  # called where the weight is read: when is the code path's
                continue
            self.hooks.append(sub.register_forward_pre_hook(lambda _m, _x, name=name: self.stack.append(name)))
            self.hooks.append(sub.register_forward_hook(self._finished, always_call=True))

    def _finished(self, _module: nn.Module, inputs: object, output: object) -> None:
        name = self.stack.pop() if self.stack else ""
        outputs, inputs = ([t.detach() for t in _tensors(x)] for x in (output, inputs))
        self.calls.append(_Call(name, outputs, inputs, self.stack[-1] if self.stack else None))

    def where(self) -> str | None:
        return self.stack[-1] if self.stack else None

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()


class _Watch(TorchDispatchMode):
    """Notes the first op that turns float64 data into a lower precision, every op with zero derivative, and the first
    op that writes into a parameter (``params``, by name)."""

    def __init__(self, where: Callable[[], str | None], params: Params) -> None:
        super().__init__()
        self.where = where
        self.downcast: tuple[str, str, torch.dtype, str] | None = None
        self.flat: list[tuple[str, str]] = []
        self.theta_cast: tuple[str, torch.dtype, str] | None = None
        self.written: tuple[str, str, str, str] | None = None
        self.spans = [(p.data_ptr(), p.data_ptr() + p.numel() * p.element_size(), name) for name, p in params.items()]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = func.overloadpacket.__name__
        for arg, value in zip(func._schema.arguments, args):
            if self.written is None and arg.alias_info is not None and arg.alias_info.is_write:
                at = value.data_ptr() if isinstance(value, torch.Tensor) else -1  # a parameter's memory, or a view's
                names = [name for start, end, name in self.spans if start <= at < end]
                self.written = (self.where(), op, names[0], _forward_line()) if names else None
        out = func(*args, **(kwargs or {}))
        inputs = _tensors((args, kwargs))
        if op in _FACTORIES or not any(t.dtype == torch.float64 for t in inputs):
            return out
        outputs = _tensors(out)
        lower = [t.dtype for t in outputs if t.dtype in LOWER_DTYPES]
        moving = any(t.requires_grad for t in inputs if t.dtype == torch.float64)  # computed from θ: not a constant
        if lower and moving and self.downcast is None:
            self.downcast = (self.where(), op, lower[0], _forward_line())
        cast = op == "_to_copy" and any(not t.is_floating_point() for t in outputs)
        if op.rstrip("_") in _FLAT or cast:
            self.flat.append((self.where(), op if not cast else f"a cast to {outputs[0].dtype}"))
        if cast and self.theta_cast is None and any(t.requires_grad for t in inputs):  # a value computed from θ
            self.theta_cast = (self.where(), outputs[0].dtype, _forward_line())
        return out


def _forward_line() -> str:
    """``", at FILE:LINE"``: the innermost line of the running forward outside torch and conslaw_lite (the user's
    own), ``""`` when all of it is theirs (a block of this package)."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename == __file__ and frame.name == "_run":  # the forward's caller: outside the forward
            return ""
        if not frame.filename.startswith(_LIBRARIES) and not frame.filename.startswith("<"):
            return f", at {frame.filename}:{frame.lineno}"
    return ""


_LIBRARIES = (str(Path(torch.__file__).parent), str(Path(__file__).resolve().parents[1]))  # torch, conslaw_lite
_TO_PYTHON = frozenset(
    {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__float__, torch.Tensor.__int__,
     torch.Tensor.__index__}
)  # fmt: skip


class _PythonValues(TorchFunctionMode):
    """Notes the first value of a tensor that depends on θ (it requires grad) read into Python: (module, method)."""

    def __init__(self, where: Callable[[], str | None]) -> None:
        super().__init__()
        self.where = where
        self.read: tuple[str | None, str] | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _TO_PYTHON and self.read is None and args[0].requires_grad:
            self.read = (self.where(), func.__name__)
        return func(*args, **(kwargs or {}))


def _run(
    apply: Callable, params: Params, inputs: torch.Tensor, module: nn.Module | None, dispatch: bool = False
) -> _Run:
    calls = _Calls(module)
    watch = _Watch(calls.where, params)
    values = _PythonValues(calls.where)
    try:
        if dispatch:
            with watch, values, warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Converting a tensor with requires_grad=True to a scalar")
                out = apply(params, inputs)
        else:
            out = apply(params, inputs)
    finally:
        calls.remove()
    if values.read is not None:
        name, method = values.read
        raise ValueError(
            f"{_where(name, module)} reads a value computed from the parameters into Python (Tensor.{method}): a "
            "branch on it follows the θ drawn, and the number has no derivative in θ; write it with tensor "
            "operations (torch.where, a mask) to count the function"
        )
    return _Run(out, calls.calls, watch.downcast, watch.flat, watch.theta_cast, watch.written)


@contextmanager
def _restored(module: nn.Module | None) -> Iterator[None]:
    """Global random state, buffers and modes as they were (a train-mode BatchNorm updates its statistics)."""
    buffers = [(b, b.detach().clone()) for b in module.buffers()] if module is not None else []
    modes = [(m, m.training) for m in module.modules()] if module is not None else []
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
            for m, training in modes:
                m.training = training


# ---------------------------------------------------------------- the checks


def _check_embedding_options(module: nn.Module | None) -> None:
    """An ``nn.Embedding`` with ``max_norm`` rescales the rows it reads, in place, in every forward: θ changes
    outside the gradient step, and no law of gradient flow survives that. With ``scale_grad_by_freq`` each row's
    gradient is divided by its id's count in the batch: a step along another field than the loss's gradient."""
    for name, m in module.named_modules() if module is not None else ():
        if not isinstance(m, (nn.Embedding, nn.EmbeddingBag)):
            continue
        if m.max_norm is not None:
            raise ValueError(
                f"{_where(name, module)} renormalizes the rows it reads in place in forward (max_norm="
                f"{m.max_norm:g}): θ changes outside gradient flow; count it with max_norm=None"
            )
        if m.scale_grad_by_freq:
            raise ValueError(
                f"{_where(name, module)} divides each row's gradient by how often its id occurs in the batch "
                "(scale_grad_by_freq=True): training does not follow the loss's gradient flow, whose laws are "
                "counted; count it with scale_grad_by_freq=False"
            )


def _check_deterministic(first: _Run, second: _Run, module: nn.Module | None) -> None:
    name = _first_difference(first, second)
    if name is None:
        return
    layer = _layer(module, name)
    if layer is not None and layer.training and is_dropout_layer(layer):
        raise ValueError(
            f"{_where(name, module)} is random in train mode: call model.eval() to count the deterministic function"
        )
    training = module is not None and any(m.training for m in module.modules())
    raise ValueError(
        f"{_where(name, module)} gives another output on a second call with the same θ and inputs (random numbers "
        f"in forward, or state that forward updates): the counter needs a deterministic function; "
        + (
            "in train mode, a dropout inside it or a buffer its forward updates (spectral_norm's) does this: call "
            "model.eval()"
            if training
            else "fix its randomness to count it"
        )
    )


def _check_train_is_eval(first: _Run, apply: Callable, params: Params, inputs: torch.Tensor, module: nn.Module):
    with evaluating(module):
        evaluated = _run(apply, params, inputs, module)
    name = _first_difference(first, evaluated)
    if name is None:
        return
    layer = _layer(module, name)
    if is_batch_norm(layer):
        raise ValueError(
            f"{_where(name, module)} normalizes with batch statistics in train mode: the laws of batch-coupled "
            f"training are not those of one input; call model.eval() to count the eval-mode function (fixed running "
            f"statistics)"
        )
    raise ValueError(
        f"{_where(name, module)} computes another function in train mode than in eval mode (it reads self.training): "
        f"the laws of one are not those of the other; call model.eval() to count the eval-mode function"
    )


def _check_per_input(first: _Run, apply: Callable, params: Params, inputs: torch.Tensor, module: nn.Module | None):
    n = len(inputs) if inputs.dim() else 0
    k = n // 2
    if k < 1:
        return  # no batch of inputs to cut
    part = _run(apply, params, inputs[:k], module)
    if part.output.shape == first.output.shape:
        raise ValueError(
            f"the output has shape {tuple(first.output.shape)} for {n} inputs and for {k}: forward reduces over the "
            f"batch (a sum or mean over inputs?), and the counter counts the laws of a function of one input; return "
            f"one output per input and let the loss reduce"
        )
    if first.output.dim() == 0 or len(first.output) != n:
        return  # the batch is not the output's first dimension: nothing to compare row by row
    name = _first_difference(first, part, rows=(n, slice(0, k)))
    if name is None:
        name = _first_difference(first, _run(apply, params, inputs[n - k :], module), rows=(n, slice(n - k, n)))
    if name is None:
        name = _alone(first, apply, params, inputs, module)
    if name is None:
        return
    layer = _layer(module, name)
    what = "mixes the inputs of a batch"
    if is_batch_norm(layer):
        what = "normalizes with batch statistics" + (
            "" if layer.training else " in eval mode too (no running statistics)"
        )
    elif isinstance(layer, nn.RNNBase) and not layer.batch_first:
        what += " (batch_first=False: it reads the first dimension as time; build it with batch_first=True)"
    raise ValueError(
        f"{_where(name, module)} {what}: the output for one input depends on the others, and the counter counts the "
        f"laws of a function of one input (a row of the batch); make each row's output depend on that row alone"
    )


def _alone(first: _Run, apply: Callable, params: Params, inputs: torch.Tensor, module: nn.Module | None) -> str | None:
    """The first difference (:func:`_first_difference`) of an input's output computed alone from its output in the
    batch: a branch on a statistic of the batch (``if x.sum() > 0``) took the same side for both halves of it by
    chance, and a conclusive count changed with the seed. A forward that fails on one input is not asked."""
    n = len(inputs)
    for i in range(n):
        try:
            name = _first_difference(first, _run(apply, params, inputs[i : i + 1], module), rows=(n, slice(i, i + 1)))
        except Exception:  # noqa: BLE001 - a forward that needs two inputs (a squeeze): the halves were compared
            return None
        if name is not None:
            return name
    return None


def _check_differentiable(first: _Run, apply: Callable, params: Params, inputs: torch.Tensor, module: nn.Module | None):
    if not first.output.is_floating_point():
        return  # the counter refuses a non-floating output itself
    culprit = f"{_where(first.flat[0][0], module)} applies {first.flat[0][1]}" if first.flat else ""
    if not first.output.requires_grad:
        cause = f"{culprit}, whose derivative is zero where it exists" if culprit else "no autograd path from θ"
        raise ValueError(
            f"the output does not depend differentiably on θ ({cause}; a .detach() or torch.no_grad() in forward?): "
            f"there is no gradient flow to count"
        )
    if not culprit:
        return  # a zero gradient here may be a dead ReLU layer at this θ: the counter tries more θ itself
    gen, rms = torch.Generator().manual_seed(0), {n: _rms(p) for n, p in params.items()}
    compared = all(op in COMPARED for _, op in first.flat)
    for draw in range(GRADIENT_DRAWS):
        if draw:
            scale = 10.0 ** (draw // 2 * (-1) ** draw) if compared else 1.0  # 1, 10, 0.1, 100, ...
            params = {n: torch.randn(p.shape, generator=gen, dtype=p.dtype) * rms[n] * scale for n, p in params.items()}
        if _gradient_flows(apply, params, inputs, gen):
            return
    zero = (
        f"{culprit}, whose derivative is zero where it exists: the output's gradient in θ is zero at all "
        f"{GRADIENT_DRAWS} random θ tried" + (", from 10⁻³ to 10³ times the model's scale" if compared else "")
    )
    if module is not None and _gradient_flows(apply, {n: module.get_parameter(n) for n in params}, inputs, gen):
        raise ValueError(
            f"{zero}, not at the model's own θ: the cast reads θ itself (signs or indices of its entries, as torch's "
            "Householder orthogonal map does), or the gradient flows only where a value lies in a narrow band that "
            "the model's θ reaches ((z > 0.8) & (z < 1.2)); count near the model's θ with "
            "at=dict(model.named_parameters()) (certify --at-own)"
        )
    raise ValueError(
        f"{zero}, there is no gradient flow there; if it flows only where a value lies in a narrow band "
        "((z > 0.8) & (z < 1.2)), count near a θ where it does, with at= (a straight-through estimator, "
        "x + (round(x) − x).detach(), trains along a field that is no derivative of the model's values: no count)"
    )


def _gradient_flows(apply: Callable, params: Params, inputs: torch.Tensor, gen: torch.Generator) -> bool:
    """Whether the output's gradient at ``params`` (copied to float64) is nonzero somewhere."""
    params = {n: p.detach().to(torch.float64).requires_grad_() for n, p in params.items()}
    out = apply(params, inputs)
    if not out.requires_grad:
        return False
    a = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    grads = torch.autograd.grad((a * out).sum(), list(params.values()), allow_unused=True)
    return any(g is not None and bool(g.abs().max() > 0) for g in grads)


# ---------------------------------------------------------------- helpers


def _first_difference(a: _Run, b: _Run, rows: tuple[int, slice] | None = None) -> str | None:
    """The first submodule call whose output differs between two runs; ``""`` if only the output does; else None.
    Where that call's input differs too, no module called before it made the difference: its caller's own forward
    did (``x + torch.randn_like(x)`` before ``self.fc``), and the caller is named.

    ``rows = (n, part)``: run b saw the rows ``part`` (a slice) of run a's n inputs; only tensors with the batch first
    are compared.
    """
    for call_a, call_b in zip(a.calls, b.calls):
        if call_a.name != call_b.name:  # the calls themselves differ: the module that ran in one and not the other
            return call_a.name if rows is None else None  # on fewer rows, one run under an `if` (strata names it)
        if _any_differ(call_a.outputs, call_b.outputs, rows):
            inherited = call_a.caller is not None and _any_differ(call_a.inputs, call_b.inputs, rows)
            return call_a.caller if inherited else call_a.name
    if (len(a.calls) != len(b.calls) and rows is None) or _differ(a.output, b.output, rows):
        return ""
    return None


def _any_differ(xs: list[torch.Tensor], ys: list[torch.Tensor], rows: tuple[int, slice] | None) -> bool:
    return len(xs) != len(ys) or any(_differ(x, y, rows) for x, y in zip(xs, ys))


def _differ(x: torch.Tensor, y: torch.Tensor, rows: tuple[int, slice] | None = None) -> bool:
    if rows is not None:
        n, part = rows
        if x.dim() == 0 or y.dim() == 0 or len(x) != n or len(y) != len(range(n)[part]) or x.shape[1:] != y.shape[1:]:
            return False  # no batch dimension first: nothing to compare row by row
        x = x[part]
    x, y = x.detach(), y.detach()
    if x.shape != y.shape or x.dtype != y.dtype:
        return True
    if not x.is_floating_point():
        return not torch.equal(x, y)
    size = float(torch.maximum(x.abs().max(), y.abs().max())) if x.numel() else 0.0
    return bool(((x - y).abs() > TOL * size).any()) or bool((x.isnan() != y.isnan()).any())


def _tensors(obj: object) -> list[torch.Tensor]:
    """The tensors in a (nested) tuple, list or dict."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors(item)]
    return []


def _rms(p: torch.Tensor) -> float:
    return float(p.detach().pow(2).mean().sqrt()) or 1.0


def _layer(module: nn.Module | None, name: str | None) -> nn.Module | None:
    if module is None or name is None:
        return None
    return module.get_submodule(name) if name else module


def _where(name: str | None, module: nn.Module | None) -> str:
    if module is None or name is None:
        return "the model function" if module is None else f"the model ({type(module).__name__})"
    return describe_layer(name, _layer(module, name))


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
