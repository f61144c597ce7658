"""What training must do for the laws a :class:`~conslaw_lite.monitor.Monitor` watches to be its laws.

A law is conserved by the gradient flow of *every* parameter it reads, in the mode the model trains in. So
the monitor leaves out laws that read a frozen parameter (:func:`without_frozen`), refuses or warns of layers
whose train mode breaks the watched symmetry (:func:`mode_conflicts`), says why an optimizer does not follow
gradient flow (:func:`optimizer_breaks_laws`), and checks the laws a user gives (:func:`checked_laws`).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Mapping

import torch
from torch import nn

from conslaw_lite.block_changes import OUTPUT_KEPT
from conslaw_lite.counting.layer_kinds import describe_layer, is_batch_norm, is_mode_dependent
from conslaw_lite.dropout_masks import MASK_TOL, FunctionalDropoutsOff, holding, is_dropout, masked_residuals
from conslaw_lite.law_stacks import Recorder
from conslaw_lite.laws import BlockLaws, Group, Law, find_blocks
from conslaw_lite.user_inputs import example_inputs


def mode_conflicts(model: nn.Module, given: bool) -> list[tuple[str, nn.Module, str]]:
    """Layers (name, module, why) that, in train mode, make the watched laws not laws of the training that runs."""
    if given:
        why = "laws given are those find_laws found for the eval-mode function, and train-mode training keeps others"
        masks = "; give input_shape= or inputs= to keep those that hold under its masks, or"
        return [(n, m, why + masks * is_dropout(m)) for n, m in model.named_modules() if is_mode_dependent(m)]
    conflicts = []
    for block in find_blocks(model):
        for name, m in model.get_submodule(block.path).named_modules():
            full = f"{block.path}.{name}".strip(".")
            if name and is_batch_norm(m):
                conflicts.append(
                    (full, m, f"it sits inside the {block.kind} block and breaks the symmetry of its laws")
                )
            elif name and is_mode_dependent(m) and block.kind == "ffn-linear":
                why = "it masks the hidden units of a linear block, whose laws AᵀA − BBᵀ need every rotation of them"
                conflicts.append((full, m, why))
            elif name in block.train_breaks and is_mode_dependent(m):
                why = f"its random masks break laws of the {block.kind} block found with it inactive"
                conflicts.append((full, m, why))
    return conflicts


def conflict_message(name: str, layer: nn.Module, why: str) -> str:
    """The refusal (or warning) for a layer of :func:`mode_conflicts`, naming it."""
    return (
        f"Monitor: {describe_layer(name, layer)} is in train mode, and {why}{'' if why.endswith(' or') else ';'} "
        "train in eval mode (model.eval()) to watch laws of what trains"
    )


def laws_under_masks(
    model: nn.Module,
    laws: Mapping[str, Law],
    conflicts: list[tuple[str, nn.Module, str]],
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
) -> tuple[dict[str, Law], list[tuple[str, nn.Module, str]]]:
    """The laws given (:func:`checked_laws`; found with the dropouts off) that hold under the masks the model's
    dropouts draw in training (:func:`~conslaw_lite.dropout_masks.masked_residuals`), a line printed for each left
    out, and the conflicts left: those of dropouts in train mode are resolved, given inputs to check the laws on. A
    forward that calls ``F.dropout`` itself is found by one forward on those inputs (without them it cannot be seen).

    Examples
    ========
    >>> torch.manual_seed(0) and None
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Dropout(0.5), nn.Linear(4, 2))
    >>> after = {"after": lambda p: p["3.weight"].sum(1)}  # C1: the LayerNorm makes 1ᵀy = 0, not 1ᵀ(m∘y)
    >>> before = {"before": lambda p: p["0.weight"].sum(0)}  # 1ᵀA: the LayerNorm removes c·1 from its input
    >>> kept, left = laws_under_masks(net, after | before, mode_conflicts(net, True), (3,), None)
    Monitor: law `after` of laws= is left out: it fails under the masks of the dropouts in train mode (cosine 6e-01)
    >>> list(kept), left
    (['before'], [])
    """
    laws = checked_laws(laws, model)
    known = input_shape is not None or inputs is not None
    dropouts = [c for c in conflicts if c[1].training and is_dropout(c[1])]
    if not known or any(c[1].training for c in conflicts if c not in dropouts):
        return laws, conflicts
    if not dropouts and not _calls_dropout(model, example_inputs(model, input_shape, inputs)):
        return laws, conflicts
    cosines = masked_residuals(model, laws, input_shape, inputs)
    for key, cosine in cosines.items():
        if cosine > MASK_TOL:
            print(f"Monitor: law `{key}` of laws= is left out: it fails under the masks of the dropouts in train mode "
                  f"(cosine {cosine:.0e})")
    kept = holding(laws, cosines)
    if not kept:
        raise ValueError("Monitor: every law of laws= fails under the masks of the dropouts in train mode: train in "
                         "eval mode (model.eval()) to watch them")
    return kept, [c for c in conflicts if c not in dropouts]


def checked_laws(laws: Mapping[str, Law], model: nn.Module) -> dict[str, Law]:
    """``laws`` (``laws=`` of :class:`Monitor`) after evaluating each once on the model's θ: an error names the law.

    Examples
    ========
    >>> checked_laws({"x": lambda p: p["nope.weight"].sum()}, nn.Linear(2, 1))
    Traceback (most recent call last):
    ...
    ValueError: laws=: law 'x' reads a parameter the model does not have ('nope.weight'); its parameters: weight, bias
    """
    if not laws:
        raise ValueError("laws= is empty: give at least one law h(θ), e.g. find_laws(model, input_shape).laws")
    named = {n: p.detach().double() for n, p in model.named_parameters()}
    for key, law in laws.items():
        if not callable(law):
            raise TypeError(f"laws=: law {key!r} is a {type(law).__name__}, not a function of the parameters")
        try:
            torch.as_tensor(law(named))
        except KeyError as err:
            raise ValueError(
                f"laws=: law {key!r} reads a parameter the model does not have ({err}); its parameters: "
                + ", ".join(list(named)[:8])
                + (", …" if len(named) > 8 else "")
            ) from None
    return dict(laws)


def listed(names: list[str], shown: int) -> str:
    """The first ``shown`` names, and how many more.

    Examples
    ========
    >>> listed(["a", "b", "c"], 2)
    'a, b and 1 more'
    """
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def optimizer_breaks_laws(
    optimizer: torch.optim.Optimizer, watched: Mapping[str, torch.Tensor] | None = None
) -> list[str]:
    """Why ``optimizer`` does not follow the gradient flow whose laws are watched (none for SGD, with momentum too),
    judged on the param groups that hold a parameter of ``watched`` (name → parameter; default: all of them).

    Examples
    ========
    >>> params = [nn.Parameter(torch.ones(2))]
    >>> optimizer_breaks_laws(torch.optim.SGD(params, lr=0.1, momentum=0.9))
    []
    >>> optimizer_breaks_laws(torch.optim.SGD(params, lr=0.1, weight_decay=0.01))[0][:68]
    'weight_decay=0.01 shrinks θ at every step: the laws decay at first o'
    >>> optimizer_breaks_laws(torch.optim.Adam(params), watched={})  # it updates no parameter a law reads
    []
    >>> class LARS(torch.optim.SGD):  # a step of its own
    ...     def step(self, closure=None):
    ...         return super().step(closure)
    >>> optimizer_breaks_laws(LARS(params, lr=0.1))[0][:44]
    'LARS subclasses SGD with a step() of its own'
    >>> class Named(torch.optim.SGD):  # SGD's own step
    ...     pass
    >>> optimizer_breaks_laws(Named(params, lr=0.1))
    []
    """
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):  # accelerate's wrapper
        optimizer = optimizer.optimizer
    read = None if watched is None else {id(p) for p in watched.values()}
    groups = [g for g in optimizer.param_groups if read is None or any(id(p) in read for p in g["params"])]
    why = []
    decay = max((group.get("weight_decay", 0.0) or 0.0 for group in groups), default=0.0)
    if decay > 0:
        why.append(
            f"weight_decay={decay:g} shrinks θ at every step: the laws decay at first order in τ (ε is not O(τ²k)); "
            "set it to 0 to watch gradient flow's laws"
        )
    if groups and isinstance(optimizer, torch.optim.SGD) and _own_step(optimizer):
        why.append(
            f"{type(optimizer).__name__} subclasses SGD with a step() of its own: the laws hold only if it steps "
            "along −τ∇L as SGD does (a LARS-style rescaling per layer moves them at first order; ε measures how far)"
        )
    if groups and not isinstance(optimizer, torch.optim.SGD) and not type(optimizer).__module__.startswith("torch."):
        why.append(  # a class of one's own may well be plain SGD: what it does is not known here
            f"{type(optimizer).__name__} is not torch's SGD: the laws hold only if it steps along −τ∇L as SGD does "
            "(Adam and its kin rescale each coordinate, weight decay shrinks θ: both move them at first order); ε "
            "measures how far it moves them"
        )
    elif groups and not isinstance(optimizer, torch.optim.SGD):
        why.append(
            f"{type(optimizer).__name__} does not step along −τ∇L as SGD does (Adam and its kin rescale each "
            "coordinate, L-BFGS bends the step by curvature): the laws of gradient flow are not its laws, and ε "
            "measures how far it moves them (SGD, with or without momentum, keeps them to O(τ²k))"
        )
    return why


def _own_step(optimizer: torch.optim.SGD) -> bool:
    """Whether a subclass of SGD replaces its ``step()`` (torch wraps every optimizer's ``step`` with its hooks)."""
    return inspect.unwrap(type(optimizer).step) is not inspect.unwrap(torch.optim.SGD.step)


STEP_SETTINGS = ("lr", "momentum", "dampening", "nesterov", "maximize")  # what makes two param groups' steps differ


def steps_apart(optimizers: tuple[torch.optim.Optimizer, ...], watched: Mapping[str, torch.Tensor]) -> list[str]:
    """Why the laws break when the ``watched`` parameters (name → tensor) are in param groups that step differently
    (another lr, momentum): gradient flow moves every parameter with one step size, and a law that reads parameters
    of two such groups drifts at first order (a norm's gain trained at lr/10 against the next layer's columns).

    Examples
    ========
    >>> a, b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    >>> opt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.01}], lr=0.1)
    >>> steps_apart((opt,), {"a": a, "b": b})[0][:82]
    'the laws read parameters that step with different settings (lr=0.1: a; lr=0.01: b)'
    """
    setting = {}
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            key = tuple((k, float(group[k])) for k in STEP_SETTINGS if k in group)
            setting.update({id(p): key for p in group["params"]})
    apart: dict[tuple, list[str]] = {}
    for name, p in watched.items():
        if id(p) in setting:
            apart.setdefault(setting[id(p)], []).append(name)
    if len(apart) < 2:
        return []
    differ = [k for k in STEP_SETTINGS if len({dict(key)[k] for key in apart if k in dict(key)}) > 1]
    if not differ:  # settings one optimizer has and another lacks (SGD's momentum beside Adam, judged on its own)
        return []
    groups = "; ".join(
        ", ".join(f"{k}={v:g}" for k, v in key if k in differ) + ": " + ", ".join(names[:3]) + ", …" * (len(names) > 3)
        for key, names in apart.items()
    )
    return [
        f"the laws read parameters that step with different settings ({groups}): gradient flow moves every parameter "
        "with one step size, and a law reading two of them drifts at first order (ε measures how far)"
    ]


def without_frozen(grouped: dict[Group, dict[str, Law]], model: nn.Module) -> dict[Group, dict[str, Law]]:
    """The laws that read no frozen parameter (``requires_grad=False``), a line printed per group that loses some.

    A law of the block holds when gradient flow moves every parameter it reads: with V frozen and O trained,
    ``VᵀV − OᵀO`` drifts at first order.

    Examples
    ========
    >>> from conslaw_lite.laws import Group
    >>> net = nn.Linear(2, 1)
    >>> _ = net.bias.requires_grad_(False)
    >>> laws = {"w": lambda p: p["weight"].sum(), "b": lambda p: p["bias"].sum()}
    >>> list(without_frozen({Group("found", "law"): laws}, net)[Group("found", "law")])
    Monitor: 1 law of group `found` not watched: it reads frozen parameters (requires_grad=False: bias)
    ['w']
    """
    named = dict(model.named_parameters())
    frozen = {n for n, p in named.items() if not p.requires_grad}
    if not frozen:
        return grouped
    values = {n: p.detach().double() for n, p in named.items()}
    kept = {}
    for group, laws in grouped.items():
        reads, sizes = {}, {}
        for key, law in laws.items():
            recorder = Recorder(values)
            with torch.no_grad():
                sizes[key] = torch.as_tensor(law(recorder)).numel()  # a law can be a vector (one per unit) or matrix
            reads[key] = frozen.intersection(recorder.order)
        dropped = {key for key, names in reads.items() if names}
        if dropped:
            names = ", ".join(sorted(set().union(*reads.values())))
            count, many = sum(sizes[key] for key in dropped), len(dropped) > 1
            entries = f" ({count} values)" if count > len(dropped) else ""
            print(f"Monitor: {len(dropped)} law{'s' if many else ''} of group `{group.key}`{entries} not watched: "
                  f"{'they read' if many else 'it reads'} frozen parameters (requires_grad=False: {names})")
        if len(dropped) < len(laws):
            kept[group] = {key: law for key, law in laws.items() if key not in dropped}
    return kept


def _calls_dropout(model: nn.Module, x: torch.Tensor) -> bool:
    """Whether a forward of ``model`` (in train mode) on ``x`` calls ``F.dropout`` or its kin with p > 0."""
    if not model.training:
        return False
    with torch.random.fork_rng(devices=[]), torch.no_grad(), FunctionalDropoutsOff() as off:
        try:
            model(x)
        except Exception as err:  # noqa: BLE001 - the user's forward: name it, with what it was given
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"Monitor: the model fails on inputs like those given ({type(err).__name__}: {first}); laws= are "
                "checked on them under the masks of its dropouts (token ids: give inputs=, not input_shape=)"
            ) from err
    return off.called


UNIT_ROUNDOFF = {torch.bfloat16: "2⁻⁸", torch.float16: "2⁻¹¹"}  # of the dtypes a model trains in at low precision


def check_watchable(model: nn.Module) -> None:
    """Refuse a model on the meta device (shapes without values); say that a float16 or bfloat16 model's steps round θ.

    Examples
    ========
    >>> check_watchable(nn.Linear(2, 1).bfloat16())  # doctest: +ELLIPSIS
    Monitor: the model's parameters are bfloat16: each step rounds θ to it, moving every law by about 2⁻⁸ of its ...
    """
    if any(p.is_meta for p in model.parameters()):
        raise ValueError(
            "Monitor: the model's parameters are on the meta device (shapes without values): materialize them "
            "first (model.to_empty(device=...) and initialize them, or load the weights)"
        )
    low = {p.dtype for p in model.parameters()} & set(UNIT_ROUNDOFF)
    for dtype in sorted(low, key=str):
        print(f"Monitor: the model's parameters are {str(dtype).removeprefix('torch.')}: each step rounds θ to it, "
              f"moving every law by about {UNIT_ROUNDOFF[dtype]} of its terms at random; ε shows that rounding beside "
              "gradient flow's O(τ²k) (the laws are those of its float64 function)")


def check_every(every: int) -> int:
    """``every`` if it is a positive integer (record every ``every``-th step), else a ``ValueError`` naming it.

    Examples
    ========
    >>> check_every(0)
    Traceback (most recent call last):
    ...
    ValueError: every must be a positive integer, got 0
    """
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive integer, got {every!r}")
    return every


def refuse_calls(model: nn.Module, blocks: list[BlockLaws], owner: object) -> None:
    """Refuse (``ValueError``) a call of ``model`` whose keyword arguments break a block's laws
    (:attr:`~conslaw_lite.laws.BlockLaws.refuse_call`), for as long as ``owner`` (the monitor) lives.

    Examples
    ========
    >>> from conslaw_lite.laws import BlockLaws
    >>> net, owner = nn.Linear(2, 1), nn.Module()
    >>> block = BlockLaws("toy", {}, refuse_call=lambda kw: "extra loss" if kw.get("aux") else None)
    >>> refuse_calls(net, [block], owner)
    >>> net.forward = lambda x, aux=False: x.sum()
    >>> net(torch.ones(2)).item()
    2.0
    >>> net(torch.ones(2), aux=True)
    Traceback (most recent call last):
    ...
    ValueError: Monitor: extra loss
    """
    checks = [block.refuse_call for block in blocks if block.refuse_call is not None]
    if not checks:
        return

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        for reason in (check(kwargs) for check in checks):
            if reason:
                raise ValueError(f"Monitor: {reason}")

    setattr(hook, OUTPUT_KEPT, True)  # it raises or lets the call be: the laws of the blocks stay theirs
    weakref.finalize(owner, model.register_forward_pre_hook(hook, with_kwargs=True).remove)
