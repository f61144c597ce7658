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
from dataclasses import dataclass, field

import torch
from torch import nn

Params = Mapping[str, torch.Tensor]
Law = Callable[[Params], torch.Tensor]


@dataclass(frozen=True)
class BlockLaws:
    """The laws of one block inside a model.

    ``path`` is the block's module name (``""`` for the model itself), ``kind``
    its family (``"swiglu"``, ``"mha-rope"``, ...), ``laws`` the conserved
    quantities and ``controls`` look-alike quantities that are *not* conserved.
    """

    path: str
    kind: str
    laws: dict[str, Law]
    controls: dict[str, Law] = field(default_factory=dict)


Finder = Callable[[nn.Module, str], "BlockLaws | None"]
_FINDERS: dict[type, Finder] = {}


_NAMED_FINDERS: dict[str, Finder] = {}  # "module.QualName" -> finder, for optional libraries (timm)


def register_laws(*types: type | str) -> Callable[[Finder], Finder]:
    """Register ``finder(module, prefix) -> BlockLaws | None`` for modules of these types.

    ``prefix`` is the module's name in the model followed by a dot (``""`` at the
    root), so a finder reads its weights as ``p[prefix + "A.weight"]``. A type
    may be given by its full name (``"timm.layers.mlp.Mlp"``) so that an optional
    library need not be imported to register it.
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
    """Names of the module types whose laws are known."""
    return sorted({_qualified_name(t) for t in _FINDERS} | set(_NAMED_FINDERS))


def find_blocks(model: nn.Module) -> list[BlockLaws]:
    """Every block of ``model`` whose laws are known, in ``named_modules`` order."""
    blocks = []
    for name, module in model.named_modules():
        finder = _finder_for(module)
        if finder is not None:
            found = finder(module, f"{name}." if name else "")
            if found is not None:
                blocks.append(BlockLaws(name, found.kind, found.laws, found.controls))
    return blocks


def _require_blocks(model: nn.Module) -> list[BlockLaws]:
    blocks = find_blocks(model)
    if not blocks:
        raise ValueError(
            f"no block with known conservation laws in {type(model).__name__}; "
            f"supported module types: {', '.join(supported_types())}"
        )
    return blocks


def law_functions(model: nn.Module, *, controls: bool = False) -> dict[str, Law]:
    """All laws (or all controls) of ``model`` as functions, keyed ``"path:name"``."""
    out = {}
    for block in _require_blocks(model):
        for name, fn in (block.controls if controls else block.laws).items():
            out[f"{block.path}:{name}" if block.path else name] = fn
    return out


def parameters_of(model: nn.Module, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """``{name: parameter}`` detached and cast to ``dtype`` (float64: laws are computed in double)."""
    return {n: p.detach().to(dtype) for n, p in model.named_parameters()}


def evaluate(laws: Mapping[str, Law], params: Params) -> dict[str, torch.Tensor]:
    """``{name: h(params)}`` for each law."""
    return {name: fn(params) for name, fn in laws.items()}


def laws_of(model: nn.Module, params: Params | None = None) -> dict[str, torch.Tensor]:
    """The conserved quantities of every known block of ``model``, evaluated in float64.

    Keys are ``"path:name"`` with ``path`` the block's module name. Raises
    ``ValueError`` naming the supported types when no block is known.
    """
    return evaluate(law_functions(model), parameters_of(model) if params is None else params)


def controls_of(model: nn.Module, params: Params | None = None) -> dict[str, torch.Tensor]:
    """The non-conserved control quantities of every known block, like :func:`laws_of`."""
    return evaluate(law_functions(model, controls=True), parameters_of(model) if params is None else params)
