"""transformers' blocks as named architectures, each one decoder layer's module of a tiny model built from a
config with random weights (no download): ``qwen3-attention``, ``llama-attention``, ``gpt2-attention``,
``bert-attention``, ``qwen3-mlp``, ``qwen3-moe``.

``--heads`` is the number of key/value heads, two queries on each (GPT-2's and BERT's: of heads, of width d/n);
``--experts`` and ``--top-k`` size the MoE. Each builder returns :func:`~.exact.countable` of the module: the
counter evaluates it in float64.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.attention.laws import formula as heads_formula
from conslaw_lite.families.ffn.laws import formula as ffn_formula
from conslaw_lite.families.hf import attention, moe
from conslaw_lite.families.hf.config import MODELS
from conslaw_lite.families.hf.exact import countable
from conslaw_lite.seeding import seeded

QUERIES_PER_GROUP = 2
ATTENTION_SIZES = ("dim", "heads", "head_dim", "seq")  # one layer's attention: the vocabulary and MLP are not in it
INSTALL = "transformers is not installed: pip install 'conslaw_lite[hf]'"


def tiny_model(arch: str, options: ArchOptions | None = None, **config: object) -> nn.Module:
    """A causal LM of transformers (``"qwen3"``, ``"llama"``, ``"qwen3_moe"``, ``"mistral"`` or ``"qwen2"``) at the
    sizes of ``options``, seeded, in float64, with its own random initialisation; ``config`` overrides any config field.

    Sizes: ``--dim`` the width d (8), ``--heads`` the key/value heads (1; two queries each), ``--head-dim`` k (4),
    ``--hidden`` the MLP's (3) or each expert's (2) width, ``--out`` the vocabulary (16), ``--experts`` (3) and
    ``--top-k`` (2); one layer unless ``num_hidden_layers`` is given.

    Examples
    ========
    >>> lm = tiny_model("qwen3", ArchOptions(dim=8))
    >>> type(lm).__name__, lm.model.layers[0].self_attn.q_proj.weight.shape
    ('Qwen3ForCausalLM', torch.Size([8, 8]))
    """
    transformers = _transformers()
    o = (options or ArchOptions()).with_defaults(dim=8, heads=1, head_dim=4, hidden=3, out=16, experts=3, top_k=2)
    if arch not in MODELS:
        raise ValueError(f"arch must be one of {tuple(MODELS)}, got {arch!r}")
    if o.head_dim % 2:  # a rotary embedding turns pairs of coordinates
        raise ValueError(f"--head-dim must be even: the rotary embedding turns pairs of coordinates, got {o.head_dim}")
    if arch == "qwen3_moe" and not 1 <= o.top_k <= o.experts:
        raise ValueError(f"--top-k must be between 1 and --experts ({o.experts}), got {o.top_k}")
    sizes = dict(
        hidden_size=o.dim, num_hidden_layers=1, num_attention_heads=QUERIES_PER_GROUP * o.heads,
        num_key_value_heads=o.heads, head_dim=o.head_dim, vocab_size=o.out, intermediate_size=o.hidden,
        max_position_embeddings=64,
    )  # fmt: skip
    if arch == "qwen3_moe":
        sizes |= dict(moe_intermediate_size=o.hidden, num_experts=o.experts, num_experts_per_tok=o.top_k)
    Config = getattr(transformers, f"{MODELS[arch]}Config")
    Model = getattr(transformers, f"{MODELS[arch]}ForCausalLM")
    with seeded(o.seed):
        model = Model(Config(**(sizes | config))).double()
    if arch == "qwen3_moe":
        model.config._experts_implementation = "eager"  # grouped_mm refuses widths that are not multiples of 16 B
    return model


def _transformers():
    """The transformers package, imported when a builder first needs it (``ModuleNotFoundError`` saying how to
    install it)."""
    try:
        import transformers
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(INSTALL) from err
    return transformers


def _attention(arch: str, qk_norm: bool):
    def build(options: ArchOptions) -> Built:
        o = options.with_defaults(dim=8, heads=1, head_dim=4, seq=3).heads_fit()
        block = tiny_model(arch, o).model.layers[0].self_attn
        N, text = attention.formula(o.heads, o.head_dim, qk_norm=qk_norm)
        note = f"--heads is the number of key/value heads; {QUERIES_PER_GROUP} query heads share each"
        return Built(countable(block), (o.seq, o.dim), N, text, note)

    return build


SCALE_NOTE = (
    "weights of std 0.5: at transformers' 0.02 the scores are nearly flat and the counter's gap closes (10⁻¹¹ kept)"
)


def _without_positions(name: str, Config: str, Model: str, block: Callable[[nn.Module], nn.Module], means: bool):
    """GPT-2's or BERT's attention (``--heads`` heads of width d/n) cut from a one-layer model, in eval mode;
    ``means``: its output LayerNorm's d + 1 sums too (BERT)."""

    def build(options: ArchOptions) -> Built:
        o = options.with_defaults(dim=8, heads=2, seq=3)
        if o.dim % o.heads:
            raise ValueError(f"{name}: --dim ({o.dim}) must be a multiple of --heads ({o.heads})")
        transformers = _transformers()
        sizes = dict(
            hidden_size=o.dim, num_attention_heads=o.heads, num_hidden_layers=1, vocab_size=16, bos_token_id=0,
            eos_token_id=0, initializer_range=0.5,
        )  # fmt: skip
        with seeded(o.seed):
            model = getattr(transformers, Model)(getattr(transformers, Config)(**sizes))
        N, text = heads_formula(o.heads, o.dim // o.heads, bias=True)
        if means:
            symbols, numbers, _ = text.split(" = ")  # "n·k(k+1) + n·k = 2·4·5 + 2·4 = 48"
            N, text = N + o.dim + 1, f"{symbols} + d + 1 = {numbers} + {o.dim} + 1 = {N + o.dim + 1}"
        return Built(countable(block(model.double().eval())), (o.seq, o.dim), N, text, SCALE_NOTE)

    return build


def _mlp(options: ArchOptions) -> Built:
    o = options.with_defaults(dim=4, hidden=3, seq=2)
    block = tiny_model("qwen3", o).model.layers[0].mlp
    return Built(countable(block), (o.seq, o.dim), *ffn_formula("swiglu", o.hidden))


def _moe(options: ArchOptions) -> Built:
    o = options.with_defaults(dim=4, hidden=2, experts=3, top_k=2, seq=2)
    block = tiny_model("qwen3_moe", o).model.layers[0].mlp
    router = block.gate
    N, text = moe.formula(o.experts, o.hidden, o.dim, o.top_k, router.norm_topk_prob)
    note = "softmax over the experts, then the top k (norm_topk_prob=False: not renormalised)"
    return Built(countable(block), (o.seq, o.dim), N, text, note)


ARCHITECTURES = (
    Arch("qwen3-attention", "Qwen3 attention: GQA, RoPE, QK-norm: k/2 + n_kv·k(k+1)/2", _attention("qwen3", True),
         ATTENTION_SIZES),
    Arch("llama-attention", "Llama attention: GQA, RoPE: n_kv·k/2 + n_kv·k(k+1)/2", _attention("llama", False),
         ATTENTION_SIZES),
    Arch("gpt2-attention", "GPT-2 attention (Conv1D layout, biases): n·k(k+1) + n·k",
         _without_positions("gpt2-attention", "GPT2Config", "GPT2LMHeadModel", lambda m: m.transformer.h[0].attn,
                            means=False), ("dim", "heads", "seq")),
    Arch("bert-attention", "BERT attention with its output LayerNorm: n·k(k+1) + n·k + d + 1",
         _without_positions("bert-attention", "BertConfig", "BertModel", lambda m: m.encoder.layer[0].attention,
                            means=True), ("dim", "heads", "seq")),
    Arch("qwen3-mlp", "Qwen3 MLP (SwiGLU: down, gate, up): r", _mlp, ("dim", "hidden", "seq")),
    Arch("qwen3-moe", "Qwen3-MoE block (router softmax, top-k, fused SwiGLU experts): n_E·r + d", _moe,
         ("dim", "hidden", "experts", "top_k", "seq")),
)
