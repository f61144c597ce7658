"""DeepSeek-MoE: shared experts every token uses, plus fine-grained routed experts, softmax top-k.

For a token x ∈ R^d, with routed-expert logits ``z = Wx`` (``gate.weight`` = W, n_r×d) and a routing bias
``b`` (zero unless ``routing_bias``)::

    S(x) = the k experts with the largest z_e + b_e         (the bias chooses ...)
    g_e(x) = softmax(z)_e for e ∈ S(x), 0 otherwise          (... but does not weigh: DeepSeek-MoE's gate,
                                                                not renormalised over S)
    f(x) = Σ_s shared_s(x) + Σ_{e∈S(x)} g_e(x) experts_e(x)

Every expert is a SwiGLU ``A·(silu(Bx) ⊙ Cx)``. DeepSeek-V3 balances the load without an auxiliary loss by
nudging ``b`` after each step (:func:`balance_step`): b is a buffer, not a parameter, since no gradient
ever moves it (chapter 16 counts what changes when it is handed to the counter as a parameter).
"""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.families.ffn.block import SwiGLU


class SharedMoE(nn.Module):
    """``Σ_s shared_s(x) + Σ_{e∈S(x)} softmax(Wx)_e · experts_e(x)``, S(x) the top-k of ``Wx + b``.

    ``n_shared`` shared and ``n_routed`` routed SwiGLU experts ``(d → hidden → out)``; ``top_k`` routed
    experts per token; ``routing_bias``: the buffer ``route_bias`` (b, zero at first) enters the selection.
    Input ``(batch, d)`` or ``(batch, T, d)``; each token is routed on its own.

    Examples
    ========
    >>> moe = SharedMoE(3, n_shared=1, n_routed=4, hidden=2, out=2, top_k=2).double()
    >>> moe(torch.randn(5, 7, 3, dtype=torch.float64)).shape
    torch.Size([5, 7, 2])
    >>> [name for name, _ in moe.named_children()]
    ['gate', 'shared', 'experts']
    >>> SharedMoE(3, 1, 4, 2, 2, top_k=5)
    Traceback (most recent call last):
    ...
    ValueError: top_k must be an integer in [1, n_routed=4], got 5
    """

    def __init__(
        self, d: int, n_shared: int, n_routed: int, hidden: int, out: int, top_k: int = 2, routing_bias: bool = False
    ) -> None:
        super().__init__()
        for name, v in (("d", d), ("n_routed", n_routed), ("hidden", hidden), ("out", out)):
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not (isinstance(n_shared, int) and n_shared >= 0):
            raise ValueError(f"n_shared must be a non-negative integer, got {n_shared!r}")
        if not (isinstance(top_k, int) and 1 <= top_k <= n_routed):
            raise ValueError(f"top_k must be an integer in [1, n_routed={n_routed}], got {top_k!r}")
        self.d, self.out, self.top_k = d, out, top_k
        self.gate = nn.Linear(d, n_routed, bias=False)  # row e of gate.weight is W_e
        self.shared = nn.ModuleList(SwiGLU(d, hidden, out) for _ in range(n_shared))
        self.experts = nn.ModuleList(SwiGLU(d, hidden, out) for _ in range(n_routed))
        self.register_buffer("route_bias", torch.zeros(n_routed) if routing_bias else None)

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(experts, weights)``, both (n, k): the top-k of ``z + b`` and their weights ``softmax(z)_e``.

        Examples
        ========
        A bias large enough chooses expert 0 for every token; its weight stays softmax(z)_0:

        >>> moe = SharedMoE(2, 0, 3, 1, 1, top_k=1, routing_bias=True).double()
        >>> moe.route_bias[0] = 100.0
        >>> tokens = torch.randn(4, 2, dtype=torch.float64)
        >>> experts, weights = moe.route(tokens)
        >>> experts.flatten().tolist(), bool(torch.allclose(weights[:, 0], moe.gate(tokens).softmax(-1)[:, 0]))
        ([0, 0, 0, 0], True)
        """
        logits = self.gate(tokens)  # (n, n_r): z_e = W_e·x
        scores = logits if self.route_bias is None else logits + self.route_bias  # the bias only chooses
        experts = scores.topk(self.top_k, dim=-1).indices  # (n, k)
        return experts, logits.softmax(dim=-1).gather(1, experts)

    def routed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``Σ_{e∈S(x)} g_e(x) experts_e(x)`` for tokens (n, d), each expert run on its own tokens only: (n, m)."""
        experts, weights = self.route(tokens)  # (n, k) each
        token_of = torch.arange(tokens.shape[0], device=tokens.device).repeat_interleave(self.top_k)  # (n·k,)
        expert_of, weight_of = experts.reshape(-1), weights.reshape(-1)  # (n·k,)
        y = tokens.new_zeros(tokens.shape[0], self.out)  # (n, m)
        for e, expert in enumerate(self.experts):  # an expert with no token runs on none: the same calls per input
            slots = (expert_of == e).nonzero().squeeze(1)  # the (token, choice) pairs sent to expert e
            mine = token_of[slots]
            y = y.index_add(0, mine, weight_of[slots, None] * expert(tokens.index_select(0, mine)))
        return y

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        """``f(x) = Σ_s shared_s(x) + Σ_{e∈S(x)} g_e(x) experts_e(x)``.

        Examples
        ========
        Without routed weight (W = 0, every g_e = 1/n_r) and one expert per token, the shared expert shows:

        >>> moe = SharedMoE(2, 1, 2, 1, 1, top_k=2).double()
        >>> _ = torch.nn.init.zeros_(moe.gate.weight)
        >>> x = torch.randn(3, 2, dtype=torch.float64)
        >>> mean = (moe.experts[0](x) + moe.experts[1](x)) / 2
        >>> bool(torch.allclose(moe(x), moe.shared[0](x) + mean))
        True
        """
        if x.shape[-1] != self.d:
            raise ValueError(f"expected input of width {self.d}, got shape {tuple(x.shape)}")
        tokens = x.reshape(-1, self.d)  # (n, d)
        y = self.routed(tokens)
        for expert in self.shared:
            y = y + expert(tokens)
        return y.reshape(*x.shape[:-1], self.out)


def expert_load(model: SharedMoE, x: torch.Tensor) -> torch.Tensor:
    """The fraction of routed slots each expert receives on ``x``: (n_r,), summing to 1.

    Examples
    ========
    >>> moe = SharedMoE(2, 0, 4, 1, 1, top_k=2)
    >>> load = expert_load(moe, torch.randn(10, 2))
    >>> tuple(load.shape), round(float(load.sum()), 12)
    ((4,), 1.0)
    """
    with torch.no_grad():
        experts, _ = model.route(x.reshape(-1, model.d))
    counts = torch.bincount(experts.reshape(-1), minlength=len(model.experts)).to(torch.float64)
    return counts / counts.sum()


def balance_step(model: SharedMoE, x: torch.Tensor, rate: float) -> torch.Tensor:
    """DeepSeek-V3's auxiliary-loss-free balancing: ``b_e ← b_e + rate·sign(1/n_r − load_e)``; returns the load.

    An overloaded expert's bias goes down, an idle one's up. No gradient is involved, so the laws of the
    parameters are untouched: the bias only changes which experts the next gradient step trains.

    Examples
    ========
    >>> moe = SharedMoE(2, 0, 2, 1, 1, top_k=1, routing_bias=True).double()
    >>> moe.route_bias[0] = 5.0  # every token goes to expert 0
    >>> balance_step(moe, torch.randn(8, 2, dtype=torch.float64), rate=0.5).tolist(), moe.route_bias.tolist()
    ([1.0, 0.0], [4.5, 0.5])
    """
    if model.route_bias is None:
        raise ValueError("balance_step needs a SharedMoE built with routing_bias=True")
    load = expert_load(model, x)
    with torch.no_grad():
        model.route_bias += rate * torch.sign(1.0 / len(model.experts) - load).to(model.route_bias.dtype)
    return load
