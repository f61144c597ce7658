"""What the counter works on: a model as a function of the flat θ, its random θ and its inputs.

:func:`problem_of` turns a module (or a function of the parameter dict) into a :class:`Problem`;
:func:`sample_inputs` draws inputs over six decades of scale and :func:`balanced_inputs` weighs each
input so that none buries the others (:mod:`conslaw_lite.counting`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.func import functional_call, jvp
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

from conslaw_lite.counting.module_checks import check_dtypes
from conslaw_lite.counting.training_field import gradient_hooks
from conslaw_lite.laws import RAISED, Params, counted_eps, float64_form, say_once
from conslaw_lite.time_limit import OutOfTime
from conslaw_lite.wrapped_modules import module_copy, unwrapped

Model = nn.Module | Callable[[Params, torch.Tensor], torch.Tensor]


Field = Callable[[torch.Tensor], torch.Tensor]  # θ (D,) -> tangent vector (D,)


# Tensor weights are at most 10³ times the smallest. Round-off in any coordinate is about ε times the
# largest tensor's share, so weighting amplifies it to at most 10³ε, far below CUT: a tensor no gradient
# moves (a key bias) is not blown up into spurious directions, as it was at 10⁶ (ranks 64 and 65 for MHA
# with biases). Typical shares of real models differ by less (timm's class token: 10³ times the MLP's).
WEIGHT_FLOOR = 1e-3


EMBEDDING_LAYERS = (nn.Embedding, nn.EmbeddingBag)  # layers that read token ids, not float inputs
TOKEN_IDS = "; its nn.Embedding reads token ids: give them with inputs= (a batch of integers), not input_shape="
# decades from nn.Linear's scale within which a search or a check draws each tensor (Problem.random_theta): at a
# model's own 10⁻⁶ a law's products θ_jθ_k are round-off beside its θ_j, and a wrong term c·b² of biases at 10⁻⁶ hides
NEAR_STANDARD = 2.0
INPUT_DECADES = (-3.0, 3.0)  # log10 range of the scales of half the sampled inputs (_input_scales)


@dataclass(frozen=True)
class Problem:
    """The model as a function of one flat parameter vector: ``apply(unflatten(θ), x)``."""

    apply: Callable[[Params, torch.Tensor], torch.Tensor]
    shapes: dict[str, torch.Size]
    scales: dict[str, float]
    module: nn.Module | None = None  # names the ReLU units of a module
    device: torch.device = torch.device("cpu")  # where θ, the inputs and the basis live (random numbers: the CPU)
    unseen_kinks: tuple[str, ...] = ()  # kinks of θ no activation pattern is taken of (counting.unseen_kinks)

    def on(self, device: torch.device) -> Problem:
        """The same problem computed on ``device``: a module is copied there; a function must follow its inputs."""
        if device == self.device:
            return self
        if self.module is None:
            return replace(self, device=device)
        module = module_copy(self.module).to(device)
        return replace(self, apply=_module_apply(module), module=module, device=device)

    def modules(self) -> list[nn.Module]:
        """The module's layers (none for a function)."""
        return [] if self.module is None else list(self.module.modules())

    def to_device(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs (or anything drawn on the CPU) moved to the problem's device."""
        return x.to(self.device)

    @property
    def sizes(self) -> list[int]:
        """The number of entries of each parameter tensor, in θ's order."""
        return [math.prod(s) for s in self.shapes.values()]

    @property
    def num_params(self) -> int:
        return sum(self.sizes)

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(theta, self.sizes)
        return {n: p.reshape(s) for (n, s), p in zip(self.shapes.items(), parts)}

    def flatten(self, values: Params) -> torch.Tensor:
        """The flat θ of parameter values given by name (``ValueError`` naming a missing or misshapen one)."""
        for name, shape in self.shapes.items():
            if name not in values or tuple(values[name].shape) != tuple(shape):
                raise ValueError(f"at: parameter {name!r} of shape {tuple(shape)} is missing or has another shape")
        return torch.cat([values[n].detach().to(self.device, torch.float64).reshape(-1) for n in self.shapes])

    def random_theta(
        self, gen: torch.Generator, factor: float = 1.0, standard: bool = False, decades: float | None = None
    ) -> torch.Tensor:
        """Each tensor standard normal times ``factor`` times its scale (:func:`_scales`), or with ``standard``
        times ``1/√(last dimension)`` (``nn.Linear``'s scale for a weight, 1 for a vector); with ``decades``, each
        tensor's own scale brought within ``10^±decades`` of that standard one.

        Examples
        ========
        >>> tiny = problem_of(lambda p, x: x @ p["w"], {"w": torch.full((3, 2), 1e-6)})
        >>> float(tiny.random_theta(torch.Generator()).abs().max()) < 1e-5
        True
        >>> float(tiny.random_theta(torch.Generator(), decades=2.0).abs().max()) > 1e-4
        True
        """
        ones = {n: s[-1] ** -0.5 if len(s) > 1 else 1.0 for n, s in self.shapes.items()}
        scale = ones if standard else self.scales
        if decades is not None and not standard:
            scale = {n: min(max(scale[n], one * 10.0**-decades), one * 10.0**decades) for n, one in ones.items()}
        parts = [torch.randn(s, generator=gen, dtype=torch.float64) * scale[n] for n, s in self.shapes.items()]
        return (torch.cat([p.reshape(-1) for p in parts]) * factor).to(self.device)

    def key(self, input_shape: tuple[int, ...] | None, inputs: torch.Tensor | None) -> str:
        """What a count of this problem was of, as a short hash: the module's structure (its ``repr``: layers, their
        options), each parameter's name and shape, and one input's shape. A count given to ``check_laws`` or
        ``find_laws`` must have the key of the model it checks.

        Examples
        ========
        >>> relu = problem_of(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)), None)
        >>> gelu = problem_of(nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 1)), None)
        >>> relu.key((2,), None) == gelu.key((2,), None), relu.key((2,), None) == relu.key(None, torch.ones(5, 2))
        (False, True)
        """
        shape = (input_shape,) if isinstance(input_shape, int) else tuple(input_shape or ())
        one = tuple(inputs.shape[1:]) if isinstance(inputs, torch.Tensor) else shape
        counted = (repr(self.module), [(n, tuple(s)) for n, s in self.shapes.items()], one)
        return hashlib.sha1(repr(counted).encode()).hexdigest()[:16]

    def unread(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The coordinates (D,) of the tensors the output on ``x`` has no autograd path to."""
        values = {n: v.detach().requires_grad_() for n, v in self.unflatten(theta).items()}
        out = self.apply(values, x)
        grads = torch.autograd.grad(out.sum(), list(values.values()), allow_unused=True)
        flags = [torch.full((v.numel(),), g is None, device=theta.device) for v, g in zip(values.values(), grads)]
        return torch.cat(flags)

    def whole_tensors(self, flags: torch.Tensor) -> torch.Tensor:
        """The boolean (D,) ``flags`` kept only on tensors flagged in every coordinate."""
        parts = [part if bool(part.all()) else torch.zeros_like(part) for _, part in self.split(flags)]
        return torch.cat(parts)

    def split(self, flat: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """A flat (D,) vector cut into its parameter tensors' coordinates, with their names."""
        return list(zip(self.shapes, torch.split(flat, self.sizes)))

    def outputs(self, inputs: torch.Tensor, weights: torch.Tensor | None = None) -> Field:
        """θ ↦ every output on ``inputs``, flattened (S·out,); input s's outputs times ``weights[s]`` if given."""
        if weights is None:
            return lambda theta: self.apply(self.unflatten(theta), inputs).reshape(-1)
        rows = lambda theta: self.apply(self.unflatten(theta), inputs).reshape(len(inputs), -1)  # noqa: E731
        return lambda theta: (rows(theta) * weights[:, None]).reshape(-1)


@contextmanager
def transformable() -> Iterator[None]:
    """torch.func's refusal of a forward it cannot transform, inside the block, as the ``ValueError`` that says what
    to do (it was torch's RuntimeError from inside the package: a BLOOM's monitor crashed).

    Examples
    ========
    >>> with transformable():
    ...     raise RuntimeError("... an autograd.Function ... must override the setup_context staticmethod")
    Traceback (most recent call last):
    ...
    ValueError: torch.func cannot differentiate through an autograd.Function without setup_context (...
    """
    try:
        yield
    except RuntimeError as err:
        if "saved tensor hooks" in str(err):
            raise ValueError(
                "torch.func cannot differentiate through saved tensor hooks (torch.utils.checkpoint with "
                "use_reentrant=False, or saved_tensors_hooks in the forward): count the model without them "
                "(transformers: model.eval() or model.gradient_checkpointing_disable())"
            ) from err
        if "does not have vmap support" in str(err):
            raise ValueError(
                "torch.func cannot vmap over an autograd.Function without a vmap rule: give it generate_vmap_rule = "
                "True (or a vmap staticmethod), or write it in torch operations"
            ) from err
        if "setup_context" in str(err):
            raise ValueError(
                "torch.func cannot differentiate through an autograd.Function without setup_context "
                "(torch.utils.checkpoint with use_reentrant=True, or a Function of one's own): count the model "
                "without checkpointing (transformers: model.eval()), or give the Function a setup_context"
            ) from err
        raise


def problem_of(model: Model, params: Params | None) -> Problem:
    """Validate the model and its parameters; the module is copied to float64 (:func:`~conslaw_lite.laws.float64_form`),
    in the mode it is in."""
    module, model = None, unwrapped(model)
    if isinstance(model, nn.Module):
        if params is not None:
            raise TypeError("params is only for a model given as a function f(params, x); a module has its own")
        check_dtypes(dict(model.named_parameters()), model)
        hook = gradient_hooks(model)  # asked of the model itself: its float64 copy holds no hook
        if hook:
            raise ValueError(f"{hook}: training does not step along the loss's gradient, whose laws are counted")
        closed = [name or "the model" for name, m in model.named_modules() if _closure_forward(m)]
        if closed:
            raise ValueError(
                f"{', '.join(closed)}: a forward set on the instance as a function (m.forward = lambda x: ...) reads "
                "the modules it closes over, not the float64 copy that the counter evaluates; define forward in a "
                "subclass, or bind it to its module with types.MethodType(f, m) (f taking the module first)"
            )
        module = float64_form(model)
        _tiny_constants_raised(module, model)
        params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        apply = _module_apply(module)

    elif callable(model):
        if params is None:
            raise TypeError("a model given as a function f(params, x) needs params={name: tensor}")

        def apply(p: Params, x: torch.Tensor) -> torch.Tensor:
            with GradOffIsConstant(), FunctionalEpsRaised():
                return one_output(model(p, x), len(x))

        check_dtypes(params)
    else:
        raise TypeError(f"model must be an nn.Module or a function f(params, x), got {type(model).__name__}")
    if not params:
        raise ValueError("the model has no trainable parameters: there is nothing to count")
    for name, p in params.items():
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameter {name!r} is a {type(p).__name__}, not a tensor")
        if not torch.isfinite(p).all():
            raise ValueError(f"parameter {name!r} contains NaN or infinite entries")
    return Problem(apply, {n: p.shape for n, p in params.items()}, _scales(params), module)


def _tiny_constants_raised(form: nn.Module, model: nn.Module) -> None:
    """A number in (0, ``MIN_EPS``) in a one-entry tensor of ``form`` (a buffer, an attribute: a norm's ε written by
    hand) counted at ``MIN_EPS``, as one added in forward is (:class:`FunctionalEpsRaised`): as is, ε = 0's laws."""
    for path, layer in form.named_modules():
        for name, t in [*layer._buffers.items(), *vars(layer).items()]:
            if not isinstance(t, torch.Tensor) or t.numel() != 1 or not t.is_floating_point():
                continue
            if counted_eps(eps := float(t)) != eps:  # replaced, not written: a registered form may share it
                say_once(model.get_submodule(path), f"`{path + '.' * bool(path)}{name}` holds {eps:.3g} > 0: {RAISED}")
                setattr(layer, name, torch.full_like(t, counted_eps(eps)))


def _closure_forward(module: nn.Module) -> bool:
    """Whether ``module`` has a forward of its instance that is not a method bound to it (a copy of the module keeps
    the same function, closed over the original's parameters).

    Examples
    ========
    >>> lin = nn.Linear(2, 2)
    >>> _closure_forward(lin)
    False
    >>> lin.forward = lambda x: 2 * x
    >>> _closure_forward(lin)
    True
    """
    fn = vars(module).get("forward")
    return fn is not None and getattr(fn, "__self__", None) is not module


def _module_apply(module: nn.Module) -> Callable[[Params, torch.Tensor], object]:
    """``(params, x) ↦`` the module's output with those parameters, one row per input. Each call gets its own copy
    of the module's buffers: a forward that writes one in place (``self.calls += 1``) would write a tensor captured
    from outside ``torch.func``'s transforms, which they refuse, and would change the function from call to call."""

    def apply(p: Params, x: torch.Tensor) -> object:
        with GradOffIsConstant(), FunctionalEpsRaised():
            state = {name: b.clone() for name, b in module.named_buffers()} | dict(p)  # where .to() left them
            return one_output(functional_call(module, state, (x,)), len(x))

    return apply


class GradOffIsConstant(TorchFunctionMode):
    """What a model computes with gradients off inside its forward (``with torch.no_grad():``, a
    ``@torch.no_grad()`` helper) is a constant, as training's backward sees it: the outputs of those ops are
    detached. The counter's forward-mode derivatives (``jvp``) ignore the grad mode and would differentiate
    through them; ``.detach()`` stops both. Ops are left alone when gradients were already off on entry.

    Backward's own marks are skipped too: ``requires_grad_()`` in a forward (the hook transformers'
    ``gradient_checkpointing_enable()`` puts on the input embeddings) tells autograd what to record, which the
    counter's derivatives need not be told, and torch.func refuses it inside its transforms.

    Examples
    ========
    >>> w = torch.tensor(2.0, dtype=torch.float64)
    >>> def f(w):
    ...     with torch.no_grad():
    ...         scale = w * w
    ...     return scale * w
    >>> torch.func.jvp(f, (w,), (torch.ones_like(w),))[1].item()  # d(w³)/dw: through the no_grad block
    12.0
    >>> def counted(w):
    ...     with GradOffIsConstant():
    ...         return f(w)
    >>> torch.func.jvp(counted, (w,), (torch.ones_like(w),))[1].item()  # w² held constant, as backward holds it
    4.0
    """

    def __enter__(self) -> GradOffIsConstant:
        self.grad_on_entry = torch.is_grad_enabled()
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.requires_grad_:
            return args[0]
        out = func(*args, **(kwargs or {}))
        if not self.grad_on_entry or torch.is_grad_enabled():
            return out
        return tree_map_only(torch.Tensor, torch.Tensor.detach, out)


EPS_AT = {F.layer_norm: 4, F.rms_norm: 3, F.group_norm: 4}  # the position of ε among each functional norm's arguments
ADDS = {torch.add, torch.Tensor.add, torch.Tensor.add_, torch.Tensor.__add__, torch.Tensor.__radd__,
        torch.Tensor.__iadd__}  # a number added: a norm's ε written by hand where it is tiny (FunctionalEpsRaised)


class FunctionalEpsRaised(TorchFunctionMode):
    """A functional norm (``F.layer_norm``, ``F.rms_norm``, ``F.group_norm``) called with ε in (0, ``MIN_EPS``), or
    ``F.rms_norm`` with ε = None (then the machine epsilon of float64), is counted at ``MIN_EPS``
    (:func:`~conslaw_lite.laws.counted_eps`), as its module is (:func:`~conslaw_lite.laws.float64_form`) and as the
    exact ``layer_norm`` that replaces ``F.layer_norm`` in the count does: the laws are the same for every ε > 0, and
    an ε float64 cannot tell from 0 gave the count of ε = 0, a law more, when the norm was written as a function.
    So is a number in (0, ``MIN_EPS``) added in forward, ``v + 1e-12`` or ``+ torch.finfo(x.dtype).eps``: the ε of a
    norm written by hand (a hand-written LayerNorm with ``+ 1e-12`` gave N = 6 where 5, conclusive). For any constant
    c added, the laws at c and at ``MIN_EPS`` are the same where c = 0 is the only exceptional value.

    Examples
    ========
    >>> x = torch.tensor([[1.0, -1.0]], dtype=torch.float64) * 1e-5
    >>> with FunctionalEpsRaised():
    ...     round(float(F.layer_norm(x, (2,), eps=1e-12)[0, 0]), 4)  # at ε = 10⁻⁷: 10⁻⁵ / √(10⁻¹⁰ + 10⁻⁷)
    0.0316
    >>> with FunctionalEpsRaised():
    ...     round(float((x / (x.square().mean() + 1e-12).sqrt())[0, 0]), 4)  # the same, by hand
    0.0316
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in ADDS:
            args = tuple(counted_eps(a) if isinstance(a, float) else a for a in args)
        at = EPS_AT.get(func)
        if at is not None:  # every other op of the forward passes as it came: this runs at each of them
            kwargs = dict(kwargs)
            given = len(args) > at
            eps = args[at] if given else kwargs.get("eps", None if func is F.rms_norm else 1e-5)
            eps = counted_eps(torch.finfo(torch.float64).eps if eps is None else eps)
            if given:
                args = (*args[:at], eps, *args[at + 1 :])
            else:
                kwargs["eps"] = eps
        return func(*args, **kwargs)


class OutputLayoutError(ValueError):
    """A model's outputs that cannot be laid out one row per input (:func:`one_output`)."""


def one_output(out: object, batch: int) -> object:
    """A model's output as one tensor: itself, or its tensors side by side, each input's row after row.

    A model may return several tensors (a tuple, a list, a dict): a loss may read any of them, so the laws
    must keep every one. Each is laid out as (batch, -1) and they are concatenated along the last axis, so
    input s keeps one row. A transformers ``ModelOutput`` with ``logits`` is its logits: the rest (the key/value
    cache) is read by the next forward, not by a loss; a dict of one's own keeps all its tensors, whatever their
    keys. Anything else is returned as it is, for :func:`checked_outputs` to name.

    Examples
    ========
    >>> y, h = torch.ones(2, 3), torch.zeros(2, 4, 5)
    >>> one_output((y, h), 2).shape
    torch.Size([2, 23])
    >>> one_output({"logits": y, "aux": h}, 2).shape  # a plain dict: every tensor
    torch.Size([2, 23])
    """
    if isinstance(out, torch.Tensor):
        return out
    if (logits := _logits(out)) is not None:
        return logits
    if not isinstance(out, (tuple, list, Mapping)):
        return out
    tensors = [t for t in _tensors(out) if t.is_floating_point()]
    if not tensors:
        return out
    for k, t in enumerate(tensors):
        if t.dim() == 0 or len(t) != batch:
            raise OutputLayoutError(
                f"the model returns {len(tensors)} tensors and tensor {k} has shape {tuple(t.shape)}, without the "
                f"batch dimension ({batch} inputs): return the tensors a loss reads, each with one row per input"
            )
    return torch.cat([t.reshape(batch, -1) for t in tensors], dim=1)


def _logits(out: object) -> torch.Tensor | None:
    """The ``logits`` of a transformers ``ModelOutput`` (of that package's classes or a subclass of one, not a dict of
    the user's own), or None."""
    if isinstance(out, Mapping) and any(c.__module__.split(".")[0] == "transformers" for c in type(out).__mro__):
        logits = out.get("logits")
        return logits if isinstance(logits, torch.Tensor) else None
    return None


def _tensors(out: object) -> list[torch.Tensor]:
    """The tensors in nested tuples, lists and mappings, in order."""
    return [t for _, t in _named_tensors(out)]


def _named_tensors(out: object, name: str = "") -> list[tuple[str, torch.Tensor]]:
    """The tensors in nested tuples, lists and mappings, in order, named by their keys and positions (``"0.h"``)."""
    if isinstance(out, torch.Tensor):
        return [(name, out)]
    items = out.items() if isinstance(out, Mapping) else enumerate(out) if isinstance(out, (tuple, list)) else ()
    return [pair for key, item in items for pair in _named_tensors(item, f"{name}.{key}" if name else str(key))]


def output_names(module: nn.Module | None, x: torch.Tensor) -> tuple[str, ...]:
    """The names of the tensors a module returns on ``x`` where it returns several (:func:`one_output` keeps them all,
    so the laws counted keep every one); ``()`` for one tensor, a transformers output, or a model given as a function.

    Examples
    ========
    >>> class Two(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layer = nn.Linear(2, 3)
    ...     def forward(self, x):
    ...         h = self.layer(x)
    ...         return {"logits": h.sum(-1, keepdim=True), "hidden": h}
    >>> output_names(Two(), torch.ones(4, 2)), output_names(nn.Linear(2, 3), torch.ones(4, 2))
    (('logits', 'hidden'), ())
    """
    if module is None:
        return ()
    with torch.no_grad():  # on copies of the buffers, as the count's calls (a forward may write one)
        out = functional_call(module, {name: b.clone() for name, b in module.named_buffers()}, (x,))
    if isinstance(out, torch.Tensor) or _logits(out) is not None:
        return ()
    names = tuple(name for name, t in _named_tensors(out) if t.is_floating_point())
    return names if len(names) > 1 else ()


def outputs_note(names: tuple[str, ...]) -> str:
    """What a count of several outputs (:func:`output_names`) means for a loss that reads fewer; ``""`` for one.

    Examples
    ========
    >>> print(outputs_note(("logits", "hidden")))
    the model returns 2 tensors (`logits`, `hidden`) and these laws keep every one; a loss that reads only some of \
them keeps these laws and maybe more: count a module that returns only those
    """
    if not names:
        return ""
    listed = ", ".join(f"`{name}`" for name in names)
    return (
        f"the model returns {len(names)} tensors ({listed}) and these laws keep every one; a loss that reads only "
        "some of them keeps these laws and maybe more: count a module that returns only those"
    )


def _scales(params: Params) -> dict[str, float]:
    """Each tensor's root mean square; for an all-zero tensor (a bias initialized to 0) that of all parameters."""
    flat = torch.cat([p.detach().double().reshape(-1) for p in params.values()])
    overall = float(flat.pow(2).mean().sqrt()) or 1.0
    return {n: float(p.detach().double().pow(2).mean().sqrt()) or overall for n, p in params.items()}


def sample_inputs(
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
    batch: int,
    gen: torch.Generator,
    spread: bool = True,
):
    if inputs is not None:
        if not isinstance(inputs, torch.Tensor):
            raise TypeError(
                f"inputs must be one tensor, a batch of inputs, got a {type(inputs).__name__}: a model of several "
                "inputs is counted through a module whose forward takes one tensor and splits it"
            )
        if inputs.is_floating_point() and not torch.isfinite(inputs).all():
            bad = int((~torch.isfinite(inputs)).sum())
            raise ValueError(f"inputs hold {bad} NaN or infinite entries of {inputs.numel()}: give finite inputs")
        return inputs.to(torch.float64) if inputs.is_floating_point() else inputs
    if input_shape is None:
        raise ValueError("give input_shape (one input, no batch dimension) or inputs")
    shape = (input_shape,) if isinstance(input_shape, int) else tuple(input_shape)
    if not shape or any(not isinstance(n, int) or n < 1 for n in shape):
        raise ValueError(f"input_shape must be positive integers, got {input_shape}")
    x = torch.randn(batch, *shape, generator=gen, dtype=torch.float64)
    return x * _input_scales(batch, gen).reshape(-1, *[1] * len(shape)) if spread else x


def _input_scales(batch: int, gen: torch.Generator) -> torch.Tensor:
    """1 for every other input, ``10^u`` with u uniform in ``INPUT_DECADES`` for the others.

    Standard-normal inputs alone meet only the pieces of an activation near 0: a cap (``relu6``,
    ``hardtanh``, a ``clamp`` at ±3), a threshold, a saturated softmax or sigmoid that a model of
    ``nn.Linear``'s scale reaches only for larger (or smaller) inputs is never seen, and the count
    is that of the model without it (``A·relu6(Bx)`` counted 3 laws of ``A·relu(Bx)`` instead of 0).
    Inputs over six decades reach every such regime whatever the function computing it; laws must
    hold for every input, so more regimes can only remove spurious laws, never true ones.
    """
    low, high = INPUT_DECADES
    u = low + (high - low) * torch.rand(batch, generator=gen, dtype=torch.float64)
    return torch.where(torch.arange(batch) % 2 == 0, torch.ones(batch, dtype=torch.float64), 10.0**u)


def token_ids_hint(inputs: torch.Tensor, modules: Iterable[nn.Module]) -> str:
    """:data:`TOKEN_IDS` where float ``inputs`` reach ``modules`` holding an ``nn.Embedding``, else ``""``."""
    ids = inputs.is_floating_point() and any(isinstance(m, EMBEDDING_LAYERS) for m in modules)
    return TOKEN_IDS if ids else ""


def checked_outputs(problem: Problem, theta: torch.Tensor, inputs: torch.Tensor, finite: bool = True) -> torch.Tensor:
    """f(θ) on ``inputs``, after checking it is a floating, differentiable tensor (and finite, with ``finite``)."""
    try:
        out = problem.apply(problem.unflatten(theta), inputs)
    except (OutputLayoutError, OutOfTime):
        raise
    except Exception as err:  # the user's forward: a typo's AttributeError, an assert, a KeyError, as much as torch's
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        failed = f"{type(err).__name__}: {first_line}"
        hint = ""
        if isinstance(err, TypeError) and "required positional argument" in first_line:
            hint = (
                "; the counter calls the model on one batch of inputs: wrap a model of several inputs in a module "
                "whose forward takes one tensor and splits it"
            )
        elif ids := token_ids_hint(inputs, problem.modules()):
            hint = ids
        elif isinstance(err, RuntimeError) and "dtype" in first_line and inputs.is_floating_point():
            hint = (
                "; the counter runs the model in float64, parameters and inputs: a cast inside forward to another "
                "dtype (x.float(), layer.to(torch.float32)) cannot be counted, take it out"
            )
        of = f"{tuple(inputs.shape[1:])}" + ("" if inputs.is_floating_point() else f", {inputs.dtype}")
        raise ValueError(f"the model fails on inputs of shape {of} ({failed}){hint}") from err
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the model must return a tensor (or tensors in a tuple, list, dict), got {type(out).__name__}")
    if not out.is_floating_point():
        raise TypeError(f"the model's output has dtype {out.dtype} (argmax?): it is not differentiable in θ")
    if finite and not torch.isfinite(out).all():
        raise ValueError("the model's output is NaN or infinite at a random θ")
    return out


def balanced_inputs(
    problem: Problem, theta: torch.Tensor, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """The inputs whose outputs are finite at θ, for each ``1/‖J_s v‖`` (``None``: outputs not per input), and
    the number of outputs on them.

    ``J_s v`` is the derivative of input s's outputs along a random direction v of θ: the size of
    its gradients. Inputs far from the standard scale (:func:`_input_scales`) have gradients up
    to 10⁶ times larger or smaller; unweighted, they would bury the others' in round-off (MHA's
    smallest kept singular value fell from 5·10⁻² to 4·10⁻⁸). The size of the outputs would not
    do: a residual block's output is mostly its input, which no parameter moves. A constant
    positive factor per output does not change the span of the gradients. An input whose output
    overflows (an ``exp`` of a large input) is left out; one of standard scale must not overflow.
    """
    out = checked_outputs(problem, theta, x, finite=False)
    if out.dim() == 0 or len(out) != len(x):
        return x, None, checked_outputs(problem, theta, x).numel()
    rows = out.detach().reshape(len(x), -1)
    finite = torch.isfinite(rows).all(dim=1)
    if not finite[::2].all():  # every other input is standard normal (_input_scales)
        raise ValueError("the model's output is NaN or infinite at a random θ")
    x, rows = x[finite], rows[finite]
    norms = _gradient_sizes(problem, theta, x)
    if norms is None:
        norms = rows.norm(dim=1)
    if not bool((norms > 0).any()):
        return x, torch.ones_like(norms), rows.numel()
    # at most 10³ times up, like WEIGHT_FLOOR: a saturated softmax's gradient is round-off, and blown up further its
    # round-off would pass CUT as directions (a softmax gate's 2 laws lost to rank 6 = D)
    return x, 1 / norms.clamp_min(WEIGHT_FLOOR * float(norms[norms > 0].median())), rows.numel()


def _gradient_sizes(problem: Problem, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """``‖J_s v‖`` per input for one random v of θ's size (``None`` where torch has no forward derivative)."""
    v = torch.randn(theta.shape, generator=torch.Generator().manual_seed(len(x)), dtype=theta.dtype).to(theta.device)
    try:
        _, tangent = jvp(problem.outputs(x), (theta,), (v * theta.abs().mean(),))
    except (NotImplementedError, RuntimeError):
        return None
    sizes = tangent.detach().reshape(len(x), -1).norm(dim=1)
    return sizes if bool(torch.isfinite(sizes).all()) else None
