"""Whether training follows the field whose brackets the counter takes: the derivative of the model's values.

The counter takes W(θ) = span{∇_θ f(x; θ)} and brackets of its fields, by torch's derivatives of the forward. Those are
the laws of training only where torch's derivatives are the derivatives of what the forward computes, and where
training steps along them. Two ways a model breaks that are refused here (:func:`check_training_field`):

* **A hook on the gradient.** ``weight.register_hook(lambda g: 2 * g)``, a pruning mask applied to the gradient,
  ``register_post_accumulate_grad_hook``, a module's backward hook: the step is not along ∇_θ L. A ReLU MLP with its
  first weight's gradient doubled was certified with the unit laws ‖W_i‖² − ‖V_{:,i}‖² (they drift at first order;
  training keeps ‖W_i‖² − 2‖V_{:,i}‖²).
* **A derivative that is not the values'.** A straight-through estimator on a weight, ``W + (round(W) − W).detach()``:
  the forward's values do not move with W (round), its derivative says they do, and the brackets of that derivative
  are not those of the field training follows (N = 10, conclusive, where it is 11). A gradient reversal written as an
  ``autograd.Function`` whose ``jvp`` is −t likewise (N = 0 for 3). So, along the coordinates training moves (those
  with a nonzero gradient), the forward's directional derivative must match central differences of its values. A
  ``.detach()`` of a whole branch passes: its parameters get no gradient, and are constants of the count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn
from torch.func import jvp
from torch.nn.modules import module as torch_module

from conslaw_lite.counting.exact_ops import exact_derivatives, quiet_vmap

Params = Mapping[str, torch.Tensor]

# central differences at these fractions of each tensor's root mean square, the smallest mismatch kept: a mismatch of
# the rules stays as the step shrinks, the truncation of a curved f falls as its square (an attention on inputs of
# 10³, where the counter samples them: 1.6·10⁻³ at 10⁻⁵, 1.4·10⁻⁷ at 10⁻⁷), the round-off grows (NOISE)
STEPS = (1e-5, 1e-6, 1e-7)
MATCH = 1e-4  # relative difference of the derivative and the differences that is more than their error
NOISE = 64  # times eps·‖f‖/step, the round-off of the differences: a LayerScale at 10⁻⁶ moves f by 10⁻¹² of itself


def gradient_hooks(module: nn.Module | None) -> str | None:
    """What changes the gradient of ``module``'s training, or None: a hook that changes a parameter's gradient (called
    once on a random one: a hook that only reads it, a logger's, passes), a module's backward hook, a global one.

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    >>> gradient_hooks(net) is None
    True
    >>> norms = []
    >>> _ = net[0].weight.register_hook(lambda g: norms.append(g.norm()))  # reads it: wandb.watch's kind
    >>> gradient_hooks(net) is None
    True
    >>> _ = net[0].weight.register_hook(lambda g: 2 * g)
    >>> gradient_hooks(net)
    "a hook on the gradient of parameter '0.weight' (Tensor.register_hook)"
    """
    if torch_module._global_backward_hooks or torch_module._global_backward_pre_hooks:
        return "a global backward hook (register_module_full_backward_hook)"
    for name, p in module.named_parameters() if module is not None else ():
        if any(_changes_gradient(p, hook) for hook in (p._backward_hooks or {}).values()):
            return f"a hook on the gradient of parameter {name!r} (Tensor.register_hook)"
        if any(_changes_step(p, hook) for hook in (getattr(p, "_post_accumulate_grad_hooks", None) or {}).values()):
            return f"a hook on the gradient of parameter {name!r} (register_post_accumulate_grad_hook)"
    for name, m in module.named_modules() if module is not None else ():
        if m._backward_hooks or m._backward_pre_hooks:  # torch.func cannot differentiate through one, whatever it does
            return (
                f"a backward hook on `{name or type(m).__name__}` (register_full_backward_hook: torch.func cannot "
                "differentiate through it, and it may change the gradient)"
            )
    return None


def _changes_gradient(p: torch.Tensor, hook: Callable) -> bool:
    """Whether a tensor hook changes the gradient it is given (a mask, a scale), not only reads it (a logger's norm):
    called once on a random gradient."""
    given = torch.randn(p.shape, generator=torch.Generator().manual_seed(0), dtype=p.dtype)
    seen = given.clone()
    with torch.no_grad():
        out = hook(seen)
    return not torch.equal(seen, given) or (out is not None and not torch.equal(out, given))


def _changes_step(p: torch.Tensor, hook: Callable) -> bool:
    """Whether a post-accumulate hook changes the parameter's gradient or the parameter (an optimizer stepped in
    backward), called once on a random gradient; both are put back."""
    held, value = p.grad, p.detach().clone()
    given = torch.randn(p.shape, generator=torch.Generator().manual_seed(0), dtype=p.dtype)
    p.grad = given.clone()
    try:
        with torch.no_grad():
            hook(p)
        return p.grad is None or not torch.equal(p.grad, given) or not torch.equal(p.detach(), value)
    finally:
        with torch.no_grad():
            p.copy_(value)
        p.grad = held


def derivative_mismatch(apply: Callable, params: Params, inputs: torch.Tensor) -> float:
    """``‖Df[v] − Δf/2h‖ / ‖Δf/2h‖``: the forward's directional derivative against central differences of its values,
    along a random v on the coordinates with a nonzero gradient (0 where none has one, or torch cannot take it), less
    the differences' round-off (``NOISE``).

    Examples
    ========
    >>> apply = lambda p, x: x * p["w"]
    >>> p, x = {"w": torch.tensor([1.3], dtype=torch.float64)}, torch.ones(3, 1, dtype=torch.float64)
    >>> derivative_mismatch(apply, p, x) < 1e-8
    True
    >>> straight_through = lambda p, x: x * (p["w"] + (p["w"].round() - p["w"]).detach())
    >>> round(derivative_mismatch(straight_through, p, x), 6)  # the values do not move with w; the derivative does
    1.0
    """
    gen = torch.Generator().manual_seed(0)
    leaves = {n: p.detach().to(torch.float64).requires_grad_() for n, p in params.items()}
    out = apply(leaves, inputs)
    weights = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    try:
        grads = torch.autograd.grad((out * weights).sum(), list(leaves.values()), allow_unused=True)
    except RuntimeError:  # no gradient to take this way (a reentrant checkpoint): the count refuses it, and says why
        return 0.0
    v = {}
    for (name, p), g in zip(leaves.items(), grads, strict=True):
        moving = torch.zeros_like(p) if g is None else (g.to_dense() != 0).to(p.dtype)  # a sparse embedding's
        v[name] = torch.randn(p.shape, generator=gen, dtype=p.dtype) * moving * (p.detach().pow(2).mean().sqrt() or 1)
    if not any(bool(t.any()) for t in v.values()):
        return 0.0
    at = {n: p.detach() for n, p in leaves.items()}
    try:
        with exact_derivatives(), quiet_vmap():
            derivative = jvp(lambda q: apply(q, inputs), (at,), (v,))[1]
    except (NotImplementedError, RuntimeError):  # no forward-mode derivative: the count refuses it itself, and says why
        return 0.0
    return min(_mismatch(apply, at, v, inputs, derivative, step) for step in STEPS)


def _mismatch(apply: Callable, at: Params, v: Params, inputs: torch.Tensor, derivative: torch.Tensor, step: float):
    """``derivative`` against the central differences of one step, less their round-off, relative."""
    with torch.no_grad():
        ahead = apply({n: at[n] + step * v[n] for n in at}, inputs)
        behind = apply({n: at[n] - step * v[n] for n in at}, inputs)
    differences = (ahead - behind) / (2 * step)
    norm = lambda t: float(torch.linalg.vector_norm(t))  # noqa: E731
    noise = NOISE * torch.finfo(torch.float64).eps * (norm(ahead) + norm(behind)) / step
    return max(0.0, norm(derivative - differences) - noise) / (norm(differences) or norm(derivative) or 1.0)


def check_training_field(apply: Callable, params: Params, inputs: torch.Tensor) -> None:
    """A ``ValueError`` where the forward's derivative is not its values' (the module docstring; hooks on the
    gradient: :func:`gradient_hooks`, asked of the model before it is copied to float64).

    Examples
    ========
    >>> from torch.func import functional_call
    >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).double()
    >>> apply = lambda p, x: functional_call(net, p, (x,))
    >>> check_training_field(apply, dict(net.named_parameters()), torch.randn(6, 2, dtype=torch.float64))
    """
    mismatch = derivative_mismatch(apply, params, inputs)
    if mismatch > MATCH:
        raise ValueError(
            f"the forward's derivative in θ is not the derivative of its values (they differ by {mismatch:.2g} of "
            "it along the parameters training moves): a straight-through estimator (W + (round(W) − W).detach()), a "
            "gradient trick (a .detach() of a weight that also trains, an autograd.Function whose jvp or backward "
            "is not its forward's derivative); training then follows another field than the one whose brackets "
            "are counted, so no count is given"
        )
