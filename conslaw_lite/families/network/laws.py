"""Whole-network laws: what a normalization layer couples across blocks.

The per-block table (chapters 03–06) misses laws that tie blocks together.
Two kinds come from normalization layers:

* **A norm gain and the projections it feeds.** ``z = γ ⊙ n(x)`` read by linear
  maps ``W_1 z, W_2 z, ...`` (``nn.Linear`` layout, ``W ∈ R^(out×d)``) is unchanged
  by ``γ_j → λγ_j, W_i[:, j] → W_i[:, j]/λ``. The law of that scaling is, per
  coordinate j of the norm (with ``β_j²`` added when the norm has a bias β)::

      γ_j² − Σ_i ‖W_i[:, j]‖²        e.g. γ_j² − ‖W_q[:,j]‖² − ‖W_k[:,j]‖² − ‖W_v[:,j]‖²

* **Scale-invariant weights.** When a group of weights only reaches the output
  through norms with ε = 0, ``f(λW) = f(W)``, so ``⟨W, ∇_W f⟩ = 0`` and the
  group's squared norm ``Σ ‖W‖_F²`` is conserved.
* **Shift-invariant weights.** A LayerNorm subtracts the mean over its d inputs,
  so a weight W ∈ R^(d×m) writing only into LayerNorms may become ``W + 1aᵀ``:
  its column sums ``1ᵀW`` (m linear laws) are conserved.

A module declares its couplings by inheriting
:class:`~conslaw_lite.families.network.couplings.NetworkLaws` (in :mod:`.couplings`);
the finder registered here turns the declarations into laws, so :func:`~conslaw_lite.laws.laws_of` and the
monitor track them beside the blocks' own laws. :func:`discover_couplings`
finds, with forward hooks, which linear layers read which norm in *any* model,
to check a declaration (or to write one).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from conslaw_lite.families.network.couplings import NetworkLaws, NormCoupling
from conslaw_lite.laws import BlockLaws, Law, register_laws
from conslaw_lite.shared_squares import squared


def tiny_law_count(
    vocab: int, d: int, n_heads: int, head_dim: int, hidden: int, *, norm: str = "rms", norm_eps: float = 1e-6
) -> int:
    """The laws of a one-layer :class:`TinyTransformer`: ``N = n·k(k+1) + r + 3d (+ 1) (+ vocab + n·k + r)``.

    ``n·k(k+1)`` from the attention heads, ``r`` from the SwiGLU, ``3d`` from the three norm gains
    with the projections they feed; ``+ 1`` when ε = 0 (the stream writers E, O, A scale together),
    ``+ vocab + n·k + r`` with LayerNorm (the column sums of E, O and A).

    Examples
    ========
    >>> tiny_law_count(5, 4, 2, 2, 3), tiny_law_count(5, 4, 2, 2, 3, norm="layer", norm_eps=0.0)
    (27, 40)
    """
    n, k, r = n_heads, head_dim, hidden
    return n * k * (k + 1) + r + 3 * d + (norm_eps == 0) + (norm == "layer") * (vocab + n * k + r)


NORM_TYPES = (nn.RMSNorm, nn.LayerNorm)


def gain_law(gain: str, consumers: list[str], bias: str | None = None, axis: int = -2) -> Law:
    """``γ_j² (+ β_j²) − Σ_i ‖W_i[:, j]‖²`` for every coordinate j, as a vector of length d.

    ``gain``, ``bias`` and ``consumers`` are parameter names (weights in ``nn.Linear`` layout, whose column j reads
    coordinate j; ``axis=-1`` for transformers' ``Conv1D``, stored (d, out), whose row j does).

    Examples
    ========
    >>> import torch
    >>> p = {"g": torch.tensor([2.0, 1.0]), "W": torch.tensor([[1.0, 0.0], [1.0, 1.0]])}
    >>> gain_law("g", ["W"])(p).tolist()   # [4 − (1 + 1), 1 − (0 + 1)]
    [2.0, 0.0]
    >>> gain_law("g", ["W"], axis=-1)(p).tolist()   # rows: [4 − (1 + 0), 1 − (1 + 1)]
    [3.0, -1.0]
    """

    def law(p):  # negative axes: the monitor may stack the layers' parameters on a new first axis
        h = squared(p[gain]) if bias is None else squared(p[gain]) + squared(p[bias])
        for w in consumers:
            h = h - squared(p[w]).sum(axis)
        return h

    return law


def add_gain_law(
    laws: dict[str, Law], controls: dict[str, Law], prefix: str, coupling: NormCoupling, norm: nn.Module
) -> None:
    """Add ``coupling``'s :func:`gain_law` to ``laws`` and its control ``γ_j²`` to ``controls``, by name.

    ``norm`` is the coupling's norm module (its bias, if any, enters the law); names are relative to
    ``prefix``, the block's path in the model.

    Examples
    ========
    >>> laws, controls = {}, {}
    >>> add_gain_law(laws, controls, "", NormCoupling("ln", ("attn.Q", "attn.K")), nn.RMSNorm(2))
    >>> list(laws), list(controls)
    (['ln.γ²−‖W[:,j]‖² (Q+K)'], ['ln.γ²'])
    """
    gain = f"{prefix}{coupling.norm}.weight"
    bias = f"{prefix}{coupling.norm}.bias" if getattr(norm, "bias", None) is not None else None
    readers = "+".join(c.rsplit(".", 1)[-1] for c in coupling.consumers)
    consumers = [f"{prefix}{c}.weight" for c in coupling.consumers]
    laws[f"{coupling.norm}.γ²−‖W[:,j]‖² ({readers})"] = gain_law(gain, consumers, bias)
    controls[f"{coupling.norm}.γ²"] = gain_law(gain, [])


def squared_norm_law(names: list[str]) -> Law:
    """``Σ_W ‖W‖_F²`` over the named parameters, a scalar.

    Examples
    ========
    >>> import torch
    >>> squared_norm_law(["a", "b"])({"a": torch.ones(2, 2), "b": torch.ones(3)}).item()
    7.0
    """
    return lambda p: sum((p[n] ** 2).sum() for n in names)


def column_sum_law(name: str, ndim: int = 2) -> Law:
    """``1ᵀW``: the sums over the first axis of the named parameter of ``ndim`` axes (the column sums of an
    ``nn.Linear`` weight, a vector; the sum of a bias, a scalar). The axis is counted from the end, so that the
    parameters of repeated layers stacked on a new first axis give each layer's sums.

    Examples
    ========
    >>> import torch
    >>> column_sum_law("W")({"W": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}).tolist()
    [4.0, 6.0]
    >>> column_sum_law("b", ndim=1)({"b": torch.tensor([1.0, 2.0])}).item()
    3.0
    """
    return lambda p: p[name].sum(dim=-ndim)


def _check_coupling(parent: nn.Module, coupling: NormCoupling) -> tuple[nn.Module, list[nn.Linear]]:
    modules = dict(parent.named_modules())
    norm = modules.get(coupling.norm)
    if not isinstance(norm, NORM_TYPES) or getattr(norm, "weight", None) is None:
        raise ValueError(f"{coupling.norm!r} is not an RMSNorm or LayerNorm with a gain in {type(parent).__name__}")
    consumers = [modules.get(c) for c in coupling.consumers]
    for name, layer in zip(coupling.consumers, consumers):
        if not isinstance(layer, nn.Linear) or layer.in_features != norm.weight.numel():
            d = norm.weight.numel()
            raise ValueError(f"{name!r} is not an nn.Linear reading the {d} outputs of {coupling.norm!r}")
    return norm, consumers


@register_laws(NetworkLaws)
def _network_block(module: NetworkLaws, prefix: str) -> BlockLaws | None:
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}
    for coupling in module.norm_couplings():
        norm, _ = _check_coupling(module, coupling)
        add_gain_law(laws, controls, prefix, coupling, norm)
    invariant = module.scale_invariant_weights()
    if invariant:
        laws["Σ‖W‖² (scale-invariant)"] = squared_norm_law([prefix + n for n in invariant])
        controls[f"‖{invariant[0]}‖²"] = squared_norm_law([prefix + invariant[0]])
    for name in module.shift_invariant_weights():
        laws[f"1ᵀ{name}"] = column_sum_law(prefix + name, module.get_parameter(name).ndim)
    if not laws:
        return None
    return BlockLaws("network", laws, controls)


def discover_couplings(model: nn.Module, example: torch.Tensor) -> list[NormCoupling]:
    """Which ``nn.Linear`` layers read each norm's output *directly*, found by one forward pass.

    A norm's output tensor is recognised by identity when a linear layer receives it,
    so a reshape in between hides the coupling (then declare it by hand).

    Examples
    ========
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Sequential(nn.RMSNorm(3), nn.Linear(3, 2))
    >>> discover_couplings(net, torch.randn(4, 3))
    [NormCoupling(norm='0', consumers=('1',))]
    """
    outputs: dict[int, tuple[str, torch.Tensor]] = {}  # id(norm output) -> (norm name, the output, kept alive)
    readers: dict[str, list[str]] = {}
    hooks = []

    def on_norm(name: str) -> Callable:
        def hook(_module, _inputs, output):
            outputs[id(output)] = name, output
            readers.setdefault(name, [])

        return hook

    def on_linear(name: str) -> Callable:
        def hook(_module, inputs):
            source, _ = outputs.get(id(inputs[0]), (None, None))
            if source is not None and name not in readers[source]:
                readers[source].append(name)

        return hook

    for name, module in model.named_modules():
        if isinstance(module, NORM_TYPES):
            hooks.append(module.register_forward_hook(on_norm(name)))
        elif isinstance(module, nn.Linear):
            hooks.append(module.register_forward_pre_hook(on_linear(name)))
    try:
        with torch.no_grad():
            model(example)
    finally:
        for hook in hooks:
            hook.remove()
    return [NormCoupling(norm, tuple(names)) for norm, names in readers.items() if names]
