"""Laws of transformers' GPT-2 attention: multi-head attention without positions inside it, in ``Conv1D`` layout.

``GPT2Attention`` packs W_q, W_k, W_v into ``c_attn`` and keeps them as transformers' ``Conv1D`` does, the
transpose of ``nn.Linear``: ``c_attn.weight`` is (d, 3d) with head i of Q in columns i·k:(i+1)·k, of K from d,
of V from 2d, and its bias (3d,) alike; ``c_proj.weight`` (d, d) holds O_i in rows i·k:(i+1)·k. The positions
enter the stream before the block (learned ``wpe``), so per head (chapter 04's block, biases appended as a row)

    Q̃_iᵀQ̃_i − K̃_iᵀK̃_i,   Ṽ_iᵀṼ_i − O_iᵀO_i   (k×k each),   and b_k,i (the key bias only shifts each row's
    scores by a constant: it gets no gradient),

n·k(k+1) + n·k laws. Cross-attention (``q_attn``, keys from another stream) is left out by name. Each block's
two LayerNorms against the ``Conv1D`` that reads them give 2d more (:func:`block_couplings`).
"""

from __future__ import annotations

from torch import nn

from conslaw_lite.dropout_masks import inactive_dropouts
from conslaw_lite.families.attention.laws import AttentionSpec, Projection
from conslaw_lite.families.network.laws import gain_law
from conslaw_lite.laws import BlockLaws, Law, say_once


def gpt2_spec(module: nn.Module, prefix: str = "") -> AttentionSpec:
    """The spec of a ``GPT2Attention`` (self-attention): Q, K, V in ``c_attn``'s columns, O in ``c_proj``'s rows.

    Examples
    ========
    >>> attn = nn.Module()  # laid out like GPT2Attention: d = 8, 2 heads of k = 4
    >>> attn.num_heads, attn.head_dim, attn.embed_dim = 2, 4, 8
    >>> spec = gpt2_spec(attn, "h.0.attn.")
    >>> spec.K.weight, spec.K.offset, spec.K.transposed, spec.O, spec.O_transposed
    ('h.0.attn.c_attn.weight', 8, True, 'h.0.attn.c_proj.weight', True)
    """
    d, weight, bias = module.embed_dim, f"{prefix}c_attn.weight", f"{prefix}c_attn.bias"
    Q, K, V = (Projection(weight, s * d, bias, s * d, transposed=True) for s in range(3))
    return AttentionSpec(module.num_heads, module.head_dim, Q, K, V, f"{prefix}c_proj.weight", O_transposed=True)


def block_couplings(block: nn.Module, prefix: str = "") -> BlockLaws:
    """The two LayerNorm couplings of a ``GPT2Block``: ``ln_1`` feeds only ``attn.c_attn``, ``ln_2`` only
    ``mlp.c_fc``, so per coordinate j (row j of a ``Conv1D``)

        γ_j² + β_j² − ‖W[j, :]‖²      (d laws per norm: γ_j, β_j and row j scale together),

    and one linear law: ``ln_2`` removes the mean of what it reads, so adding c·1 to the attention's output bias and
    −c·1 to the MLP's leaves the block's output unchanged, and ``Σ_j b_attn,j − Σ_j b_mlp,j`` is conserved. Not under
    the residual dropouts in train mode (their masks turn c·1 into c·mask): it is given only where they are inactive
    (eval mode, or p = 0), and the monitor says so if they train later.

    Examples
    ========
    >>> block = nn.Module()  # laid out like GPT2Block
    >>> block.ln_1, block.ln_2 = nn.LayerNorm(4), nn.LayerNorm(4)
    >>> block.attn, block.mlp = nn.Module(), nn.Module()
    >>> block.attn.resid_dropout, block.mlp.dropout = nn.Dropout(0.1), nn.Dropout(0.1)
    >>> sorted(block_couplings(block.eval(), "h.0.").laws)
    ['ln_1.γ²+β²−‖W[j,:]‖² (c_attn)', 'ln_2.γ²+β²−‖W[j,:]‖² (c_fc)', 'Σ(attn−mlp).c_proj.bias']
    """
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}
    for norm, reader in (("ln_1", "attn.c_attn"), ("ln_2", "mlp.c_fc")):
        gain, bias = f"{prefix}{norm}.weight", f"{prefix}{norm}.bias"
        laws[f"{norm}.γ²+β²−‖W[j,:]‖² ({reader.rsplit('.', 1)[-1]})"] = gain_law(
            gain, [f"{prefix}{reader}.weight"], bias, axis=-1
        )
        controls[f"{norm}.γ²"] = gain_law(gain, [])
    dropouts = inactive_dropouts(block, ("attn.resid_dropout", "mlp.dropout"))
    if dropouts is None:  # as BERT's mean laws: the bias sum is left out while the dropouts train, and said so
        where, p = prefix.rstrip(".") or "the model", block.attn.resid_dropout.p
        masks = "its masks break Σ(attn−mlp).c_proj.bias, which is left out"
        say_once(block, f"GPT2Block at {where} has dropout p = {p} in train mode: {masks}")
        return BlockLaws("network", laws, controls)
    attn, mlp = f"{prefix}attn.c_proj.bias", f"{prefix}mlp.c_proj.bias"
    laws["Σ(attn−mlp).c_proj.bias"] = lambda p: (p[attn] - p[mlp]).sum(-1, keepdim=True)
    return BlockLaws("network", laws, controls, train_breaks=dropouts)
