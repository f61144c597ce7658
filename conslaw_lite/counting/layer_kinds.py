"""Layers by what they are to a count: which compute otherwise in train mode, how a message names one.

A BatchNorm uses batch statistics in train mode, a Dropout draws masks: their laws in training are not those of eval
mode, so the counter, the monitor and the search ask which layers are such, and name them the same way everywhere.
"""

from __future__ import annotations

from torch import nn


def mode_dependent_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The submodules (name, module) in train mode that compute otherwise in eval mode, known by type alone.

    A BatchNorm (or an InstanceNorm with running statistics) uses batch statistics in train mode;
    a Dropout with p > 0 (or a DropPath with ``drop_prob`` > 0) draws random masks. Other modules may read
    ``self.training`` too: :func:`~conslaw_lite.counting.module_checks.check_countable` finds those by running them.

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.0))
    >>> [name for name, _ in mode_dependent_layers(net)], mode_dependent_layers(net.eval())
    (['1'], [])
    """
    return [(name, m) for name, m in model.named_modules() if m.training and is_mode_dependent(m)]


def is_mode_dependent(module: nn.Module) -> bool:
    """A BatchNorm, an InstanceNorm with running statistics, a Dropout with p > 0 or a DropPath with drop_prob > 0.

    Those compute otherwise in train mode than in eval mode, whatever mode ``module`` is in now.

    Examples
    ========
    >>> [is_mode_dependent(m) for m in (nn.BatchNorm2d(3).eval(), nn.Dropout(0.0), nn.Linear(2, 2))]
    [True, False, False]
    """
    if is_batch_norm(module) or ("InstanceNorm" in type(module).__name__ and getattr(module, "track_running_stats", 0)):
        return True
    return is_dropout_layer(module) and float(getattr(module, "p", getattr(module, "drop_prob", 0.0)) or 0.0) > 0


def describe_layer(name: str, module: nn.Module | None) -> str:
    """```name`` (Class, p=…)`` for a submodule, ``the model (Class)`` for the root (``name == ""``).

    Examples
    ========
    >>> describe_layer("drop", nn.Dropout(0.25)), describe_layer("", nn.ReLU())
    ('`drop` (Dropout, p=0.25)', 'the model (ReLU)')
    """
    cls = type(module).__name__ if module is not None else "?"
    detail = f", p={module.p:g}" if is_dropout_layer(module) and hasattr(module, "p") else ""
    return f"`{name}` ({cls}{detail})" if name else f"the model ({cls})"


def is_dropout_layer(m: nn.Module | None) -> bool:
    """A Dropout of any kind, or a DropPath (timm's stochastic depth), by its class name, whatever its p.

    Examples
    ========
    >>> is_dropout_layer(nn.Dropout2d(0.1)), is_dropout_layer(nn.ReLU())
    (True, False)
    """
    return m is not None and ("Dropout" in type(m).__name__ or "DropPath" in type(m).__name__)


def is_batch_norm(m: nn.Module | None) -> bool:
    """A BatchNorm of any dimension (torch's, SyncBatchNorm, or one of its own by that name).

    Examples
    ========
    >>> is_batch_norm(nn.BatchNorm2d(3)), is_batch_norm(nn.LayerNorm(3)), is_batch_norm(None)
    (True, False, False)
    """
    return m is not None and "BatchNorm" in type(m).__name__
