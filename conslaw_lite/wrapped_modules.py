"""A model as its user hands it over: ``torch.compile``'s wrapper taken off, a TorchScript module refused.

``torch.compile(model)`` returns an ``OptimizedModule`` that holds ``model`` (its ``_orig_mod``) and computes the
same function with the same parameter tensors, named ``_orig_mod.<name>``. The counter calls a module with its
parameters swapped for its own θ (``torch.func.functional_call``), and under the wrapper every new θ and vmap level
is a new graph to compile: a count of 26 parameters took 31 s, and its laws were named ``_orig_mod.1:...``. The
module inside is the same function, so it is what is counted and watched, its parameters named as the user wrote
them. A ``torch.jit.ScriptModule`` (``torch.jit.script``, ``torch.jit.trace``) lets no parameter be swapped, and
there is no Python module inside to fall back on: it is refused with what to give instead. ``nn.DataParallel`` and
``DistributedDataParallel`` hold the model as ``module`` and compute its function: that is what is counted.

A module whose forward pre-hook keeps a computed tensor as an attribute (``torch.nn.utils.prune``'s ``weight``, the
old ``torch.nn.utils.weight_norm``'s) cannot be deep-copied (torch copies graph leaves only), and every count works on
a float64 copy: :func:`module_copy` detaches those tensors for the copy (the hook computes them anew at each call).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

PARALLEL = (nn.DataParallel, nn.parallel.DistributedDataParallel)  # wrappers that hold the model as .module


def unwrapped(model: object) -> object:
    """``model`` with ``torch.compile``'s wrapper taken off (anything else as it is); a TorchScript module refused.

    Examples
    ========
    >>> net = nn.Linear(2, 2)
    >>> unwrapped(torch.compile(net)) is net, unwrapped(net) is net
    (True, True)
    >>> unwrapped(torch.jit.script(net))
    Traceback (most recent call last):
    ...
    ValueError: the model is a TorchScript module (torch.jit.script or trace), ...: give the nn.Module it was made from
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise ValueError(
            "the model is a TorchScript module (torch.jit.script or trace), whose parameters cannot be swapped for "
            "the θ the counter and the monitor evaluate at: give the nn.Module it was made from"
        )
    if isinstance(model, PARALLEL):
        return unwrapped(model.module)
    inner = getattr(model, "_orig_mod", None)
    return unwrapped(inner) if isinstance(model, nn.Module) and isinstance(inner, nn.Module) else model


def module_copy(module: nn.Module) -> nn.Module:
    """``copy.deepcopy(module)``, the tensors a forward pre-hook computed and kept as attributes detached for it.

    Examples
    ========
    >>> from torch.nn.utils import prune
    >>> net = prune.random_unstructured(nn.Linear(3, 2), "weight", amount=0.5)
    >>> [name for name, _ in module_copy(net).named_parameters()]  # copy.deepcopy(net) raises a RuntimeError
    ['bias', 'weight_orig']
    """
    computed = [
        (layer, name, value)
        for layer in module.modules()
        for name, value in vars(layer).items()
        if isinstance(value, torch.Tensor) and not value.is_leaf
    ]
    for layer, name, value in computed:
        setattr(layer, name, value.detach())
    try:
        return copy.deepcopy(module)
    finally:
        for layer, name, value in computed:
            setattr(layer, name, value)
