"""Why the laws registered for a class may not be those of a module: a subclass that redefines its methods, a
parametrized weight, a forward hook of the user's on it or its parts (:func:`altered`)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torch.nn.modules.module import _global_forward_hooks as _GLOBAL_HOOKS
from torch.nn.modules.module import _global_forward_pre_hooks as _GLOBAL_PRE_HOOKS
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
    if any(_foreign(h) for h in (*_GLOBAL_HOOKS.values(), *_GLOBAL_PRE_HOOKS.values())):
        return "a global forward hook (register_module_forward_hook: it can change what every block computes)"
    ours = __name__.partition(".")[0]  # the count's float64 copies: a softmax in float64 (families.hf.exact)
    replaced = [
        name or "itself"
        for name, m in module.named_modules()
        if _foreign(vars(m).get("forward"), home, ours) and not _cast_around_own_forward(m)
    ]
    if replaced:
        return f"its forward replaced on {', '.join(replaced)} (an instance's own forward can compute anything)"
    return None


def _foreign(fn: object, *homes: str) -> bool:
    """Whether ``fn`` (a hook, a forward set on an instance; None: none) comes from outside the packages ``homes``
    and may change outputs (it is not marked ``OUTPUT_KEPT``)."""
    if fn is None or getattr(fn, OUTPUT_KEPT, False):
        return False
    fn = getattr(fn, "func", fn)  # functools.partial
    origin = str(getattr(getattr(fn, "__func__", fn), "__module__", ""))  # a bound method's function
    return origin.partition(".")[0] not in homes


CASTS = frozenset({"accelerate", "torch"})  # packages whose wrappers of a forward change its precision only
CAST_LAYERS = 8  # wrappers followed at most (accelerate puts three)


def _cast_around_own_forward(module: nn.Module) -> bool:
    """Whether the forward set on ``module`` is its class's own wrapped in casts only: autocast and the cast of the
    outputs to float32 that accelerate puts there (a ``Trainer(bf16=True)``), the same function in lower precision.

    Examples
    ========
    >>> import torch
    >>> lin = nn.Linear(2, 2)
    >>> lin.forward = torch.autocast("cpu", dtype=torch.bfloat16)(type(lin).forward).__get__(lin)
    >>> _cast_around_own_forward(lin)
    True
    >>> lin.forward = lambda x: 2 * x
    >>> _cast_around_own_forward(lin)
    False
    """
    fn = vars(module).get("forward")
    for _ in range(CAST_LAYERS):
        fn = getattr(fn, "__func__", fn)  # a bound method's function
        if fn is None or fn is type(module).forward:
            return fn is not None
        defined = fn.__globals__.get("__name__", "") if hasattr(fn, "__globals__") else type(fn).__module__
        if defined.partition(".")[0] not in CASTS:  # functools.wraps copies __module__: where it was defined
            return False
        fn = getattr(fn, "__wrapped__", None)
    return False


def _foreign_hooks(module: nn.Module, home: str) -> bool:
    """Forward hooks on ``module`` from outside the package ``home`` whose block it is part of (transformers records
    outputs with hooks of its own, installed at the first forward; a user's hook is another matter), but for those
    marked ``OUTPUT_KEPT`` (a monitor's refusal of a call that breaks its laws)."""
    return any(_foreign(h, home) for h in (*module._forward_hooks.values(), *module._forward_pre_hooks.values()))


OUTPUT_KEPT = "conslaw_lite_output_kept"  # an attribute of a hook of this package that changes no output


_SAME = frozenset({"__init__", "__repr__", "extra_repr"})  # methods a subclass may redefine without changing f


def _inside(name: str, path: str) -> bool:
    return path == "" or name.startswith(path + ".")


def tied_outside(model: nn.Module, paths: Sequence[str]) -> dict[str, str]:
    """Per block path, why its laws fail: one of its parameters is also registered outside it (a tied weight).

    Examples
    ========
    >>> model = nn.ModuleDict({"attn": nn.Linear(2, 2), "head": nn.Linear(2, 2)})
    >>> model["head"].weight = model["attn"].weight
    >>> tied_outside(model, ["attn"])
    {'attn': '`attn.weight` is also `head.weight`'}
    """
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    why = {}
    for path in paths:
        for aliases in names.values():
            inside = [n for n in aliases if _inside(n, path)]
            outside = [n for n in aliases if not _inside(n, path)]
            if inside and outside:
                why[path] = f"`{inside[0]}` is also `{outside[0]}`"
                break
    return why
