"""The finders of transformers' Qwen3, Llama, Qwen3-MoE, Mistral, Qwen2, GPT-2 and BERT modules, by class name.

Registered by name (transformers is optional and slow to import): each decoder layer's attention
(:mod:`.attention`), MLP or MoE block (:mod:`.moe`), the layer's norm couplings and the causal LM's
final norm against its head (:mod:`.network`); GPT-2's attention and its blocks' LayerNorm couplings
(:mod:`.gpt2`); BERT's attention and the means its post-norms remove (:mod:`.bert`). A module with an
option these laws do not cover (rotary frequencies that change with the sequence length, a gated MLP on another
activation, cross-attention) gets no laws, with a warning naming the option
(:func:`.config.leave_out`, :func:`conslaw_lite.laws.left_out`): never a guess.
"""

from __future__ import annotations

from torch import nn

from conslaw_lite.families.attention.laws import block_laws
from conslaw_lite.families.hf.attention import attention_laws, kind_of, spec_of
from conslaw_lite.families.hf.bert import bert_spec, mean_laws
from conslaw_lite.families.hf.config import attention_problem, config_of, full_names, leave_out
from conslaw_lite.families.hf.gpt2 import block_couplings, gpt2_spec
from conslaw_lite.families.hf.moe import mlp_laws, moe_laws
from conslaw_lite.families.hf.network import head_laws, layer_laws
from conslaw_lite.laws import BlockLaws, left_out, register_laws


@register_laws(*full_names("Attention"))
def _attention(module: nn.Module, prefix: str) -> BlockLaws | None:
    if leave_out(module, prefix):
        return None
    spec = spec_of(module, prefix)
    return BlockLaws(kind_of(spec), *attention_laws(spec))


@register_laws("transformers.models.gpt2.modeling_gpt2.GPT2Attention")
def _gpt2_attention(module: nn.Module, prefix: str) -> BlockLaws | None:
    if module.is_cross_attention:
        return left_out(module, prefix, "is_cross_attention=True (queries and keys from two streams)")
    problem = attention_problem(config_of(module))
    return left_out(module, prefix, problem) if problem else block_laws(gpt2_spec(module, prefix))


@register_laws("transformers.models.gpt2.modeling_gpt2.GPT2Block")
def _gpt2_block(module: nn.Module, prefix: str) -> BlockLaws:
    return block_couplings(module, prefix)


@register_laws("transformers.models.bert.modeling_bert.BertAttention")
def _bert_attention(module: nn.Module, prefix: str) -> BlockLaws | None:
    if module.is_cross_attention:
        return left_out(module, prefix, "is_cross_attention=True (queries and keys from two streams)")
    problem = attention_problem(config_of(module))
    return left_out(module, prefix, problem) if problem else block_laws(bert_spec(module, prefix))


@register_laws(
    "transformers.models.bert.modeling_bert.BertSelfOutput", "transformers.models.bert.modeling_bert.BertOutput"
)
def _bert_output(module: nn.Module, prefix: str) -> BlockLaws | None:
    return mean_laws(module, prefix)


@register_laws(*full_names("MLP"))
def _mlp(module: nn.Module, prefix: str) -> BlockLaws | None:
    return None if leave_out(module, prefix) else mlp_laws(module, prefix)


@register_laws("transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock")
def _moe(module: nn.Module, prefix: str) -> BlockLaws | None:
    return None if leave_out(module, prefix) else moe_laws(module, prefix)


@register_laws(*full_names("DecoderLayer"))
def _layer(module: nn.Module, prefix: str) -> BlockLaws | None:
    return layer_laws(module, prefix)


@register_laws(*full_names("ForCausalLM"))
def _causal_lm(module: nn.Module, prefix: str) -> BlockLaws | None:
    return head_laws(module, prefix)
