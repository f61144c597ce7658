"""Why the laws registered for a class may not be those of a module: a subclass that redefines its methods, a
parametrized weight, a forward hook of the user's on it or its parts (:func:`altered`)."""

from __future__ import annotations

from torch import nn
from torch.nn.utils import parametrize


def altered(module: nn.Module, registered: type) -> str | None:
    """Why the laws derived for the class ``registered`` may not be ``module``'s, or ``None``: a class derived from
    it outside this package that redefines any of its methods (its ``forward``, or what that calls, can compute
    something else; timm's ``VisionTransformerDistilled`` adds a token), unless ``registered`` says that its
    subclasses declare their laws (``DECLARES_LAWS``, as
    :class:`~conslaw_lite.families.network.couplings.NetworkLaws` does); or forward hooks on the module or its parts
    (a hook can replace any output: an ``LlamaAttention`` whose q and k went through an RMSNorm over all heads by
    hooks kept Llama's laws, and they moved at first order).

    Examples
    ========
    >>> lin = nn.Linear(2, 2)
    >>> altered(lin, nn.Linear) is None
    True
    >>> _ = lin.register_forward_hook(lambda m, i, o: 2 * o)
    >>> altered(lin, nn.Linear)
    'a forward hook on itself (a hook can change what the block computes)'
    >>> class Built(nn.Linear):  # a constructor of one's own: the same computation
    ...     def __init__(self):
    ...         super().__init__(2, 2)
    >>> class Mine(nn.Linear):
    ...     def forward(self, x):
    ...         return super().forward(x).relu()
    >>> Mine.__module__ = Built.__module__ = "my_model"  # a user's file
    >>> altered(Built(), nn.Linear) is None, altered(Mine(2, 2), nn.Linear)
    (True, 'Mine, derived from Linear, redefines forward (register_laws(Mine) gives it laws of its own)')
    """
    kind = type(module)
    ours = kind.__module__.partition(".")[0] == __name__.partition(".")[0]  # this package's own variants: tested here
    if kind is not registered and not ours and not getattr(registered, "DECLARES_LAWS", False):
        chain = kind.__mro__[: kind.__mro__.index(registered)]
        redefined = sorted({name for k in chain for name, v in vars(k).items() if callable(v) and name not in _SAME})
        if redefined:
            mine = kind.__name__
            own = f"register_laws({mine}) gives it laws of its own"
            return f"{mine}, derived from {registered.__name__}, redefines {', '.join(redefined)} ({own})"
    parametrized = [name or "itself" for name, m in module.named_modules() if parametrize.is_parametrized(m)]
    if parametrized:
        return (
            f"a parametrization on {', '.join(parametrized)} (weight_norm, spectral_norm, ...): its weights are "
            "functions of other parameters, whose laws are others"
        )
    home = registered.__module__.partition(".")[0]
    hooked = [name or "itself" for name, m in module.named_modules() if _foreign_hooks(m, home)]
    if hooked:
        hooks = "a forward hook" if len(hooked) == 1 else "forward hooks"
        return f"{hooks} on {', '.join(hooked)} (a hook can change what the block computes)"
    return None


def _foreign_hooks(module: nn.Module, home: str) -> bool:
    """Forward hooks on ``module`` from outside the package ``home`` whose block it is part of (transformers records
    outputs with hooks of its own, installed at the first forward; a user's hook is another matter), but for those
    marked ``OUTPUT_KEPT`` (a monitor's refusal of a call that breaks its laws)."""
    hooks = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
    return any(
        str(getattr(getattr(h, "func", h), "__module__", "")).partition(".")[0] != home
        for h in hooks
        if not getattr(h, OUTPUT_KEPT, False)
    )


OUTPUT_KEPT = "conslaw_lite_output_kept"  # an attribute of a hook of this package that changes no output


_SAME = frozenset({"__init__", "__repr__", "extra_repr"})  # methods a subclass may redefine without changing f
