"""Laws of transformers' gated MLPs and of Qwen3-MoE's sparse block (router and fused experts).

The MLP ``down_proj(silu(gate_proj x) ⊙ up_proj x)`` is the book's SwiGLU with A = ``down_proj``,
B = ``gate_proj``, C = ``up_proj``: ``‖A_{:,i}‖² − ‖[C_{i,:}, c_i]‖²`` per hidden unit
(:func:`conslaw_lite.families.ffn.laws.glu_block`).

Qwen3-MoE keeps its n_E experts fused: ``experts.gate_up_proj[e] = [B_e; C_e]`` (2r, d) and
``experts.down_proj[e] = A_e`` (d, r); each expert has its SwiGLU laws ``‖A_e[:, i]‖² − ‖C_e[i, :]‖²``.
Its router ``mlp.gate.weight`` (n_E, d) takes ``p = softmax(W x)``, keeps the top k of p and, with
``norm_topk_prob``, divides them by their sum. Adding one vector v to every row W_e shifts every logit by
v·x, which changes neither p nor the selection, so ``Σ_e W_e`` is conserved (d laws) for every k, with or
without the division; for k = 1 with the division the one weight is exactly 1 and the router gets no
gradient: every entry of W is conserved (n_E·d laws). ``tests/test_hf.py`` counts all four cases.

With ``output_router_logits=True`` (and a non-zero ``router_aux_loss_coef``) the model's loss adds the
load-balancing loss, a function of p: it moves W even for k = 1 with the division, so there only ``Σ_e W_e``
is watched (p is unchanged by the shift), with a warning naming the option.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from conslaw_lite.families.ffn.laws import glu_block
from conslaw_lite.families.hf.config import config_of, gate_of
from conslaw_lite.laws import Batch, BlockLaws, Law, Params, say_once
from conslaw_lite.shared_squares import squared


def mlp_laws(module: nn.Module, prefix: str) -> BlockLaws:
    """The gated block's laws of a transformers MLP (``Qwen3MLP``, ``LlamaMLP``, ``Qwen3MoeMLP``): SwiGLU's, or those of
    its ``hidden_act`` (:data:`~conslaw_lite.families.hf.config.GATE_ACTIVATIONS`).

    Examples
    ========
    >>> mlp = nn.Module()  # laid out like transformers' (mlp_bias=False)
    >>> mlp.gate_proj, mlp.up_proj = nn.Linear(4, 3, bias=False), nn.Linear(4, 3, bias=False)
    >>> mlp.down_proj = nn.Linear(3, 4, bias=False)
    >>> mlp_laws(mlp, "mlp.").laws.keys()
    dict_keys(['‖A_{:,i}‖²−‖C_{i,:}‖²'])
    """

    def bias(name: str) -> str | None:
        return f"{prefix}{name}.bias" if getattr(module, name).bias is not None else None

    return glu_block(
        f"{prefix}down_proj.weight", f"{prefix}up_proj.weight", f"{prefix}gate_proj.weight",
        c=bias("up_proj"), b=bias("gate_proj"), gate_family=gate_of(module),
    )  # fmt: skip


def _units(gate_up: str, down: str) -> Law:
    """``(‖A_e[:, i]‖² − ‖C_e[i, :]‖², ‖A_e[:, i]‖²)`` for every expert e and unit i: (2·n_E, r)."""

    def units(p: Params) -> torch.Tensor:
        a = squared(p[down]).sum(-2)  # (n_E, r): ‖A_e[:, i]‖²
        r = a.shape[-1]
        c = squared(p[gate_up])[..., r:, :].sum(-1)  # (n_E, r): ‖C_e[i, :]‖², C_e the second half of gate_up_proj[e]
        return torch.cat([a - c, a], dim=-2)

    return units


def experts_laws(n_experts: int, prefix: str) -> tuple[dict[str, Law], dict[str, Law], Batch]:
    """Each expert's SwiGLU laws from the fused tensors, keyed ``"expert{e}:‖A_{:,i}‖²−‖C_{i,:}‖²"``, its controls
    ``‖A_{:,i}‖²``, and the batch that evaluates them all at once.

    Examples
    ========
    >>> laws, controls, _ = experts_laws(2, "")
    >>> p = {"experts.down_proj": torch.ones(2, 3, 1), "experts.gate_up_proj": torch.ones(2, 2, 5)}
    >>> laws["expert1:‖A_{:,i}‖²−‖C_{i,:}‖²"](p).tolist()  # 3 − 5
    [-2.0]
    """
    units = _units(f"{prefix}experts.gate_up_proj", f"{prefix}experts.down_proj")
    names = [f"expert{e}:‖A_{{:,i}}‖²−‖C_{{i,:}}‖²" for e in range(n_experts)]
    halves = [f"expert{e}:‖A_{{:,i}}‖²" for e in range(n_experts)]
    laws = {name: (lambda p, e=e: units(p)[e]) for e, name in enumerate(names)}
    controls = {name: (lambda p, e=e: units(p)[n_experts + e]) for e, name in enumerate(halves)}
    return laws, controls, Batch(units, (*names, *halves))


def router_laws(
    router: nn.Module, prefix: str, balanced: bool = False
) -> tuple[dict[str, Law], dict[str, Law], tuple[Batch, ...]]:
    """The router's laws (``ΣW_e``, or ``W`` for top-1 with ``norm_topk_prob`` and no load-balancing loss: not
    ``balanced``), its controls (each row W_e), and the batch that evaluates ``ΣW_e`` with every W_e at once.

    Examples
    ========
    >>> router = nn.Module()  # laid out like Qwen3MoeTopKRouter
    >>> router.weight, router.top_k, router.norm_topk_prob = nn.Parameter(torch.ones(3, 2)), 2, False
    >>> laws, controls, (batch,) = router_laws(router, "mlp.gate.")
    >>> list(laws), list(controls), batch.fn({"mlp.gate.weight": torch.eye(3, 2)}).tolist()[0]
    (['ΣW_e'], ['W_0', 'W_1', 'W_2'], [1.0, 1.0])
    """
    key = f"{prefix}weight"
    if router.top_k == 1 and router.norm_topk_prob and not balanced:
        return {"W": lambda p: p[key].clone()}, {}, ()

    def rows(p: Params) -> torch.Tensor:  # (1 + n_E, d): ΣW_e, then W_0, W_1, ...
        W = p[key]
        return torch.cat([W.sum(-2, keepdim=True), W], dim=-2)

    names = [f"W_{e}" for e in range(router.weight.shape[0])]
    controls = {name: (lambda p, e=e: rows(p)[1 + e]) for e, name in enumerate(names)}
    return {"ΣW_e": lambda p: rows(p)[0]}, controls, (Batch(rows, ("ΣW_e", *names)),)


def moe_laws(module: nn.Module, prefix: str) -> BlockLaws:
    """The laws of a ``Qwen3MoeSparseMoeBlock``: every expert's and the router's (see the module docstring).

    Examples
    ========
    >>> moe = nn.Module()  # laid out like Qwen3MoeSparseMoeBlock: 3 experts, top 2
    >>> moe.gate = nn.Module()
    >>> moe.gate.weight, moe.gate.top_k, moe.gate.norm_topk_prob = nn.Parameter(torch.ones(3, 2)), 2, True
    >>> moe_laws(moe, "").kind, len(moe_laws(moe, "").laws)
    ('moe-softmax-top2', 4)
    """
    router = module.gate
    laws, controls, batch = experts_laws(router.weight.shape[0], prefix)
    gate_laws, gate_controls, gate_batches = router_laws(router, f"{prefix}gate.", _balanced(module, prefix))
    kind = f"moe-softmax-top{router.top_k}"
    aux = getattr(config_of(module), "router_aux_loss_coef", 0)
    refuse = _router_loss(prefix) if "W" in gate_laws and aux else None
    return BlockLaws(kind, {**laws, **gate_laws}, {**controls, **gate_controls}, (batch, *gate_batches), "", refuse)


def _router_loss(prefix: str) -> Callable[[dict], str | None]:
    """Why a call with ``output_router_logits=True`` breaks a top-1 router's laws (every entry of W): transformers
    then adds the load-balancing loss, which moves W (a probe: ε of W 1.2·10⁻⁵ after 5 steps, 8·10⁻¹⁷ without)."""
    where = prefix.rstrip(".") or "the model"

    def refuse(kwargs: dict) -> str | None:
        if not kwargs.get("output_router_logits"):
            return None
        return (
            f"this call asks for output_router_logits=True, which adds the load-balancing loss; it moves the top-1 "
            f"router of {where}, whose every entry of W is watched as a law: set model.config.output_router_logits "
            "= True before starting the monitor (it then watches ΣW_e alone)"
        )

    return refuse


def _balanced(module: nn.Module, prefix: str) -> bool:
    """Whether the model's loss adds the load-balancing loss (``output_router_logits``), warned of where it changes
    the router's laws (top-1 with the division)."""
    config = config_of(module)
    balanced = bool(getattr(config, "output_router_logits", False) and getattr(config, "router_aux_loss_coef", 0))
    if balanced and module.gate.top_k == 1 and module.gate.norm_topk_prob:
        say_once(
            module,
            f"{type(module).__name__} at {prefix.rstrip('.') or 'the model'} has output_router_logits=True: the "
            "load-balancing loss moves the router, so only ΣW_e is watched of its laws (every entry of W is kept "
            "by the language-model loss alone)",
        )
    return balanced


def formula(n_experts: int, r: int, d: int, top_k: int, norm_topk_prob: bool) -> tuple[int, str]:
    """The number of laws of a Qwen3-MoE block: ``n_E·r + d``, or ``n_E·r + n_E·d`` for top-1 with the division.

    Examples
    ========
    >>> formula(4, 2, 8, 2, False)
    (16, 'n_E·r + d = 4·2 + 8 = 16')
    >>> formula(4, 2, 8, 1, True)[0]
    40
    """
    if top_k == 1 and norm_topk_prob:
        N = n_experts * (r + d)
        return N, f"n_E·r + n_E·d = {n_experts}·{r} + {n_experts}·{d} = {N}"
    return n_experts * r + d, f"n_E·r + d = {n_experts}·{r} + {d} = {n_experts * r + d}"
