"""The finders of transformers' Qwen3, Llama, Qwen3-MoE, Mistral and Qwen2 modules, registered by class name.

Registered by name (transformers is optional and slow to import): each decoder layer's attention
(:mod:`.attention`), MLP or MoE block (:mod:`.moe`), the layer's norm couplings and the causal LM's
final norm against its head (:mod:`.network`). A module with an option these laws do not cover (a
sliding window, a rotary type other than the default and linear, a gated MLP on another activation) gets
no laws, with a warning naming the option (:func:`.config.leave_out`): never a guess.
"""

from __future__ import annotations

from torch import nn

from conslaw_lite.families.hf.attention import attention_laws, kind_of, spec_of
from conslaw_lite.families.hf.config import full_names, leave_out
from conslaw_lite.families.hf.moe import mlp_laws, moe_laws
from conslaw_lite.families.hf.network import head_laws, layer_laws
from conslaw_lite.laws import BlockLaws, register_laws


@register_laws(*full_names("Attention"))
def _attention(module: nn.Module, prefix: str) -> BlockLaws | None:
    if leave_out(module, prefix):
        return None
    spec = spec_of(module, prefix)
    return BlockLaws(kind_of(spec), *attention_laws(spec))


@register_laws(*full_names("MLP"))
def _mlp(module: nn.Module, prefix: str) -> BlockLaws | None:
    return None if leave_out(module, prefix) else mlp_laws(module, prefix)


@register_laws("transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock")
def _moe(module: nn.Module, prefix: str) -> BlockLaws | None:
    return None if leave_out(module, prefix) else moe_laws(module, prefix)


@register_laws(*full_names("DecoderLayer"))
def _layer(module: nn.Module, prefix: str) -> BlockLaws:
    return layer_laws(module, prefix)


@register_laws(*full_names("ForCausalLM"))
def _causal_lm(module: nn.Module, prefix: str) -> BlockLaws | None:
    return head_laws(module, prefix)
