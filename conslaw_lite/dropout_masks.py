"""Laws found with a part's dropouts off, kept where they hold under the masks the dropouts draw in training.

In train mode a dropout multiplies its input by a random mask m (entries 0 or 1/(1 − p)): training follows
f(θ, x; m) with a fresh m at each step, and a law of that training must hold for every mask,
⟨∇h(θ), ∇_θ f_i(x; m)⟩ = 0. The count needs one deterministic function, so a part is searched with its
dropouts off (eval mode); each law found is then checked on the train-mode function: ``MASK_DRAWS`` forwards,
each drawing its own masks, at the part's θ and at a random one, ``COTANGENTS`` random ⟨a, f⟩ each. A
per-unit rescaling commutes with a mask on those units (the ReLU MLP's ‖A[i, :]‖² − ‖C[:, i]‖² holds); the
shift that a LayerNorm removes after a dropout does not (c·1 becomes c·m), and such a law is left out.
Laws that hold only under the masks (none with its dropouts off) are not searched. A forward that calls
``F.dropout`` itself is searched with those calls off too (:class:`FunctionalDropoutsOff`).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vjp
from torch.overrides import TorchFunctionMode

from conslaw_lite.counting.check import LawGradients
from conslaw_lite.counting.layer_kinds import is_mode_dependent
from conslaw_lite.counting.problem import problem_of, sample_inputs
from conslaw_lite.laws import Law
from conslaw_lite.seeding import Stream, generator
from conslaw_lite.wrapped_modules import module_copy

MASK_DRAWS = 8  # forwards, each with its own masks, at each θ
MASK_TOL = 1e-6  # a law's cosine with the masked gradients: round-off is ~1e-14, a broken law 1e-2 and up
COTANGENTS = 8  # random ⟨a, f⟩ per forward


def is_dropout(m: nn.Module) -> bool:
    """A Dropout (any dimension, torch's or one of its own by that name) or a DropPath, with p > 0, or an
    ``nn.MultiheadAttention`` whose ``dropout`` (on its attention weights, a call of ``F.dropout``) is > 0.

    Examples
    ========
    >>> is_dropout(nn.Dropout2d(0.1)), is_dropout(nn.Dropout(0.0)), is_dropout(nn.BatchNorm1d(2))
    (True, False, False)
    >>> is_dropout(nn.MultiheadAttention(4, 1, dropout=0.1)), is_dropout(nn.MultiheadAttention(4, 1))
    (True, False)
    """
    if isinstance(m, nn.MultiheadAttention):
        return m.dropout > 0
    return is_mode_dependent(m) and any(word in type(m).__name__ for word in ("Dropout", "DropPath"))


def inactive_dropouts(module: nn.Module, names: tuple[str, ...]) -> tuple[str, ...] | None:
    """Those of ``module``'s submodules ``names`` that are dropouts with p > 0, when none of them trains now; None
    when one does: a finder then leaves out the laws their masks break (a shift that a LayerNorm removes, c·1, becomes
    c·m: transformers' GPT-2 and BERT, timm's ViT), and names them as ``train_breaks`` otherwise.

    Examples
    ========
    >>> out = nn.Module()
    >>> out.dropout = nn.Dropout(0.1)
    >>> inactive_dropouts(out, ("dropout",)) is None, inactive_dropouts(out.eval(), ("dropout",))
    (True, ('dropout',))
    """
    dropouts = tuple(name for name in names if _has(module, name) and is_dropout(module.get_submodule(name)))
    return None if any(module.get_submodule(name).training for name in dropouts) else dropouts


def _has(module: nn.Module, name: str) -> bool:
    """Whether ``module`` has a submodule ``name`` (a model built without one: timm's Mlp of another kind)."""
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


def training_dropouts(module: nn.Module) -> list[str]:
    """The names of ``module``'s dropouts (Dropout, DropPath, p > 0) in train mode.

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1), nn.Dropout(0.0))
    >>> training_dropouts(net), training_dropouts(net.eval())
    (['1'], [])
    """
    return [name for name, m in module.named_modules() if m.training and is_dropout(m)]


def dropouts_off(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with its dropouts in eval mode (an attention's at p = 0), every other layer in the mode it
    is in.

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    >>> quiet = dropouts_off(net)
    >>> quiet.training, quiet[1].training, net[1].training
    (True, False, True)
    """
    quiet = module_copy(module)
    for name in training_dropouts(quiet):
        layer = quiet.get_submodule(name)
        if isinstance(layer, nn.MultiheadAttention):
            layer.dropout = 0.0  # its eval mode would take another kernel: the same function at p = 0
        else:
            layer.eval()
    return quiet


_FUNCTIONAL = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")


class FunctionalDropoutsOff(TorchFunctionMode):
    """Within the block, a call of ``F.dropout`` (or its kin) that would draw a mask (``training`` and p > 0) returns
    its input: a forward that calls it itself (``F.dropout(h, 0.2, self.training)``) is searched with it off, as
    :func:`dropouts_off` turns off the modules; :attr:`called` says whether one was.

    Examples
    ========
    >>> x = torch.ones(4)
    >>> with FunctionalDropoutsOff() as off:
    ...     y = torch.nn.functional.dropout(x, 0.5, training=True)
    >>> torch.equal(y, x), off.called
    (True, True)
    """

    def __init__(self) -> None:
        super().__init__()
        self.called = False
        self.dropouts = {getattr(F, name) for name in _FUNCTIONAL}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.dropouts:
            bound = inspect.signature(func).bind(*args, **kwargs)
            bound.apply_defaults()
            if bound.arguments["training"] and bound.arguments["p"] > 0:
                self.called = True
                return bound.arguments["input"]
        return func(*args, **kwargs)


def masked_residuals(
    module: nn.Module,
    laws: dict[str, Law],
    input_shape: tuple[int, ...] | None,
    inputs: torch.Tensor | None,
    seed: int = 0,
) -> dict[str, float]:
    """Each law's largest ``|⟨∇h, ∇⟨a, f(x; m)⟩⟩| / (‖∇h‖ ‖∇⟨a, f(x; m)⟩‖)`` with ``module``'s dropouts drawing
    masks m (module docstring), in float64, reproducible from ``seed``.

    Examples
    ========
    >>> torch.manual_seed(0) and None
    >>> mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4, 2))
    >>> unit = lambda p: p["0.weight"][0].square().sum() + p["0.bias"][0] ** 2 - p["3.weight"][:, 0].square().sum()
    >>> masked_residuals(mlp, {"unit 0": unit}, (3,), None)["unit 0"] < 1e-12
    True
    """
    problem = problem_of(module, None)  # a float64 copy, in the modes the module's layers are in
    gen = generator(seed, Stream.MODEL_CHECK)
    x = sample_inputs(input_shape, inputs, 8, gen)
    worst = dict.fromkeys(laws, 0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
        for theta in (problem.flatten(dict(module.named_parameters())), problem.random_theta(gen)):
            g = []
            for _ in range(MASK_DRAWS):
                out, pull = vjp(problem.outputs(x), theta)  # one forward: one draw of every mask
                a = torch.randn(COTANGENTS, out.numel(), generator=gen, dtype=torch.float64)
                g += [pull(row)[0] for row in a]
            g = torch.stack(g)
            for key, law in laws.items():
                h = lambda t, law=law: torch.as_tensor(law(problem.unflatten(t))).reshape(-1)  # noqa: E731
                worst[key] = max(worst[key], float(LawGradients(h, theta).cosines(g)[0].max()))
    return worst


def holding(laws: dict[str, Law], residuals: dict[str, float]) -> dict[str, Law]:
    """The laws whose residual under the masks (:func:`masked_residuals`) is within ``MASK_TOL``.

    Examples
    ========
    >>> holding({"a": abs, "b": abs}, {"a": 1e-15, "b": 0.3})
    {'a': <built-in function abs>}
    """
    return {key: law for key, law in laws.items() if residuals[key] <= MASK_TOL}
