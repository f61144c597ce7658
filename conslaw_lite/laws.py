"""Which blocks have which conservation laws: a registry from module type to laws.

The registry knows no family: each family folder (:mod:`conslaw_lite.families`) registers its
finders when it is imported, and the first look-up imports the registered families.

A *law* is a function of the parameters, ``h(θ)``, given as a mapping from the
model's own parameter names (those of ``model.named_parameters()``) to tensors.
Taking a mapping rather than a module means the same law can be evaluated at
θ, at a gradient g (``h(g) = gᵀMg`` for a quadratic law ``h(θ) = θᵀMθ``, the
one-step drift of chapter 07) or inside ``torch.func`` transforms.

Each block family registers a *finder*: given a module and its name prefix,
it returns the block's laws and its non-conserved controls. :func:`find_blocks`
walks a model and collects them; :func:`quantities` lists them as typed
:class:`Quantity` s (a law or a control, a display name and a stable ASCII key);
:func:`laws_of` evaluates them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
from torch import nn

from conslaw_lite.block_changes import altered, tied_outside
from conslaw_lite.wrapped_modules import module_copy, unwrapped

Params = Mapping[str, torch.Tensor]  # θ (or a gradient) by the model's own parameter names
Law = Callable[[Params], torch.Tensor]
Kind = Literal["law", "control"]
KINDS: tuple[Kind, ...] = ("law", "control")

# The law names are the book's notation; an API key is the same name in ASCII, so that it can be typed.
_ASCII = {
    "²": "^2", "ᵀ": "^T", "−": "-", "‖": "|", "⁽": "^(", "ʲ": "j", "⁾": ")", "γ": "gamma", "β": "beta", "Σ": "sum_",
    " ": "_",
}  # fmt: skip


def ascii_key(name: str) -> str:
    """The stable ASCII key of a law's display name: ``²`` → ``^2``, ``ᵀ`` → ``^T``, ``‖`` → ``|``, ``−`` → ``-``, ...

    Examples
    ========
    >>> ascii_key("head0:QᵀQ−KᵀK"), ascii_key("ΣW_e (sigmoid)")
    ('head0:Q^TQ-K^TK', 'sum_W_e_(sigmoid)')
    >>> ascii_key("θ²")
    Traceback (most recent call last):
    ...
    ValueError: law name 'θ²' has characters without an ASCII spelling: θ (add them to laws._ASCII)
    """
    key = "".join(_ASCII.get(c, c) for c in name)
    if not key.isascii():
        missing = "".join(sorted({c for c in key if not c.isascii()}))
        raise ValueError(
            f"law name {name!r} has characters without an ASCII spelling: {missing} (add them to laws._ASCII)"
        )
    return key


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

    ``kind`` is the block's family (``"swiglu"``, ``"mha-rope"``, ...), ``laws`` the conserved
    quantities and ``controls`` look-alike quantities that are *not* conserved, by name within
    the block. ``batches`` optionally says which of them one function evaluates at once
    (each name's own function in ``laws``/``controls`` gives the same values). ``path`` is the
    block's module name (``""`` for the model itself), set by :func:`find_blocks`. ``refuse_call``, given the
    keyword arguments of a call of the model, says why that call would break these laws (a loss term it adds),
    or ``None``: the :class:`~conslaw_lite.monitor.Monitor` refuses such a call. ``train_breaks`` names the
    submodules (within the block) whose train mode would break some of these laws: a dropout before a norm that
    removes the mean, inactive when the laws were found; the Monitor says so if one trains.
    """

    kind: str
    laws: dict[str, Law]
    controls: dict[str, Law] = field(default_factory=dict)
    batches: tuple[Batch, ...] = ()
    path: str = ""
    refuse_call: Callable[[dict], str | None] | None = None
    train_breaks: tuple[str, ...] = ()

    def label(self, name: str) -> str:
        """The display name of this block's law ``name`` in the model: ``"path:name"``, or ``name`` at the root.

        Examples
        ========
        >>> BlockLaws("toy", {}, path="0").label("a²−b²"), BlockLaws("toy", {}).label("a²−b²")
        ('0:a²−b²', 'a²−b²')
        """
        return f"{self.path}:{name}" if self.path else name

    def key(self, name: str) -> str:
        """The stable ASCII key of this block's law ``name`` in the model: ``ascii_key(label(name))``.

        Examples
        ========
        >>> BlockLaws("toy", {}, path="0").key("a²−b²")
        '0:a^2-b^2'
        """
        return ascii_key(self.label(name))


@dataclass(frozen=True)
class Quantity:
    """One law or one control of a model.

    ``name`` is for display (``"0:‖A_{:,i}‖²−‖C_{i,:}‖²"``), ``key`` the stable ASCII key every API
    takes (``"0:|A_{:,i}|^2-|C_{i,:}|^2"``), ``kind`` says whether it is conserved (``"law"``) or a
    look-alike that moves (``"control"``), ``block`` the family of its block and ``short_key`` the key
    of its formula alone, without block path or head (``"|A_{:,i}|^2-|C_{i,:}|^2"``, ``"Q^TQ-K^TK"``
    for ``"blocks.0.attn:head1:QᵀQ−KᵀK"``): the same in every block and head. ``fn`` computes it from θ.
    """

    name: str
    key: str
    kind: Kind
    block: str
    short_key: str
    fn: Law


@dataclass(frozen=True)
class Group:
    """The laws (``kind="law"``) or the controls (``kind="control"``) of every block of one family.

    ``key`` is the block family for its laws and ``"<family>:control"`` for its controls.

    Examples
    ========
    >>> Group("swiglu", "law").key, Group("swiglu", "control").key
    ('swiglu', 'swiglu:control')
    """

    block: str
    kind: Kind

    @property
    def key(self) -> str:
        """The group's stable ASCII key."""
        return self.block if self.kind == "law" else f"{self.block}:control"


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
    (chapter 02); its finder returns that law as ``{name: h}``:

    >>> import torch
    >>> from torch import nn
    >>> class Pair(nn.Module):  # f(x) = u·v·x, the toy model under other names
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.u, self.v = nn.Parameter(torch.tensor(3.0)), nn.Parameter(torch.tensor(1.0))
    >>> @register_laws(Pair)
    ... def _pair(module, prefix):
    ...     h = lambda p: p[prefix + "u"] ** 2 - p[prefix + "v"] ** 2
    ...     return BlockLaws("pair", {"u²−v²": h})
    >>> laws_of(Pair())  # u² − v² = 9 − 1
    {'u^2-v^2': tensor(8., dtype=torch.float64)}
    """

    def decorate(finder: Finder) -> Finder:
        for t in types:
            if isinstance(t, str):
                _NAMED_FINDERS[t] = finder
            else:
                _FINDERS[t] = finder
        return finder

    return decorate


def qualified_name(t: type) -> str:
    """``module.QualName`` of a type: the name a finder of an optional library registers it by.

    Examples
    ========
    >>> from torch import nn
    >>> qualified_name(nn.Linear)
    'torch.nn.modules.linear.Linear'
    """
    return f"{t.__module__}.{t.__qualname__}"


def _load_families() -> None:
    """Import every block family, which registers its finders (once; the families import this module)."""
    from conslaw_lite.families import registered

    registered()


def _finder_for(module: nn.Module) -> tuple[Finder, type] | None:
    """The finder registered for the module's class or the nearest class it derives from, and that class."""
    _load_families()
    for t in type(module).__mro__:
        if t in _FINDERS:
            return _FINDERS[t], t
        if qualified_name(t) in _NAMED_FINDERS:
            return _NAMED_FINDERS[qualified_name(t)], t
    return None


_COUNTABLE: list[tuple[Callable[[nn.Module], bool], Callable[[nn.Module], nn.Module]]] = []


def register_countable(matches: Callable[[nn.Module], bool], convert: Callable[[nn.Module], nn.Module]) -> None:
    """A family's float64 form of modules the counter cannot evaluate as they are (a library that computes parts
    of its forward in float32, or whose blocks take more than one input): ``convert(module)`` for every module
    with ``matches(module)``. The form must keep the module's parameter names, so that laws named for the
    module are read off it unchanged. :func:`float64_form` applies it.
    """
    _COUNTABLE.append((matches, convert))


def float64_form(module: nn.Module) -> nn.Module:
    """What the counter evaluates for ``module``: the registered form of the first family that claims it, else a
    float64 copy (the module itself is never changed).

    Examples
    ========
    >>> net = nn.Linear(2, 2)
    >>> f64 = float64_form(net)
    >>> f64.weight.dtype, net.weight.dtype, [n for n, _ in f64.named_parameters()]
    (torch.float64, torch.float32, ['weight', 'bias'])
    """
    form = registered_form(module)
    if form is None:  # a float64 copy, its embeddings' sparse=True off: the same function, a gradient torch.func takes
        form = module_copy(module).to(torch.float64)
        for layer in (m for m in form.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))):
            layer.sparse = False
    return _norm_eps_resolved(module, form)


def registered_form(module: nn.Module) -> nn.Module | None:
    """The float64 form a family registered for ``module`` (:func:`register_countable`), or None: no family claims it.

    Examples
    ========
    >>> registered_form(nn.Linear(2, 2)) is None
    True
    """
    _load_families()
    return next((convert(module) for matches, convert in _COUNTABLE if matches(module)), None)


NORMS = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)
MIN_EPS = 1e-7  # a norm's ε below this (and above 0) is counted at it: float64 cannot tell ε = 10⁻¹² from 0
RAISED = (f"counted at ε = {MIN_EPS:g}, where float64 tells it from 0 (the laws are the same for every ε > 0, and an ε "
          "this small breaks the scale symmetry of ε = 0 by less than round-off)")  # fmt: skip
# (float32's own machine epsilon, 1.2·10⁻⁷, nn.RMSNorm's default in float32 training, is left as it is)


def _norm_eps_resolved(module: nn.Module, form: nn.Module) -> nn.Module:
    """``form`` with each norm's ε as the count needs it: ``nn.RMSNorm(eps=None)`` given the ε of ``module``'s
    dtype, and an ε in (0, ``MIN_EPS``) raised to ``MIN_EPS``, with a warning.

    torch resolves ``eps=None`` at each call as the machine epsilon of the input's dtype: 1.2·10⁻⁷ for the float32
    model one trains, 2.2·10⁻¹⁶ for its float64 copy. Any ε > 0 breaks the symmetry of the norm's input scale that
    ε = 0 has, and the laws are the same for every ε > 0; but an ε of 10⁻¹² breaks it by singular values of 10⁻¹²
    to 10⁻¹⁴, which float64 round-off hides: counted as it is, that ε gives the scale law of ε = 0 too.

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(2, 2), nn.RMSNorm(2))
    >>> float64_form(net)[1].eps == torch.finfo(torch.float32).eps, net[1].eps
    (True, None)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     float64_form(nn.LayerNorm(2, eps=1e-12)).eps, str(caught[0].message)[:44]
    (1e-07, '`(the model)` (LayerNorm) has ε = 1e-12 > 0:')
    """
    floats = [p.dtype for p in module.parameters() if p.is_floating_point()]
    for name, norm in form.named_modules():
        named = "Norm" in type(norm).__name__ and isinstance(getattr(norm, "eps", None), float)  # timm's RmsNorm
        if not isinstance(norm, NORMS) and not named:
            continue
        if norm.eps is None:
            own = [p.dtype for p in module.get_submodule(name).parameters()] or floats or [torch.get_default_dtype()]
            norm.eps = torch.finfo(own[0]).eps
        if counted_eps(norm.eps) == norm.eps:
            continue
        say_once(
            module.get_submodule(name),
            f"`{name or '(the model)'}` ({type(norm).__name__}) has ε = {norm.eps:.3g} > 0: {RAISED}",
        )
        norm.eps = MIN_EPS
    return form


def counted_eps(eps: float) -> float:
    """A norm's ε as the counter takes it, whichever way the norm is written: ``MIN_EPS`` where 0 < ε < ``MIN_EPS``.

    Examples
    ========
    >>> counted_eps(1e-12), counted_eps(1e-5), counted_eps(0.0)
    (1e-07, 1e-05, 0.0)
    """
    return MIN_EPS if 0 < eps < MIN_EPS else eps


def supported_types() -> list[str]:
    """Names (``module.QualName``) of the module types whose laws are known.

    Examples
    ========
    >>> names = supported_types()
    >>> "conslaw_lite.families.toy.block.ToyProduct" in names, "conslaw_lite.families.ffn.block.SwiGLU" in names
    (True, True)
    """
    _load_families()
    return sorted({qualified_name(t) for t in _FINDERS} | set(_NAMED_FINDERS))


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the first caller outside ``conslaw_lite`` and the training
    libraries that call it (:data:`CALLERS`: a Trainer callback's warning belongs to the user's ``trainer.train()``
    line, not to ``transformers/trainer_callback.py``), whatever the depth.

    Examples
    ========
    >>> user_stacklevel()  # called from outside the package: its caller is the user's line
    1
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and _library_frame(os.path.abspath(frame.f_code.co_filename)):
        frame, level = frame.f_back, level + 1
    return level


CALLERS = ("transformers", "lightning", "pytorch_lightning", "accelerate")  # libraries whose loops call a callback


def _library_frame(path: str) -> bool:
    package = os.path.dirname(os.path.abspath(__file__))
    if path == os.path.abspath(contextlib.__file__):  # a context manager used as a decorator (quiet_vmap's) wraps us
        return True
    return path.startswith(package + os.sep) or any(f"{os.sep}{name}{os.sep}" in path for name in CALLERS)


def left_out(module: nn.Module, prefix: str, option: str) -> None:
    """Warn that ``module``'s laws are left out, naming the ``option`` they do not cover; a finder then returns
    ``None`` (the module is no block: its parameters are searched with the rest of the model, never guessed).

    Examples
    ========
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     left_out(nn.Linear(1, 1), "layers.0.", "a window")
    >>> str(caught[0].message)
    'Linear at layers.0 has a window: its laws are not derived here and are left out'
    """
    where = f"at {prefix.rstrip('.')}" if prefix.rstrip(".") else "(the model)"
    say_once(module, f"{type(module).__name__} {where} has {option}: its laws are not derived here and are left out")


_SAID: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module ↦ the warnings said of it


def say_once(module: nn.Module, message: str) -> None:
    """Warn ``message`` about ``module`` once: a search reads a model many times (its float64 copies, each part's
    laws), and a warning filter's "once per line" forgets at every ``catch_warnings``.

    Examples
    ========
    >>> import warnings
    >>> layer = nn.Linear(1, 1)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     say_once(layer, "a note")
    ...     say_once(layer, "a note")
    >>> len(caught)
    1
    """
    said = _SAID.setdefault(module, set())
    if message not in said:
        said.add(message)
        warnings.warn(message, stacklevel=user_stacklevel())


def find_blocks(model: nn.Module, *, required: bool = False) -> list[BlockLaws]:
    """Every block of ``model`` whose laws are known, in ``named_modules`` order.

    With ``required``, a model without any such block is an error (``ValueError``
    naming the supported module types) rather than an empty list.

    Examples
    ========
    Two toy products side by side: ``a·b·x`` has one law, ``a·b·c·x`` two.

    >>> from torch import nn
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> model = nn.Sequential(ToyProduct(a=2.0, b=1.0), ToyProduct(a=1.0, b=3.0, c=0.5))
    >>> [(block.path, block.kind, list(block.laws)) for block in find_blocks(model)]
    [('0', 'toy', ['a²−b²']), ('1', 'toy', ['a²−b²', 'a²−c²'])]
    """
    blocks, model = [], unwrapped(model)
    for name, module in model.named_modules():
        registered = _finder_for(module)
        if registered is None:
            continue
        finder, base = registered
        found = finder(module, f"{name}." if name else "")
        if found is None:
            continue
        why = altered(module, base)  # asked of a block only: a Sequential of one's own without norms has no laws
        if why is not None:  # left out, its parameters searched with the rest of the model
            left_out(module, f"{name}.", why)
            continue
        blocks.append(replace(found, path=name))  # the finder knows its prefix, not its name
    tied = tied_outside(model, [block.path for block in blocks])  # gradient from outside moves the laws
    for block in [b for b in blocks if b.path in tied]:
        left_out(model.get_submodule(block.path), f"{block.path}.", f"a weight shared outside it ({tied[block.path]})")
    blocks = [b for b in blocks if b.path not in tied]
    if required and not blocks:
        raise ValueError(
            f"no block with known conservation laws in {type(model).__name__}; "
            f"supported module types: {', '.join(supported_types())}"
        )
    return blocks


def quantities(model: nn.Module) -> list[Quantity]:
    """Every law and control of ``model``, block by block (each block's laws, then its controls).

    Raises ``ValueError`` naming the supported types when no block is known.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> [(q.name, q.key, q.kind) for q in quantities(ToyProduct(a=2.0, b=1.0))]
    [('a²−b²', 'a^2-b^2', 'law'), ('a²', 'a^2', 'control'), ('b²', 'b^2', 'control')]
    >>> from conslaw_lite.families.attention.block import MultiHeadAttention
    >>> q = quantities(MultiHeadAttention(4, 2, 2))[1]  # the short key leaves out the head
    >>> q.name, q.key, q.short_key
    ('head0:VᵀV−OᵀO', 'head0:V^TV-O^TO', 'V^TV-O^TO')
    """
    out = [
        Quantity(block.label(name), block.key(name), kind, block.kind, ascii_key(name.rpartition(":")[2]), fn)
        for block in find_blocks(model, required=True)
        for kind, fns in (("law", block.laws), ("control", block.controls))
        for name, fn in fns.items()
    ]
    keys = [q.key for q in out]
    if len(set(keys)) < len(keys):  # every API looks a quantity up by its key
        raise ValueError(f"two quantities of {type(model).__name__} share a key: {sorted(keys)}")
    return out


def groups(model: nn.Module) -> dict[Group, list[Quantity]]:
    """The quantities of ``model`` grouped by block family and kind: every family's laws, then its controls.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> {g.key: [q.key for q in qs] for g, qs in groups(ToyProduct(a=2.0, b=1.0)).items()}
    {'toy': ['a^2-b^2'], 'toy:control': ['a^2', 'b^2']}
    """
    every = quantities(model)
    out: dict[Group, list[Quantity]] = {}
    for kind in KINDS:
        for q in every:
            if q.kind == kind:
                out.setdefault(Group(q.block, kind), []).append(q)
    return out


def law_functions(model: nn.Module, *, controls: bool = False) -> dict[str, Law]:
    """All laws (or all controls) of ``model`` as functions ``h(θ)``, by their ASCII :attr:`Quantity.key`.

    Raises ``ValueError`` naming the supported types when no block is known.

    Examples
    ========
    For ``f = a·b·x`` the law is ``a² − b²``; its controls ``a²`` and ``b²`` are
    not conserved:

    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> list(law_functions(ToyProduct(a=2.0, b=1.0))), list(law_functions(ToyProduct(a=2.0, b=1.0), controls=True))
    (['a^2-b^2'], ['a^2', 'b^2'])
    """
    kind = "control" if controls else "law"
    return {q.key: q.fn for q in quantities(model) if q.kind == kind}


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
    return {n: p.detach().to(dtype, copy=True) for n, p in unwrapped(model).named_parameters()}


def evaluate(laws: Mapping[str, Law], params: Params) -> dict[str, torch.Tensor]:
    """``{name: h(params)}`` for each law ``h``.

    ``params`` need not be θ: at a gradient ``g`` a quadratic law gives
    ``h(g) = gᵀMg``, and one step ``θ⁺ = θ − τg`` moves it by exactly ``τ² h(g)``
    (chapter 07).

    Examples
    ========
    For ``h = a² − b²`` at ``g = (0.1, 0.2)``: ``h(g) = 0.01 − 0.04 = −0.03``.

    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> g = {"a": torch.tensor(0.1, dtype=torch.float64), "b": torch.tensor(0.2, dtype=torch.float64)}
    >>> evaluate(law_functions(ToyProduct(a=1.0, b=1.0)), g)
    {'a^2-b^2': tensor(-0.0300, dtype=torch.float64)}
    """
    return {name: fn(params) for name, fn in laws.items()}


def laws_of(model: nn.Module, params: Params | None = None) -> dict[str, torch.Tensor]:
    """The conserved quantities of every known block of ``model``, evaluated in float64.

    Keys are the ASCII keys ``"path:name"`` (:attr:`Quantity.key`), ``path`` the block's module name. Raises
    ``ValueError`` naming the supported types when no block is known.

    Examples
    ========
    ``f = a·b·x`` at ``a = 2, b = 1``: ``h = a² − b² = 3``.

    >>> from torch import nn
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> laws_of(ToyProduct(a=2.0, b=1.0))
    {'a^2-b^2': tensor(3., dtype=torch.float64)}
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

    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> controls_of(ToyProduct(a=2.0, b=1.0))
    {'a^2': tensor(4., dtype=torch.float64), 'b^2': tensor(1., dtype=torch.float64)}
    """
    return evaluate(law_functions(model, controls=True), parameters_of(model) if params is None else params)
