"""Laws of linear attention: those of softmax attention per head, and one more, ``‖Q_i‖_F² − ‖V_i‖_F²``.

A head ``(X Q_i K_iᵀ Xᵀ)(X V_i) O_iᵀ`` keeps softmax attention's symmetries ``Q_i → Q_i G, K_i → K_i G^(−ᵀ)``
and ``V_i → V_i H, O_i → O_i H^(−ᵀ)``, with their laws ``Q_iᵀQ_i − K_iᵀK_i`` and ``V_iᵀV_i − O_iᵀO_i``, and
gains the scale ``Q_i → e^ξ Q_i, V_i → e^(−ξ) V_i`` (the score is linear in Q_i, the value in V_i), whose
Noether charge is ``‖Q_i‖_F² − ‖V_i‖_F²``: N = n·(k(k+1) + 1). Any other pairing of one factor of the score
with one of the value (``‖K_i‖² − ‖O_i‖²``, ...) is this law plus traces of the other two.

Controls: one half of each law in its shape, ``Q_iᵀQ_i``, ``V_iᵀV_i`` and ``‖Q_i‖_F²``.
"""

from __future__ import annotations

from conslaw_lite.families.attention.laws import AttentionSpec, Projection, attention_laws
from conslaw_lite.families.linear_attention.block import LinearAttention
from conslaw_lite.laws import Batch, BlockLaws, Law, register_laws


def formula(n: int, k: int) -> tuple[int, str]:
    """The number of laws of n linear-attention heads of width k (d ≥ k): ``n·(k(k+1) + 1)``.

    Examples
    ========
    >>> formula(1, 2)
    (7, 'n·(k(k+1) + 1) = 1·(2·3 + 1) = 7')
    """
    N = n * (k * (k + 1) + 1)
    return N, f"n·(k(k+1) + 1) = {n}·({k}·{k + 1} + 1) = {N}"


def _squares(weight: str, n: int, k: int) -> Law:
    """``‖W_i‖_F²`` per head i of a projection weight (n·k, d): (n,)."""
    return lambda p: p[weight].view(n, -1).square().sum(1)


def linear_attention_laws(
    module: LinearAttention, prefix: str = ""
) -> tuple[dict[str, Law], dict[str, Law], tuple[Batch, ...]]:
    """Softmax attention's laws per head (``head{i}:QᵀQ−KᵀK``, ``head{i}:VᵀV−OᵀO``), ``head{i}:‖Q‖²−‖V‖²``, the
    controls and the batches that evaluate each quantity for every head at once.

    Examples
    ========
    >>> import torch
    >>> block = LinearAttention(4, 2, 2).double()
    >>> laws, controls, _ = linear_attention_laws(block)
    >>> sorted(laws)[:3]
    ['head0:QᵀQ−KᵀK', 'head0:VᵀV−OᵀO', 'head0:‖Q‖²−‖V‖²']
    >>> p = dict(block.named_parameters())
    >>> Q1, V1 = block.Q.weight[2:4], block.V.weight[2:4]
    >>> bool(torch.allclose(laws["head1:‖Q‖²−‖V‖²"](p), (Q1 ** 2).sum() - (V1 ** 2).sum()))
    True
    """
    n, k = module.n_heads, module.head_dim
    spec = AttentionSpec(n, k, *(Projection(f"{prefix}{m}.weight") for m in "QKV"), f"{prefix}O.weight")
    laws, controls, batches = attention_laws(spec)
    Q, V = _squares(spec.Q.weight, n, k), _squares(spec.V.weight, n, k)
    scale: dict[str, Law] = {"‖Q‖²−‖V‖²": lambda p: Q(p) - V(p), "‖Q‖²": Q}
    for name, fn in scale.items():
        target = laws if name == "‖Q‖²−‖V‖²" else controls
        for i in range(n):
            target[f"head{i}:{name}"] = lambda p, fn=fn, i=i: fn(p)[i]
        batches += (Batch(fn, tuple(f"head{i}:{name}" for i in range(n))),)
    return laws, controls, batches


@register_laws(LinearAttention)
def _linear_attention_block(module: LinearAttention, prefix: str) -> BlockLaws:
    return BlockLaws("linear-attention", *linear_attention_laws(module, prefix))

