"""Laws of transformers' BERT: its attention, and the mean that each of its post-norms removes.

``BertAttention`` holds the heads in ``self`` (``query``, ``key``, ``value``: ``nn.Linear`` with biases) and their
output projection in a sibling, ``output.dense``, followed by the residual and a LayerNorm. Positions enter
before the first layer (learned), so per head the laws are chapter 04's with the biases appended as a row:

    Q̃_iᵀQ̃_i − K̃_iᵀK̃_i,   Ṽ_iᵀṼ_i − O_iᵀO_i   (k×k each),   and b_k,i,

n·k(k+1) + n·k laws. Cross-attention (keys from the encoder) is left out by name.

Each sublayer ends in ``LayerNorm(dense(h) + x)`` (``BertSelfOutput``, ``BertOutput``). A LayerNorm removes the
mean of its input, so adding ``1 vᵀ`` to ``dense.weight`` and c·1 to ``dense.bias`` moves nothing it returns:
their gradients have no component along 1, and the column sums ``1ᵀW[:, j]`` (one per input) and ``1ᵀb`` are
conserved, linear laws; but not under the dropout between ``dense`` and the norm in train mode (its mask turns c·1
into c·mask): they are left out, by name, where it is active, and the monitor says so if it trains later. (BERT's
norms come after the residual, so a gain meets the next block's input twice:
no gain is coupled to a reader, unlike a pre-norm decoder's.)
"""

from __future__ import annotations

from torch import nn

from conslaw_lite.dropout_masks import inactive_dropouts
from conslaw_lite.families.attention.laws import AttentionSpec, Projection
from conslaw_lite.laws import BlockLaws, Law, left_out


def bert_spec(module: nn.Module, prefix: str = "") -> AttentionSpec:
    """The spec of a ``BertAttention`` (self-attention): Q, K, V in ``self``, O in ``output.dense``.

    Examples
    ========
    >>> attn = nn.Module()  # laid out like BertAttention: d = 8, 2 heads of k = 4
    >>> attn.self = nn.Module()
    >>> attn.self.num_attention_heads, attn.self.attention_head_size = 2, 4
    >>> spec = bert_spec(attn, "encoder.layer.0.attention.")
    >>> spec.n, spec.k, spec.K.weight, spec.K.bias, spec.O
    (2, 4, 'encoder.layer.0.attention.self.key.weight', 'encoder.layer.0.attention.self.key.bias', \
'encoder.layer.0.attention.output.dense.weight')
    """

    def projection(name: str) -> Projection:
        return Projection(f"{prefix}self.{name}.weight", 0, f"{prefix}self.{name}.bias")

    heads = module.self
    Q, K, V = projection("query"), projection("key"), projection("value")
    return AttentionSpec(heads.num_attention_heads, heads.attention_head_size, Q, K, V, f"{prefix}output.dense.weight")


def mean_laws(module: nn.Module, prefix: str = "") -> BlockLaws | None:
    """``1ᵀW[:, j]`` per input j and ``1ᵀb`` of the ``dense`` before a ``BertSelfOutput``'s or ``BertOutput``'s
    LayerNorm (see the module docstring); controls: the first row of W, which the norm does not ignore. None, with a
    warning, where the dropout between them is active.

    Examples
    ========
    >>> import torch
    >>> out = nn.Module()  # laid out like BertOutput: dense 3 → 2
    >>> out.dense, out.dropout = nn.Linear(3, 2), nn.Dropout(0.1)
    >>> found = mean_laws(out.eval())
    >>> p = {"dense.weight": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "dense.bias": torch.tensor([1.0, -3.0])}
    >>> found.laws["1ᵀW[:,j]"](p).tolist(), found.laws["1ᵀb"](p).tolist()
    ([5.0, 7.0, 9.0], [-2.0])
    """
    dropouts = inactive_dropouts(module, ("dropout",))
    if dropouts is None:
        return left_out(module, prefix, f"dropout p = {module.dropout.p} in train mode (its masks break the mean laws)")
    W, b = f"{prefix}dense.weight", f"{prefix}dense.bias"
    laws: dict[str, Law] = {"1ᵀW[:,j]": lambda p: p[W].sum(-2), "1ᵀb": lambda p: p[b].sum(-1, keepdim=True)}
    controls: dict[str, Law] = {"W[0,:]": lambda p: p[W][..., 0, :]}
    return BlockLaws("network", laws, controls, train_breaks=dropouts)
