"""Which blocks have which conservation laws: a registry from module type to laws.

A *law* is a function of the parameters, ``h(θ)``, given as a mapping from the
model's own parameter names (those of ``model.named_parameters()``) to tensors.
Taking a mapping rather than a module means the same law can be evaluated at
θ, at a gradient g (``h(g) = gᵀMg`` for a quadratic law ``h(θ) = θᵀMθ``, the
one-step drift of THEORY.md section 4) or inside ``torch.func`` transforms.

Each block family registers a *finder*: given a module and its name prefix,
it returns the block's laws and its non-conserved controls. :func:`find_blocks`
walks a model and collects them; :func:`laws_of` evaluates them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import torch
from torch import nn

Params = Mapping[str, torch.Tensor]
Law = Callable[[Params], torch.Tensor]


@dataclass(frozen=True)
class Batch:
    """Laws (or controls) ``names[j]`` of one block that are the slices ``fn(θ)[j]`` of one function.

    A head's law is a k×k product that costs little next to the Python and torch dispatch
    around it; ``fn`` computes all heads with one batched matmul, so a caller that wants every
    law (the :class:`~conslaw_lite.monitor.Monitor`, each step) makes one call instead of n.
    A name may be a law or a control of the block.
    """

    fn: Law
    names: tuple[str, ...]


@dataclass(frozen=True)
class BlockLaws:
    """The laws of one block inside a model.

    ``path`` is the block's module name (``""`` for the model itself), ``kind``
    its family (``"swiglu"``, ``"mha-rope"``, ...), ``laws`` the conserved
    quantities and ``controls`` look-alike quantities that are *not* conserved.
    ``batches`` optionally says which of them one function evaluates at once
    (each name's own function in ``laws``/``controls`` gives the same values).
    """

    path: str
    kind: str
    laws: dict[str, Law]
    controls: dict[str, Law] = field(default_factory=dict)
    batches: tuple[Batch, ...] = ()


Finder = Callable[[nn.Module, str], "BlockLaws | None"]
_FINDERS: dict[type, Finder] = {}


_NAMED_FINDERS: dict[str, Finder] = {}  # "module.QualName" -> finder, for optional libraries (timm)


def register_laws(*types: type | str) -> Callable[[Finder], Finder]:
    """Register ``finder(module, prefix) -> BlockLaws | None`` for modules of these types.

    ``prefix`` is the module's name in the model followed by a dot (``""`` at the
    root), so a finder reads its weights as ``p[prefix + "A.weight"]``. A type
    may be given by its full name (``"timm.layers.mlp.Mlp"``) so that an optional
    library need not be imported to register it.

    Examples
    ========
    The toy model ``f(x) = u·v·x`` under new names keeps ``h(θ) = u² − v²``
    (THEORY.md section 1); its finder returns that law as ``{name: h}``:

    >>> import torch
    >>> from torch import nn
    >>> class Pair(nn.Module):  # f(x) = u·v·x, the toy model under other names
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.u, self.v = nn.Parameter(torch.tensor(3.0)), nn.Parameter(torch.tensor(1.0))
    >>> @register_laws(Pair)
    ... def _pair(module, prefix):
    ...     h = lambda p: p[prefix + "u"] ** 2 - p[prefix + "v"] ** 2
    ...     return BlockLaws(prefix.rstrip("."), "pair", {"u²−v²": h})
    >>> laws_of(Pair())  # u² − v² = 9 − 1
    {'u²−v²': tensor(8., dtype=torch.float64)}
    """

    def decorate(finder: Finder) -> Finder:
        for t in types:
            if isinstance(t, str):
                _NAMED_FINDERS[t] = finder
            else:
                _FINDERS[t] = finder
        return finder

    return decorate


def _qualified_name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _finder_for(module: nn.Module) -> Finder | None:
    for t in type(module).__mro__:
        if t in _FINDERS:
            return _FINDERS[t]
        if _qualified_name(t) in _NAMED_FINDERS:
            return _NAMED_FINDERS[_qualified_name(t)]
    return None


def supported_types() -> list[str]:
    """Names (``module.QualName``) of the module types whose laws are known.

    Examples
    ========
    >>> names = supported_types()
    >>> "conslaw_lite.blocks.toy.ToyProduct" in names, "conslaw_lite.blocks.ffn.SwiGLU" in names
    (True, True)
    """
    return sorted({_qualified_name(t) for t in _FINDERS} | set(_NAMED_FINDERS))


def find_blocks(model: nn.Module, *, required: bool = False) -> list[BlockLaws]:
    """Every block of ``model`` whose laws are known, in ``named_modules`` order.

    With ``required``, a model without any such block is an error (``ValueError``
    naming the supported module types) rather than an empty list.

    Examples
    ========
    Two toy products side by side: ``a·b·x`` has one law, ``a·b·c·x`` two.

    >>> from torch import nn
    >>> from conslaw_lite.blocks.toy import ToyProduct
    >>> model = nn.Sequential(ToyProduct(a=2.0, b=1.0), ToyProduct(a=1.0, b=3.0, c=0.5))
    >>> [(block.path, block.kind, list(block.laws)) for block in find_blocks(model)]
    [('0', 'toy', ['a²−b²']), ('1', 'toy', ['a²−b²', 'a²−c²'])]
    """
    blocks = []
    for name, module in model.named_modules():
        finder = _finder_for(module)
        if finder is not None:
            found = finder(module, f"{name}." if name else "")
            if found is not None:
                blocks.append(replace(found, path=name))
    if required and not blocks:
        raise ValueError(
            f"no block with known conservation laws in {type(model).__name__}; "
            f"supported module types: {', '.join(supported_types())}"
        )
    return blocks


def law_functions(model: nn.Module, *, controls: bool = False) -> dict[str, Law]:
    """All laws (or all controls) of ``model`` as functions ``h(θ)``, keyed ``"path:name"``.

    Raises ``ValueError`` naming the supported types when no block is known.

    Examples
    ========
    For ``f = a·b·x`` the law is ``a² − b²``; its controls ``a²`` and ``b²`` are
    not conserved:

    >>> from conslaw_lite.blocks.toy import ToyProduct
    >>> list(law_functions(ToyProduct(a=2.0, b=1.0))), list(law_functions(ToyProduct(a=2.0, b=1.0), controls=True))
    (['a²−b²'], ['a²', 'b²'])
    """
    out = {}
    for block in find_blocks(model, required=True):
        for name, fn in (block.controls if controls else block.laws).items():
            out[f"{block.path}:{name}" if block.path else name] = fn
    return out


def parameters_of(model: nn.Module, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """A snapshot of ``θ`` as ``{name: parameter}``, cast to ``dtype`` (float64: laws are computed in double).

    Always a copy, so a snapshot taken before training stays what it was, even for a
    model already in ``dtype``.

    Examples
    ========
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Linear(2, 1).double()
    >>> theta = parameters_of(model)
    >>> list(theta), theta["weight"].dtype
    (['weight', 'bias'], torch.float64)
    >>> with torch.no_grad(): _ = model.weight.add_(1.0)
    >>> bool((model.weight - theta["weight"] == 1.0).all())
    True
    """
    return {n: p.detach().to(dtype, copy=True) for n, p in model.named_parameters()}


def evaluate(laws: Mapping[str, Law], params: Params) -> dict[str, torch.Tensor]:
    """``{name: h(params)}`` for each law ``h``.

    ``params`` need not be θ: at a gradient ``g`` a quadratic law gives
    ``h(g) = gᵀMg``, and one step ``θ⁺ = θ − τg`` moves it by exactly ``τ² h(g)``
    (THEORY.md section 4).

    Examples
    ========
    For ``h = a² − b²`` at ``g = (0.1, 0.2)``: ``h(g) = 0.01 − 0.04 = −0.03``.

    >>> import torch
    >>> from conslaw_lite.blocks.toy import ToyProduct
    >>> g = {"a": torch.tensor(0.1, dtype=torch.float64), "b": torch.tensor(0.2, dtype=torch.float64)}
    >>> evaluate(law_functions(ToyProduct(a=1.0, b=1.0)), g)
    {'a²−b²': tensor(-0.0300, dtype=torch.float64)}
    """
    return {name: fn(params) for name, fn in laws.items()}


def laws_of(model: nn.Module, params: Params | None = None) -> dict[str, torch.Tensor]:
    """The conserved quantities of every known block of ``model``, evaluated in float64.

    Keys are ``"path:name"`` with ``path`` the block's module name. Raises
    ``ValueError`` naming the supported types when no block is known.

    Examples
    ========
    ``f = a·b·x`` at ``a = 2, b = 1``: ``h = a² − b² = 3``.

    >>> from torch import nn
    >>> from conslaw_lite.blocks.toy import ToyProduct
    >>> laws_of(ToyProduct(a=2.0, b=1.0))
    {'a²−b²': tensor(3., dtype=torch.float64)}
    >>> laws_of(nn.Linear(2, 2))
    Traceback (most recent call last):
    ...
    ValueError: no block with known conservation laws in Linear; supported module types: ...
    """
    return evaluate(law_functions(model), parameters_of(model) if params is None else params)


def controls_of(model: nn.Module, params: Params | None = None) -> dict[str, torch.Tensor]:
    """The non-conserved control quantities of every known block, like :func:`laws_of`.

    Examples
    ========
    ``f = a·b·x`` at ``a = 2, b = 1``: the controls ``a² = 4`` and ``b² = 1`` each
    move under gradient flow; only their difference is conserved.

    >>> from conslaw_lite.blocks.toy import ToyProduct
    >>> controls_of(ToyProduct(a=2.0, b=1.0))
    {'a²': tensor(4., dtype=torch.float64), 'b²': tensor(1., dtype=torch.float64)}
    """
    return evaluate(law_functions(model, controls=True), parameters_of(model) if params is None else params)
