"""What the adapters know of transformers' classes, by name, and the options whose laws they cover.

Nothing here imports transformers but to compute a rotary type's frequencies from a transformers config: a class is
known by its module and name (as the registry knows timm's), so ``import conslaw_lite`` stays free of it. An option
the laws here do not cover (rotary frequencies that change with the sequence length, a partial rotary embedding, a
gated MLP's gate whose laws are not derived: :data:`GATE_ACTIVATIONS`) is named by :func:`unsupported`; the finders
then leave that block's laws out with a warning naming it, never guess. A sliding window is covered: it masks scores,
which the laws' symmetries leave unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.laws import left_out

# transformers' modules per architecture: the classes the finders register, by their full name.
MODELS = {"qwen3": "Qwen3", "llama": "Llama", "qwen3_moe": "Qwen3Moe", "mistral": "Mistral", "qwen2": "Qwen2"}


def full_names(suffix: str) -> tuple[str, ...]:
    """``transformers.models.<arch>.modeling_<arch>.<Prefix><suffix>`` for each architecture of ``MODELS``.

    Examples
    ========
    >>> full_names("MLP")[0]
    'transformers.models.qwen3.modeling_qwen3.Qwen3MLP'
    """
    return tuple(f"transformers.models.{arch}.modeling_{arch}.{prefix}{suffix}" for arch, prefix in MODELS.items())


NORMS = {f"{prefix}RMSNorm" for prefix in MODELS.values()}
ROTARIES = {f"{prefix}RotaryEmbedding" for prefix in MODELS.values()}
# transformers' hidden_act → the gate of the book's gated block (conslaw_lite.families.ffn.laws.glu_block): SiLU's
# (SwiGLU), ReLU's for the positively homogeneous gates (ReGLU: a law more per unit, the gate's rescaling), or, for a
# gate that leaves a unit no rescaling, its own name: the value law ‖A_{:,i}‖² − ‖C_{i,:}‖² alone, which holds for
# any gate. Left out: relu2 (homogeneous of degree 2: another gate law), linear (a bilinear unit), and prelu and
# xielu (gates with parameters of their own)
NO_RESCALING = ("gelu", "gelu_new", "gelu_fast", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
                "gelu_accurate", "gelu_10", "quick_gelu", "mish", "sigmoid", "tanh", "laplace", "hardswish",
                "relu6", "sqrtsoftplus")  # fmt: skip
GATE_ACTIVATIONS = {"silu": "silu", "swish": "silu", "relu": "relu", "leaky_relu": "relu"} | {
    act: act for act in NO_RESCALING
}
_GATES = "SiLU, ReLU, leaky ReLU and gates of no rescaling (GELU's, tanh, sigmoid, ...)"


def is_rms_norm(module: nn.Module) -> bool:
    """``γ ⊙ x/rms(x)``: transformers' RMSNorm of one of ``MODELS``, or torch's (the count's float64 copy holds it).

    Examples
    ========
    >>> is_rms_norm(nn.RMSNorm(2)), is_rms_norm(nn.LayerNorm(2))
    (True, False)
    """
    return class_name(module) in NORMS or type(module) is nn.RMSNorm


def not_rms_norm(name: str, module: nn.Module) -> str | None:
    """Why ``module`` (at ``name``) does not hold an RMSNorm's laws, or None where it is one (:func:`is_rms_norm`).

    Examples
    ========
    >>> not_rms_norm("q_norm", nn.LayerNorm(2))
    'q_norm is LayerNorm, not the RMSNorm of Qwen3, Llama, Qwen3Moe, Mistral, Qwen2'
    >>> not_rms_norm("q_norm", nn.RMSNorm(2)) is None
    True
    """
    models = ", ".join(MODELS.values())
    return None if is_rms_norm(module) else f"{name} is {class_name(module)}, not the RMSNorm of {models}"


def class_name(module: nn.Module) -> str:
    """The class name of ``module`` (``"Qwen3Attention"``).

    Examples
    ========
    >>> class_name(nn.Linear(1, 1))
    'Linear'
    """
    return type(module).__name__


def head_dim_of(config: object) -> int:
    """k: ``config.head_dim``, or ``hidden_size / num_attention_heads`` when the config sets none.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> head_dim_of(SimpleNamespace(head_dim=None, hidden_size=16, num_attention_heads=4))
    4
    """
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def default_frequencies(head_dim: int, base: float) -> torch.Tensor:
    """ω_j = base^(−2j/k), j < k/2, in float64: the default rotary embedding's frequencies.

    Examples
    ========
    >>> default_frequencies(4, 9.0).tolist()
    [1.0, 0.3333333333333333]
    """
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def rope_frequencies(config: object) -> tuple[torch.Tensor, float]:
    """The frequencies ω_j (k/2, float64) and the factor on cos and sin of ``config``'s rotary embedding.

    The default table in float64; every other static ``rope_type`` (``linear``, ``llama3``, ``yarn``, ...) as
    transformers' own ``ROPE_INIT_FUNCTIONS`` computes it (float32 values, the frequencies the model turns by).

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> omega, scale = rope_frequencies(SimpleNamespace(rope_parameters={"rope_theta": 9.0}, head_dim=4))
    >>> omega.tolist(), scale
    ([1.0, 0.3333333333333333], 1.0)
    """
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        return default_frequencies(head_dim_of(config), params["rope_theta"]), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    omega, scale = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"))
    return omega.to(torch.float64), float(scale)


def rope_problem(config: object) -> str | None:
    """Why the RoPE laws here do not cover ``config``'s rotary embedding, or None.

    The laws hold for rotations by ``p·ω_j`` on the pairs (j, j + k/2) of the whole head, whatever the ω_j, as long
    as they are distinct and nonzero (equal ones would join their 2×2 blocks, a zero one leaves a pair unturned): so
    ``config``'s own frequencies (:func:`rope_frequencies`) are checked. A scale on cos and sin (yarn's) scales every
    score alike. Frequencies that change with the sequence length (``dynamic``, ``longrope``) and a partial rotary
    embedding are not covered.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> rope_problem(SimpleNamespace(rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4}))
    "rope_type='dynamic' (its frequencies change with the sequence length)"
    >>> rope_problem(SimpleNamespace(rope_parameters={"rope_theta": 1e4}, head_dim=8)) is None
    True
    """
    problem = _table_problem(config)
    if problem:
        return problem
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type in CHANGING:
        return f"rope_type={rope_type!r} (its frequencies change with the sequence length)"
    omega = rope_frequencies(config)[0]
    if not (omega.isfinite().all() and (omega != 0).all() and len(omega.unique()) == len(omega)):
        return f"rope_type={rope_type!r} with frequencies ω_j not distinct and nonzero ({omega.tolist()})"
    return None


def attention_problem(config: object) -> str | None:
    """``config``'s attention function when it is one of one's own (registered with transformers'
    ``AttentionInterface``, under a new name or over ``"sdpa"``), or None for transformers' own (eager, sdpa, flash,
    flex: softmax(QKᵀ/√k + mask)V, the function the laws are derived for).

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> attention_problem(SimpleNamespace(_attn_implementation="sdpa")) is None
    True
    >>> attention_problem(SimpleNamespace(_attn_implementation="cosine"))
    "config._attn_implementation='cosine' (an attention function of one's own; the laws hold for softmax(QKᵀ/√k)V)"
    """
    name = getattr(config, "_attn_implementation", None)
    if name in (None, "eager"):  # the model's own eager function, whatever is registered under that name
        return None
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if getattr(ALL_ATTENTION_FUNCTIONS.get(name), "__module__", "").startswith("transformers."):
        return None
    own = "an attention function of one's own; the laws hold for softmax(QKᵀ/√k)V"
    return f"config._attn_implementation={name!r} ({own})"


CHANGING = ("dynamic", "longrope")  # rotary types whose frequencies change with the sequence length


def _table_problem(config: object) -> str | None:
    """Why the count's float64 table cannot compute ``config``'s rotary embedding, or None: another rotary type than
    transformers' own, a partial one, or ``longrope`` (its frequencies switch at a length)."""
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    partial = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    if partial != 1.0:
        return f"partial_rotary_factor={partial} (only a rotary embedding on the whole head is covered)"
    if rope_type == "longrope":
        return f"rope_type={rope_type!r} (its frequencies change with the sequence length)"
    if rope_type != "default":
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        if rope_type not in ROPE_INIT_FUNCTIONS:
            return f"rope_type={rope_type!r} (not one of transformers' rotary embeddings)"
    return None


def check_rope(config: object) -> None:
    """``ValueError`` naming the option when the count's float64 copy cannot compute ``config``'s rotary embedding.
    ``dynamic`` is computed, on sequences no longer than ``max_position_embeddings``, where its frequencies stay.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> check_rope(SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 1e4}, head_dim=8))
    """
    problem = _table_problem(config)
    if problem:
        raise ValueError(f"transformers model with {problem}: the count's float64 copy does not compute it")


def window_of(attention: nn.Module) -> int | None:
    """The sliding window of a transformers attention, or None: Qwen2's and Qwen3's hold their layer's own (None
    on a full-attention layer), Mistral's none, as every layer reads ``config.sliding_window``.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> mistral = nn.Module()  # laid out like MistralAttention: the window is the config's
    >>> mistral.config = SimpleNamespace(sliding_window=4096)
    >>> window_of(mistral)
    4096
    >>> qwen2 = nn.Module()
    >>> qwen2.config, qwen2.sliding_window = SimpleNamespace(sliding_window=4096), None  # a full-attention layer
    >>> window_of(qwen2) is None
    True
    """
    if hasattr(attention, "sliding_window"):
        return attention.sliding_window
    return getattr(getattr(attention, "config", None), "sliding_window", None)


def config_of(module: nn.Module) -> object | None:
    """The transformers config ``module`` holds, or the first of its submodules holds (a MoE block keeps it in its
    experts, BERT's attention in its ``self``).

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> block = nn.Module()
    >>> block.experts = nn.Module()
    >>> block.experts.config = SimpleNamespace(hidden_act="silu")
    >>> config_of(block).hidden_act
    'silu'
    """
    return next((m.config for m in module.modules() if hasattr(m, "config")), None)


def unsupported(module: nn.Module) -> str | None:
    """The option of this attention, MLP or MoE module whose laws are not derived here, or None.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> mlp = nn.Module()
    >>> mlp.config = SimpleNamespace(hidden_act="relu2")
    >>> unsupported(mlp)[:47]
    "hidden_act='relu2' (the gated MLP's laws are de"
    """
    config = config_of(module)
    replaced = _replaced_part(module)
    if replaced:
        return replaced
    if hasattr(module, "q_proj"):  # a sliding window masks scores, which the laws' symmetries leave unchanged
        return attention_problem(config) or rope_problem(config)
    act = getattr(config, "hidden_act", "silu")
    if act not in GATE_ACTIVATIONS:
        return f"hidden_act={act!r} (the gated MLP's laws are derived for {_GATES})"
    if hasattr(module, "experts") and GATE_ACTIVATIONS[act] == "relu":
        return f"hidden_act={act!r} (the experts' laws are derived for gates of no rescaling: not a ReLU gate's own)"
    return _other_gate(module, act)


LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _replaced_part(module: nn.Module) -> str | None:
    """A projection or QK-norm of an attention or MLP that is no longer what transformers builds (a LoRA adapter
    around ``q_proj``: W + BA, whose laws are others; an ``nn.Identity`` for ``q_norm``), or None."""
    for name in LINEARS:
        part = getattr(module, name, None)
        if part is not None and type(part) is not nn.Linear:
            return f"{name} = {type(part).__name__}, not nn.Linear (replaced or wrapped after it was built)"
    for name in ("q_norm", "k_norm"):
        part = getattr(module, name, None)
        if part is not None and (why := not_rms_norm(name, part)):
            return why
    return None


def _other_gate(module: nn.Module, act: str) -> str | None:
    """The gate the block computes where it is not ``config.hidden_act``'s, which its laws are chosen by: an
    ``act_fn`` replaced, or the config edited, after the model was built (a GELU where the config says ReLU kept
    ReLU's gate law, which moved at first order)."""
    from transformers.activations import ACT2FN

    z = torch.linspace(-4.0, 4.0, 33, dtype=torch.float64)
    for name, owner in (("act_fn", module), ("experts.act_fn", getattr(module, "experts", None))):
        gate = getattr(owner, "act_fn", None)
        if gate is None:
            continue
        with torch.no_grad():
            same = act in ACT2FN and torch.allclose(gate(z.clone()), ACT2FN[act](z.clone()), rtol=0.0, atol=1e-12)
        if not same:
            return f"{name} = {gate!r}, not the config's hidden_act={act!r} (one of them changed after it was built)"
    return None


def gate_of(module: nn.Module) -> str:
    """The gate of a transformers gated MLP or MoE block, as :func:`~conslaw_lite.families.ffn.laws.glu_block` takes
    it (``"silu"``, ``"relu"``, or the name of a gate that leaves a unit no rescaling).

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> mlp = nn.Module()
    >>> [gate_of(mlp) for mlp.config in (SimpleNamespace(hidden_act=a) for a in ("swish", "leaky_relu", "gelu"))]
    ['silu', 'relu', 'gelu']
    """
    return GATE_ACTIVATIONS[getattr(config_of(module), "hidden_act", "silu")]


def leave_out(module: nn.Module, prefix: str) -> bool:
    """True (with a warning naming the option) when :func:`unsupported` finds an option in ``module``.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> mlp = nn.Module()
    >>> mlp.config = SimpleNamespace(hidden_act="silu")
    >>> leave_out(mlp, "model.layers.0.mlp.")
    False
    """
    problem = unsupported(module)
    if problem:
        left_out(module, prefix, problem)
    return problem is not None
