"""Mixture of experts: ``f(x) = Σ_e g_e(x) E_e(x)`` with a learned gate and SwiGLU experts.

The gate is one ``nn.Linear(d, n_E, bias=False)`` called ``gate``: its weight
row e is the paper's gate row W_e ∈ R^d, so the gate logits are ``z_e = W_e·x``.
The gate values are

* ``gating="softmax"``: ``g = softmax(z)``;
* ``gating="sigmoid"`` (normalized sigmoid): ``g_e = σ(z_e) / Σ_j σ(z_j)``.

With ``top_k = k`` each token keeps only its k largest logits S(x) and the
normaliser runs over the selected ones only (Mixtral's convention:
``g_e = exp(z_e) / Σ_{j∈S} exp(z_j)`` for e ∈ S, 0 otherwise; likewise for the
sigmoid). This choice decides the laws: adding one vector v to every gate row
shifts every logit by v·x, which changes neither S(x) nor a softmax over S(x),
so Σ_e W_e stays a law for every k; and for k = 1 the single selected gate
value is exactly 1, so the gate gets no gradient at all.

:meth:`MoE.forward` routes the way real MoE layers do: tokens are sent
(``index_select``) only to their selected experts and the weighted outputs are
added back (``index_add``). :meth:`MoE.dense_forward` computes every expert on
every token and weights by the full gate matrix (zeros off the selection), the
reference the sparse path is tested against. :mod:`.symbolic` writes the dense
block in sympy.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from conslaw_lite.families.ffn.block import SwiGLU

GATINGS = ("softmax", "sigmoid")


def normalize_gates(logits: torch.Tensor, gating: str) -> torch.Tensor:
    """Gate values from the (selected) logits, normalised over the last axis.

    ``softmax``: ``exp(z_e) / Σ_j exp(z_j)``; ``sigmoid``: ``σ(z_e) / Σ_j σ(z_j)``.

    Examples
    ========
    >>> import math
    >>> z = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)
    >>> normalize_gates(z, "softmax").tolist()  # 1/4, 3/4
    [0.25, 0.75]
    >>> normalize_gates(z, "sigmoid").tolist()  # (1/2, 3/4) / (5/4)
    [0.4, 0.6]
    """
    if gating == "softmax":
        return torch.softmax(logits, dim=-1)
    if gating == "sigmoid":
        s = torch.sigmoid(logits)
        return s / s.sum(dim=-1, keepdim=True)
    raise ValueError(f"gating must be one of {GATINGS}, got {gating!r}")


class MoE(nn.Module):
    """``f(x) = Σ_e g_e(x) E_e(x)``, experts ``E_e = expert(d, hidden, out)`` (SwiGLU by default).

    ``gate.weight`` is the n_E×d matrix whose row e is W_e; ``experts[e]`` is E_e.
    ``top_k=None`` is dense gating; ``top_k=k`` keeps each token's k largest
    logits and renormalises the gate over them. Input ``(batch, d)`` or
    ``(batch, T, d)``; every token is routed on its own.

    Examples
    ========
    >>> moe = MoE(3, n_experts=4, hidden=2, out=2, top_k=2).double()
    >>> x = torch.randn(5, 7, 3, dtype=torch.float64)
    >>> moe(x).shape
    torch.Size([5, 7, 2])
    >>> bool(torch.allclose(moe(x), moe.dense_forward(x)))
    True
    >>> moe.gates(x).count_nonzero(dim=-1).unique().tolist()  # two experts per token
    [2]
    """

    def __init__(
        self,
        d: int,
        n_experts: int,
        hidden: int,
        out: int,
        gating: str = "softmax",
        top_k: int | None = None,
        expert: Callable[[int, int, int], nn.Module] = SwiGLU,
    ) -> None:
        super().__init__()
        for name, v in (("d", d), ("n_experts", n_experts), ("hidden", hidden), ("out", out)):
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if gating not in GATINGS:
            raise ValueError(f"gating must be one of {GATINGS}, got {gating!r}")
        if top_k is not None and not (isinstance(top_k, int) and 1 <= top_k <= n_experts):
            raise ValueError(f"top_k must be None or an integer in [1, n_experts={n_experts}], got {top_k!r}")
        self.d, self.n_experts, self.out = d, n_experts, out
        self.gating, self.top_k = gating, top_k
        self.gate = nn.Linear(d, n_experts, bias=False)  # row e of gate.weight is W_e
        self.experts = nn.ModuleList(expert(d, hidden, out) for _ in range(n_experts))

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(experts, weights)``, both (n, k): each token's selected experts and their gate values.

        Dense gating selects all n_E experts (k = n_E). Under top-1 the weight is exactly 1.

        Examples
        ========
        >>> moe = MoE(2, n_experts=3, hidden=1, out=1, top_k=1).double()
        >>> experts, weights = moe.route(torch.randn(4, 2, dtype=torch.float64))
        >>> tuple(experts.shape), weights.flatten().tolist()
        ((4, 1), [1.0, 1.0, 1.0, 1.0])
        """
        logits = self.gate(tokens)  # (n, n_E): z_e = W_e·x
        k = self.top_k or self.n_experts
        selected, experts = logits.topk(k, dim=-1)  # (n, k)
        return experts, normalize_gates(selected, self.gating)

    def gates(self, x: torch.Tensor) -> torch.Tensor:
        """The full gate matrix ``g_e(x)``, shape ``(..., n_E)``, zero for experts a token does not use.

        Examples
        ========
        Equal logits (W = 0) give equal gates ``g_e = 1/n_E``:

        >>> moe = MoE(2, n_experts=4, hidden=1, out=1).double()
        >>> _ = torch.nn.init.zeros_(moe.gate.weight)
        >>> moe.gates(torch.ones(1, 2, dtype=torch.float64)).tolist()
        [[0.25, 0.25, 0.25, 0.25]]
        """
        tokens = x.reshape(-1, self.d)
        experts, weights = self.route(tokens)
        g = weights.new_zeros(tokens.shape[0], self.n_experts).scatter(1, experts, weights)
        return g.reshape(*x.shape[:-1], self.n_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        """``f(x) = Σ_{e ∈ S(x)} g_e(x) E_e(x)``, running each expert only on the tokens routed to it.

        Examples
        ========
        With W = 0 every gate is 1/n_E, so the dense output is the experts' mean:

        >>> moe = MoE(2, n_experts=4, hidden=1, out=1).double()
        >>> _ = torch.nn.init.zeros_(moe.gate.weight)
        >>> x = torch.ones(3, 2, dtype=torch.float64)
        >>> bool(torch.allclose(moe(x), torch.stack([E(x) for E in moe.experts]).mean(dim=0)))
        True
        """
        tokens = x.reshape(-1, self.d)  # (n, d)
        experts, weights = self.route(tokens)  # (n, k) each
        k = experts.shape[1]
        token_of = torch.arange(tokens.shape[0], device=x.device).repeat_interleave(k)  # (n·k,)
        expert_of, weight_of = experts.reshape(-1), weights.reshape(-1)  # (n·k,)
        y = tokens.new_zeros(tokens.shape[0], self.out)  # (n, m)
        for e, expert in enumerate(self.experts):
            slots = (expert_of == e).nonzero().squeeze(1)  # the (token, choice) pairs sent to expert e
            if slots.numel() == 0:
                continue
            mine = token_of[slots]
            y = y.index_add(0, mine, weight_of[slots, None] * expert(tokens.index_select(0, mine)))
        return y.reshape(*x.shape[:-1], self.out)

    def dense_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reference: every expert on every token, ``Σ_e g_e(x) E_e(x)`` with the full gate matrix.

        Examples
        ========
        Under top-1 routing ``g_e(x)`` is 1 for the chosen expert and 0 elsewhere; both forwards agree:

        >>> moe = MoE(3, n_experts=3, hidden=2, out=2, top_k=1).double()
        >>> x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> bool(torch.allclose(moe.dense_forward(x), moe(x)))
        True
        """
        g = self.gates(x)  # (..., n_E)
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-2)  # (..., n_E, m)
        return (g.unsqueeze(-1) * outputs).sum(dim=-2)


def routing_margin(model: MoE, x: torch.Tensor) -> float:
    """``min_x (z_(k)(x) − z_(k+1)(x))``: the gap between the last selected and the first dropped logit.

    When it is positive, the selected sets S(x) do not change for gate rows
    within ``margin / (2‖x‖)`` of the current ones, so the model is smooth there
    and its derivatives (and law counts) are those of the fixed routing.
    Dense gating (or k = n_E) has no dropped logit: the margin is ``inf``.

    Examples
    ========
    >>> moe = MoE(3, n_experts=3, hidden=1, out=1, top_k=1).double()
    >>> with torch.no_grad(): _ = moe.gate.weight.copy_(torch.eye(3, dtype=torch.float64))
    >>> routing_margin(moe, torch.tensor([[2.0, 0.5, 0.0]], dtype=torch.float64))
    1.5
    """
    k = model.top_k or model.n_experts
    if k == model.n_experts:
        return float("inf")
    with torch.no_grad():
        z = model.gate(x.reshape(-1, model.d)).topk(k + 1, dim=-1).values  # (n, k+1), sorted
    return float((z[:, k - 1] - z[:, k]).min())




