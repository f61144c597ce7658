"""What the adapters know of transformers' classes, by name, and the options whose laws they cover.

Nothing here imports transformers: a class is known by its module and name (as the registry knows
timm's), so ``import conslaw_lite`` stays free of it. An option the laws here do not cover (a sliding
window, another rotary type, an activation other than SiLU in a gated MLP) is named by
:func:`unsupported`; the finders then leave that block's laws out with a warning naming it, never guess.
"""

from __future__ import annotations

from torch import nn

from conslaw_lite.counting.module_checks import is_mode_dependent
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
GATE_ACTIVATIONS = {"silu": "silu", "swish": "silu"}  # transformers' hidden_act → conslaw_lite's activation


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


def rope_problem(config: object) -> str | None:
    """Why the RoPE laws here do not cover ``config``'s rotary embedding, or None: ``rope_type="default"``
    (ω_j = θ^(−2j/k) on every coordinate of the head) and ``"linear"`` (positions divided by ``factor``: ω_j / factor,
    as distinct, so the same 2×2 blocks) are covered.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> rope_problem(SimpleNamespace(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}))
    "rope_type='yarn' (only the default and linear rotary embeddings are covered)"
    """
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type not in ("default", "linear"):
        return f"rope_type={rope_type!r} (only the default and linear rotary embeddings are covered)"
    partial = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    if partial != 1.0:
        return f"partial_rotary_factor={partial} (only a rotary embedding on the whole head is covered)"
    return None


def check_rope(config: object) -> None:
    """``ValueError`` naming the option when :func:`rope_problem` finds one.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> check_rope(SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 1e4}))
    """
    problem = rope_problem(config)
    if problem:
        raise ValueError(f"transformers model with {problem}: its laws are not derived here")


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


def inactive_dropouts(module: nn.Module, names: tuple[str, ...]) -> tuple[str, ...] | None:
    """Those of ``module``'s submodules ``names`` that are dropouts with p > 0, when none of them trains now; None
    when one does (its masks break the laws that need a mean removed, see :mod:`.gpt2` and :mod:`.bert`).

    Examples
    ========
    >>> out = nn.Module()
    >>> out.dropout = nn.Dropout(0.1)
    >>> inactive_dropouts(out, ("dropout",)) is None, inactive_dropouts(out.eval(), ("dropout",))
    (True, ('dropout',))
    """
    dropouts = tuple(name for name in names if is_mode_dependent(module.get_submodule(name)))
    return None if any(module.get_submodule(name).training for name in dropouts) else dropouts


def unsupported(module: nn.Module) -> str | None:
    """The option of this attention, MLP or MoE module whose laws are not derived here, or None.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> mlp = nn.Module()
    >>> mlp.config = SimpleNamespace(hidden_act="gelu_pytorch_tanh")
    >>> unsupported(mlp)
    "hidden_act='gelu_pytorch_tanh' (the gated MLP's laws are derived for SiLU)"
    """
    config = getattr(module, "config", None) or module.experts.config  # a MoE block keeps it in its experts
    if hasattr(module, "q_proj"):
        window = window_of(module)
        return f"sliding_window={window}" if window is not None else rope_problem(config)
    act = getattr(config, "hidden_act", "silu")
    if act not in GATE_ACTIVATIONS:
        return f"hidden_act={act!r} (the gated MLP's laws are derived for SiLU)"
    return None


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
