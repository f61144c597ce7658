"""Registered blocks whose parameters something outside them reads: their closed-form laws do not hold there.

A block's laws (``Q_iᵀQ_i − K_iᵀK_i``, ``V_iᵀV_i − O_iᵀO_i``, ...) say that the block's output does not move
along certain directions of its own parameters. Gradient flow keeps them only if nothing else reads those
parameters: a weight tied to a layer outside the block (``head.weight = attn.out_proj.weight``), or read by
the parent's forward (``F.linear(y, attn.out_proj.weight.T)``), gets gradient from there too, and the law drifts
at first order like any control (ε 0.24 against 0.17 for its controls after 60 steps).

:func:`read_outside` finds both: a tie from the parameters' names alone, a read in one forward on example inputs
(when they are known), with every function torch dispatches seen and each block's forward on a stack.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from conslaw_lite.block_changes import tied_outside
from conslaw_lite.config import evaluating
from conslaw_lite.laws import registered_form
from conslaw_lite.model_parts import lacks_forward


def _children_on(model: nn.Module, x: torch.Tensor) -> None:
    """A model with no forward of its own (a ``LightningModule``): each child called on ``x``, so that the reads of
    those that take it are seen. One that takes other inputs (a decoder's) is passed over here:
    :func:`conslaw_lite.own_laws.own_laws` names it, and raises when no child takes ``x``."""
    for child in model.children():
        try:
            child(x)
        except Exception:  # noqa: BLE001 - a child that takes other inputs: no read of it is seen on x
            continue


class _Reads(TorchFunctionMode):
    """Records, per block, the first of its parameters an op reads while that block's forward is not running."""

    def __init__(self, owner: dict[int, tuple[str, str]], active: list[str]) -> None:
        super().__init__()
        self.owner, self.active, self.found = owner, active, {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        for arg in (*args, *(kwargs or {}).values()):
            if isinstance(arg, nn.Parameter) and id(arg) in self.owner:
                path, name = self.owner[id(arg)]
                if path not in self.active and path not in self.found:
                    self.found[path] = f"`{name}` is read outside its forward"
        return func(*args, **(kwargs or {}))


@contextmanager
def _running(model: nn.Module, paths: Sequence[str], active: list[str]) -> Iterator[None]:
    """While active, ``active`` holds the paths of the blocks whose forward is running."""

    def leave(_module: nn.Module, _args: tuple, _out: object) -> None:  # None: the output is kept
        active.pop()

    hooks = []
    for path in paths:
        block = model.get_submodule(path)
        hooks.append(block.register_forward_pre_hook(lambda _m, _x, path=path: active.append(path)))
        hooks.append(block.register_forward_hook(leave))
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def read_outside(model: nn.Module, paths: Sequence[str], x: torch.Tensor | None = None) -> dict[str, str]:
    """Per block path of ``paths``, why its laws are not laws of ``model``: a parameter tied outside it
    (:func:`tied_outside`), or, with example inputs ``x``, read outside its forward in ``model(x)``.

    Examples
    ========
    >>> import torch.nn.functional as F
    >>> class Reader(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.attn, self.head = nn.Linear(2, 2), nn.Linear(2, 1)
    ...     def forward(self, x):
    ...         return self.head(F.linear(self.attn(x), self.attn.weight.T))
    >>> read_outside(Reader(), ["attn", "head"], torch.ones(3, 2))
    {'attn': '`attn.weight` is read outside its forward'}
    """
    why = tied_outside(model, paths)
    if x is None:
        return why
    try:
        found = _reads_in(model, paths, x)
    except TypeError:  # a module that takes more than one tensor (transformers' attention): its form of one tensor
        form = registered_form(model)
        if form is None:
            raise
        found = _reads_in(form, paths, x.to(torch.float64) if x.is_floating_point() else x)
    return why | {path: text for path, text in found.items() if path not in why}


def _reads_in(model: nn.Module, paths: Sequence[str], x: torch.Tensor) -> dict[str, str]:
    """Per block path, its parameter that ``model(x)`` reads outside the block's forward (the first one)."""
    owner = {}
    for path in paths:
        for name, p in model.get_submodule(path).named_parameters():
            owner.setdefault(id(p), (path, f"{path}.{name}" if path else name))
    active: list[str] = []
    with evaluating(model), _running(model, paths, active), _Reads(owner, active) as reads, torch.no_grad():
        try:
            model(x)  # eval mode: no dropout, no running statistics updated
        except NotImplementedError as err:
            if not lacks_forward(model, err):
                raise
            _children_on(model, x)
    return reads.found
