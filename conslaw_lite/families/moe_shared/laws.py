"""Laws of a DeepSeek-MoE block: every expert's, shared or routed, plus the gate's ``Σ_e W_e``.

The experts' laws (SwiGLU: ``‖A_{:,i}‖² − ‖C_{i,:}‖²``) come from the SwiGLU finder, since
:func:`~conslaw_lite.laws.find_blocks` walks every submodule (``shared.s:...``, ``experts.e:...``). This
module adds the gate's: adding v to every row W_e adds v·x to every logit, which changes neither the
selection (the top-k of z + b, the bias included) nor softmax(z), so ``Σ_e ∇_{W_e} L = 0``, d laws, for
every k, k = 1 included (the weights are not renormalised over S(x), so unlike Mixtral's top-1 the gate
is not frozen). N = (n_s + n_r)·r + d. The routing bias b is a buffer: see :func:`bias_as_parameter`.
Controls: each row W_e alone.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import functional_call

from conslaw_lite.families.moe_shared.block import SharedMoE
from conslaw_lite.laws import BlockLaws, register_laws


def formula(n_shared: int, n_routed: int, hidden: int, d: int) -> tuple[int, str]:
    """The number of laws of a DeepSeek-MoE block: ``(n_s + n_r)·r`` from the experts, ``d`` from the gate.

    Examples
    ========
    >>> formula(1, 4, 2, 3)
    (13, '(n_s + n_r)·r + d = (1 + 4)·2 + 3 = 13')
    """
    N = (n_shared + n_routed) * hidden + d
    return N, f"(n_s + n_r)·r + d = ({n_shared} + {n_routed})·{hidden} + {d} = {N}"


def bias_as_parameter(model: SharedMoE) -> tuple[Callable, dict[str, torch.Tensor]]:
    """``(f(params, x), params)`` with the routing bias among the parameters, for ``count_laws(f, ..., params=)``.

    The output does not depend on b smoothly (it only chooses), so ``∂f/∂b = 0`` almost everywhere and the
    counter finds every ``b_e`` frozen: n_r more laws of gradient flow. They are not laws of training,
    whose only motion of b is :func:`~.block.balance_step`; so the block keeps b out of its parameters.

    Examples
    ========
    >>> f, params = bias_as_parameter(SharedMoE(2, 1, 3, 1, 1, routing_bias=True).double())
    >>> list(params)[-1], f(params, torch.ones(4, 2, dtype=torch.float64)).shape
    ('route_bias', torch.Size([4, 1]))
    """
    if model.route_bias is None:
        raise ValueError("this SharedMoE has no routing bias (build it with routing_bias=True)")
    params = {n: p.detach() for n, p in model.named_parameters()} | {"route_bias": model.route_bias.detach()}
    return (lambda p, x: functional_call(model, p, (x,))), params


@register_laws(SharedMoE)
def _shared_moe(module: SharedMoE, prefix: str) -> BlockLaws:
    key = prefix + "gate.weight"  # (n_r, d): row e is W_e
    controls = {f"W_{e}": lambda p, e=e: p[key][e].clone() for e in range(len(module.experts))}
    kind = "moe-shared" + ("-bias" if module.route_bias is not None else "")
    return BlockLaws(kind, {"ΣW_e": lambda p: p[key].sum(dim=0)}, controls)
