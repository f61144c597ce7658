"""Whole-network laws of transformers' decoders: each RMSNorm gain against the projections that read it.

A pre-norm decoder layer feeds ``input_layernorm``'s output ``γ ⊙ x/rms(x)`` to ``q_proj``, ``k_proj`` and
``v_proj``, and ``post_attention_layernorm``'s to the MLP's ``gate_proj`` and ``up_proj`` (in Qwen3-MoE: the
router and every expert's ``gate_up_proj``). Scaling ``γ_j → λγ_j`` and column j of every reader by 1/λ
leaves the output unchanged, so per coordinate j

    γ_j² − Σ_readers ‖W[:, j]‖²        (d laws per norm)

is conserved (chapter 10's coupling, :func:`conslaw_lite.families.network.laws.gain_law`, here with the
experts' fused 3-D weights among the readers). The final ``norm`` and ``lm_head`` give d more, unless the
head is tied to the embedding (``tie_word_embeddings``): the embedding then also writes the stream, the
scaling is no symmetry, and those laws are left out (``tests/test_hf.py`` counts both).
"""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.families.hf.config import not_rms_norm
from conslaw_lite.laws import BlockLaws, Law, Params, say_once
from conslaw_lite.shared_squares import squared

ATTENTION_READERS = ("q_proj", "k_proj", "v_proj")
MLP_READERS = ("gate_proj", "up_proj")
MOE_READERS = ("gate.weight", "experts.gate_up_proj")


def coupling(gain: str, readers: list[str]) -> Law:
    """``γ_j² − Σ_W ‖W[..., j]‖²`` per coordinate j (d,), every reader's axes but the last summed.

    Examples
    ========
    >>> p = {"g": torch.tensor([2.0, 1.0]), "W": torch.ones(2, 2), "E": torch.ones(3, 1, 2)}
    >>> coupling("g", ["W", "E"])(p).tolist()  # 4 − 2 − 3, 1 − 2 − 3
    [-1.0, -4.0]
    """

    def law(p: Params) -> torch.Tensor:
        total = squared(p[gain])
        lead = total.ndim - 1  # stacked layers (monitor): axes before the gain's own
        for name in readers:
            W = p[name]
            total = total - squared(W).sum(tuple(range(lead, W.ndim - 1)))
        return total

    return law


def _add(
    owner: nn.Module, laws: dict[str, Law], controls: dict[str, Law], prefix: str, norm: str, readers: list[str],
    what: str,
) -> None:  # fmt: skip
    """The coupling of ``norm`` (a path in ``owner``) with ``readers``, or a warning naming why it is left out."""
    problem = _changed(owner, norm, readers)
    if problem:
        where = f"at {prefix.rstrip('.')}" if prefix.rstrip(".") else "(the model)"
        say_once(owner, f"{type(owner).__name__} {where}: the coupling of {norm} is left out: {problem}")
        return
    gain = f"{prefix}{norm}.weight"
    laws[f"{norm}.γ²−‖W[:,j]‖² ({what})"] = coupling(gain, [prefix + r for r in readers])
    controls[f"{norm}.γ²"] = coupling(gain, [])


def _changed(owner: nn.Module, norm: str, readers: list[str]) -> str | None:
    """Why ``norm`` and its ``readers`` are not as transformers builds them, or None: the norm replaced (a LayerNorm's
    bias, Gemma's 1 + γ: the coupling moved at first order), a weight not where it was (a layer wrapped)."""
    try:
        module = owner.get_submodule(norm)
    except AttributeError:
        return f"it has no {norm}"
    if why := not_rms_norm(norm, module):
        return why
    held = dict(owner.named_parameters())
    missing = [name for name in (f"{norm}.weight", *readers) if name not in held]
    return f"{missing[0]} is not among its parameters (a layer replaced or wrapped)" if missing else None


def layer_laws(layer: nn.Module, prefix: str) -> BlockLaws | None:
    """The two norm couplings of one decoder layer (``Qwen3DecoderLayer``, ``LlamaDecoderLayer``, ...).

    Examples
    ========
    >>> class Qwen3RMSNorm(nn.RMSNorm):  # transformers' class name
    ...     pass
    >>> layer = nn.Module()  # laid out like transformers' decoder layer
    >>> layer.input_layernorm, layer.post_attention_layernorm = Qwen3RMSNorm(2), Qwen3RMSNorm(2)
    >>> layer.self_attn, layer.mlp = nn.Module(), nn.Module()
    >>> for name in ("q_proj", "k_proj", "v_proj"):
    ...     layer.self_attn.add_module(name, nn.Linear(2, 2))
    >>> layer.mlp.gate_proj, layer.mlp.up_proj = nn.Linear(2, 3), nn.Linear(2, 3)
    >>> sorted(layer_laws(layer, "model.layers.0.").laws)
    ['input_layernorm.γ²−‖W[:,j]‖² (q+k+v)', 'post_attention_layernorm.γ²−‖W[:,j]‖² (gate+up)']
    >>> layer.input_layernorm = nn.LayerNorm(2)  # a norm of another kind: that coupling is left out, with a warning
    >>> list(layer_laws(layer, "model.layers.0.").laws)
    ['post_attention_layernorm.γ²−‖W[:,j]‖² (gate+up)']
    """
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}
    attention = [f"self_attn.{r}.weight" for r in ATTENTION_READERS]
    _add(layer, laws, controls, prefix, "input_layernorm", attention, "q+k+v")
    if hasattr(layer.mlp, "experts"):
        moe = [f"mlp.{r}" for r in MOE_READERS]
        _add(layer, laws, controls, prefix, "post_attention_layernorm", moe, "router+experts")
    else:
        mlp = [f"mlp.{r}.weight" for r in MLP_READERS]
        _add(layer, laws, controls, prefix, "post_attention_layernorm", mlp, "gate+up")
    return BlockLaws("network", laws, controls) if laws else None


def head_laws(model: nn.Module, prefix: str) -> BlockLaws | None:
    """The final norm against ``lm_head`` of a causal LM: ``γ_j² − ‖H[:, j]‖²``, or None when the head is tied
    to the embedding (see the module docstring).

    Examples
    ========
    >>> class Qwen3RMSNorm(nn.RMSNorm):  # transformers' class name
    ...     pass
    >>> lm = nn.Module()  # laid out like Qwen3ForCausalLM
    >>> lm.model, lm.lm_head = nn.Module(), nn.Linear(2, 5, bias=False)
    >>> lm.model.norm = Qwen3RMSNorm(2)
    >>> lm.model.embed_tokens = nn.Embedding(5, 2)
    >>> list(head_laws(lm, "").laws)
    ['model.norm.γ²−‖W[:,j]‖² (lm_head)']
    >>> lm.lm_head.weight = lm.model.embed_tokens.weight
    >>> head_laws(lm, "") is None
    True
    """
    if model.lm_head.weight is model.model.embed_tokens.weight:
        return None
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}
    _add(model, laws, controls, prefix, "model.norm", ["lm_head.weight"], "lm_head")
    return BlockLaws("network", laws, controls) if laws else None
