"""transformers' decoders as functions the law counter can evaluate exactly: float64 throughout, one tensor out.

transformers computes parts of its forward in float32 whatever the model's dtype: every RMSNorm
(``hidden.to(torch.float32)``), the rotary table (``position_ids.float() * inv_freq.float()``), the
Qwen3-MoE router's softmax (``dtype=torch.float``) and the eager attention's softmax. That is the same
function in lower precision, and its round-off fills the directions of the laws, so the counter refuses it
(:mod:`conslaw_lite.counting.module_checks`). :func:`countable` returns a float64 copy in which each of
those is the same formula computed in the input's dtype, under the same parameter names (``q_norm.weight``,
``mlp.gate.weight``, ``mlp.experts.gate_up_proj``), and attention runs through ``sdpa`` (eager with its softmax in
float64 where it caps scores, as Gemma 2 does; an attention function of one's own is kept); the attention
modules themselves, the MLPs and the projections are transformers' own. A submodule that needs position
embeddings (an attention, a decoder layer) is called as ``f(X)``, X: (batch, T, d); a causal LM as
``f(ids)`` → logits; either keeps its parameter names. :func:`~conslaw_lite.count_laws` (and so
``check_laws``, ``find_laws``, ``certify --module``) takes such a module as it is: this family registers
:func:`countable` as its float64 form (:func:`conslaw_lite.laws.register_countable`).

``tests/test_hf.py`` holds each copy against transformers' own forward (float32, 10⁻⁵).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import MethodType

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from conslaw_lite.families.hf.config import (
    MODELS,
    NORMS,
    ROTARIES,
    attention_problem,
    check_rope,
    class_name,
    rope_frequencies,
    window_of,
)


class ExactRotary(nn.Module):
    """HF's rotary table in the input's dtype: ``s·cos, s·sin`` of ``p·ω_j``, j < k/2, each repeated for
    coordinates j and j + k/2 (``rotate_half`` pairs them); s is the rotary type's factor (yarn's, else 1).

    Examples
    ========
    >>> from conslaw_lite.families.hf.config import default_frequencies
    >>> rotary = ExactRotary(default_frequencies(4, base=9.0))
    >>> cos, sin = rotary(torch.zeros(1, dtype=torch.float64), torch.tensor([[2]]))
    >>> cos.shape, sin[0, 0].tolist() == sin[0, 0, [2, 3, 0, 1]].tolist()  # ω = (1, 1/3), twice
    (torch.Size([1, 1, 4]), True)
    """

    def __init__(self, omega: torch.Tensor, scale: float = 1.0, longest: int | None = None) -> None:
        """``longest``: the most positions its table holds for (``dynamic``'s frequencies change past it)."""
        super().__init__()
        self.inv_freq, self.scale, self.longest = nn.Buffer(omega.to(torch.float64)), scale, longest

    @classmethod
    def of(cls, config: object, rotary: nn.Module | None = None) -> ExactRotary:
        """The rotary table of a transformers ``config`` (:func:`~conslaw_lite.families.hf.config.check_rope` first),
        or, where the model's ``rotary`` module turns by other frequencies than its config's (a buffer edited after it
        was built: a frequency zeroed to leave a pair unturned), by those: the count is of the model as it computes.
        """
        check_rope(config)
        dynamic = "dynamic" in (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
        omega, scale = rope_frequencies(config)
        # dynamic's forward puts its original frequencies back on the sequences the count takes
        held = None if rotary is None else getattr(rotary, "original_inv_freq" if dynamic else "inv_freq", None)
        if held is not None and not (held.shape == omega.shape and torch.allclose(held.double(), omega, rtol=1e-6)):
            omega = held.detach().to(torch.float64)  # from float32, as the model turns by them
        scale = float(getattr(rotary, "attention_scaling", scale))
        return cls(omega, scale, longest=config.max_position_embeddings if dynamic else None)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.longest is not None and position_ids.max() >= self.longest:
            raise ValueError(
                f"rope_type='dynamic' changes its frequencies past {self.longest} positions: count on shorter inputs"
            )
        angle = position_ids[..., None].to(self.inv_freq.dtype) * self.inv_freq  # (B, T, k/2)
        angle = torch.cat([angle, angle], dim=-1).to(x.dtype)  # (B, T, k): coordinate j and j + k/2 share ω_j
        return angle.cos() * self.scale, angle.sin() * self.scale


def adopt(owner: nn.Module, name: str, value: torch.Tensor) -> None:
    """``owner.name = value``, a parameter where ``value`` is one, else a buffer: a block that own_laws holds fixed
    keeps its weights as buffers (:func:`~conslaw_lite.model_parts.part_module`), and its stand-in holds them too.

    Examples
    ========
    >>> norm = nn.RMSNorm(2)
    >>> adopt(norm, "weight", torch.ones(2))
    >>> [n for n, _ in norm.named_parameters()], [n for n, _ in norm.named_buffers()]
    ([], ['weight'])
    """
    if isinstance(value, nn.Parameter):
        setattr(owner, name, value)
        return
    owner._parameters.pop(name, None)
    owner.register_buffer(name, value)


class ExactRouter(nn.Module):
    """Qwen3-MoE's router in the input's dtype: ``p = softmax(W x)``, the top k of p, divided by their sum
    when ``norm_topk_prob``. Returns ``(logits, weights, indices)`` like transformers' ``Qwen3MoeTopKRouter``.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> W = nn.Parameter(torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64))  # logits 0, x, 2x
    >>> router = ExactRouter(SimpleNamespace(weight=W, top_k=2, norm_topk_prob=True))
    >>> _, weights, index = router(torch.tensor([[1.0]], dtype=torch.float64))
    >>> index.tolist(), round(weights.sum().item(), 12)  # experts 2 and 1, their weights divided by their sum
    ([[2, 1]], 1.0)
    """

    def __init__(self, router: nn.Module) -> None:
        super().__init__()
        adopt(self, "weight", router.weight)  # (n_E, d): row e is the gate row W_e
        self.top_k, self.norm_topk_prob = router.top_k, router.norm_topk_prob

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # x: (N, d)
        logits = F.linear(x, self.weight)  # (N, n_E)
        top, index = torch.softmax(logits, dim=-1).topk(self.top_k, dim=-1)  # (N, k) each
        if self.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return logits, top, index


class DenseExperts(nn.Module):
    """Every expert on every token, ``y_e = A_e (silu(B_e x) ⊙ C_e x)``, weighted by the router's (zero off the
    top k): ``gate_up_proj[e] = [B_e; C_e]`` (2r, d), ``down_proj[e] = A_e`` (d, r), as in ``Qwen3MoeExperts``.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> experts = SimpleNamespace(  # 2 experts of width r = 1 on d = 1: y_e = A_e silu(B_e x) C_e x
    ...     gate_up_proj=torch.ones(2, 2, 1), down_proj=torch.tensor([[[1.0]], [[3.0]]]), act_fn=F.silu, config=None)
    >>> x = torch.tensor([[2.0]])
    >>> round(DenseExperts(experts)(x, torch.tensor([[1]]), torch.tensor([[0.5]])).item(), 4)  # 0.5·3·silu(2)·2
    5.2848
    """

    def __init__(self, experts: nn.Module) -> None:
        super().__init__()
        adopt(self, "gate_up_proj", experts.gate_up_proj)
        adopt(self, "down_proj", experts.down_proj)
        self.act_fn = experts.act_fn
        self.config = experts.config  # what the finders read (hidden_act)

    def forward(self, x: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:  # x: (N, d)
        g = torch.zeros(len(x), len(self.gate_up_proj), dtype=x.dtype, device=x.device)
        g = g.scatter(1, index, weights.to(x.dtype))  # (N, n_E)
        gate, up = torch.einsum("nd,ejd->nej", x, self.gate_up_proj).chunk(2, dim=-1)  # (N, n_E, r) each
        y = torch.einsum("ner,edr->ned", self.act_fn(gate) * up, self.down_proj)  # (N, n_E, d)
        return (g[..., None] * y).sum(1)  # (N, d)


def _position_forward(self: nn.Module, X: torch.Tensor) -> torch.Tensor:
    """An attention (its first output) or a decoder layer as ``f(X)``, X: (batch, T, d), positions 0..T−1, causal."""
    if X.dim() != 3:
        raise ValueError(f"expected input of shape (batch, T, d), got {tuple(X.shape)}")
    position = torch.arange(X.shape[1], device=X.device)[None]  # (1, T)
    window = window_of(getattr(self, "self_attn", self))
    mask = None if window is None else window_mask(X.shape[1], window, X.dtype, X.device)
    out = type(self).forward(self, X, position_embeddings=self.exact_rotary(X, position), attention_mask=mask)
    return out[0] if isinstance(out, tuple) else out


def window_mask(T: int, window: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The additive mask (1, 1, T, T) of a causal sliding window: position i sees j when ``i − window < j ≤ i``.

    Without it (``attention_mask=None``) transformers' attention is causal over the whole sequence.

    Examples
    ========
    >>> (window_mask(4, 2, torch.float64, torch.device("cpu"))[0, 0] == 0).int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    i, j = torch.arange(T, device=device)[:, None], torch.arange(T, device=device)[None, :]
    seen = (j <= i) & (j > i - window)
    return torch.zeros(T, T, dtype=dtype, device=device).masked_fill(~seen, torch.finfo(dtype).min)[None, None]


def _hidden_forward(self: nn.Module, X: torch.Tensor) -> torch.Tensor:
    """An attention without positions of its own (GPT-2's, causal; BERT's) as ``f(X)``, X: (batch, T, d): its first
    output."""
    if X.dim() != 3:
        raise ValueError(f"expected input of shape (batch, T, d), got {tuple(X.shape)}")
    return type(self).forward(self, X)[0]


def _logits_forward(self: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """A causal LM as ``f(ids)`` → logits, ids: (batch, T) integer token ids."""
    return type(self).forward(self, input_ids=ids, use_cache=False).logits


def called_as_one_tensor(module: nn.Module, forward: Callable, rotary: nn.Module | None = None) -> nn.Module:
    """``module`` itself, called as ``forward(module, x)``: its parameter names stay its own (no wrapper prefix),
    so the laws ``laws_of`` names for the original module are read off the copy unchanged.

    Examples
    ========
    >>> class Shift(nn.Module):  # stands in for an attention: adds the cosines of position 0..T−1
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = nn.Parameter(torch.zeros(2, dtype=torch.float64))
    ...     def forward(self, X, position_embeddings, attention_mask):
    ...         return X + self.w + position_embeddings[0], None
    >>> from conslaw_lite.families.hf.config import default_frequencies
    >>> probe = called_as_one_tensor(Shift(), _position_forward, ExactRotary(default_frequencies(2, 1e4)))
    >>> probe(torch.zeros(1, 2, 2, dtype=torch.float64))[0, 1].tolist(), [n for n, _ in probe.named_parameters()]
    ([0.5403023058681398, 0.5403023058681398], ['w'])
    """
    if rotary is not None:
        module.exact_rotary = rotary  # buffers only: the parameters are unchanged
    module.forward = MethodType(forward, module)
    return module


class Float64Softmax(TorchFunctionMode):
    """Within the block, ``softmax(x, dtype=torch.float32)`` of a float64 ``x`` is computed in float64: eager
    attention's upcast, a downcast in a float64 copy.

    Examples
    ========
    >>> x = torch.tensor([0.0, 1e-9], dtype=torch.float64)
    >>> with Float64Softmax():
    ...     p = F.softmax(x, dim=-1, dtype=torch.float32)
    >>> p.dtype, bool(p[1] > p[0])  # in float32 both are 0.5
    (torch.float64, True)
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (F.softmax, torch.softmax, torch.Tensor.softmax) and kwargs.get("dtype") == torch.float32:
            if args[0].dtype == torch.float64:
                kwargs = {**kwargs, "dtype": torch.float64}
        return func(*args, **kwargs)


def _softmax_in_float64(self: nn.Module, *args: object, **kwargs: object) -> object:
    with Float64Softmax():
        return type(self).forward(self, *args, **kwargs)


def _replacement(module: nn.Module) -> nn.Module | None:
    """The exact stand-in of one of transformers' float32 pieces, or None for a module kept as it is."""
    name = class_name(module)
    if name in NORMS:
        norm = nn.RMSNorm(module.weight.shape, eps=module.variance_epsilon, dtype=module.weight.dtype)
        adopt(norm, "weight", module.weight)  # the same Parameter: same name, same value
        return norm
    if name in ROTARIES:
        return ExactRotary.of(module.config, module)
    if name == "Qwen3MoeTopKRouter":
        return ExactRouter(module)
    if name == "Qwen3MoeExperts":
        return DenseExperts(module)
    return None


def exact_copy(module: nn.Module) -> nn.Module:
    """A float64 copy of ``module`` with each float32 piece replaced by the same formula in float64 (see the
    module docstring), attention through ``sdpa``; parameter names unchanged.

    Examples
    ========
    >>> class Qwen3RMSNorm(nn.Module):  # transformers' parameters and attribute names (its forward casts to float32)
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.weight, self.variance_epsilon = nn.Parameter(torch.ones(3)), 1e-6
    >>> block = nn.Sequential(nn.Linear(2, 3), Qwen3RMSNorm())
    >>> exact = exact_copy(block)
    >>> exact[1], [n for n, _ in exact.named_parameters()], exact[0].weight.dtype
    (RMSNorm((3,), eps=1e-06, elementwise_affine=True), ['0.weight', '0.bias', '1.weight'], torch.float64)
    """
    out = copy.deepcopy(module).to(torch.float64)
    for name, sub in list(out.named_modules()):
        config = getattr(sub, "config", None)
        if hasattr(config, "_attn_implementation") and not attention_problem(config):  # one's own stays
            if getattr(config, "attn_logit_softcapping", None) is None:
                config._attn_implementation = "sdpa"  # eager attention computes its softmax in float32
            elif hasattr(sub, "q_proj"):  # eager stays (sdpa caps no scores): its softmax in float64
                sub.forward = MethodType(_softmax_in_float64, sub)
        new = _replacement(sub)
        if new is None:
            continue
        if not name:
            return new
        parent, _, child = name.rpartition(".")
        setattr(out.get_submodule(parent), child, new)
    return out


ROTARY_LAYERS = {f"{prefix}{kind}" for prefix in MODELS.values() for kind in ("Attention", "DecoderLayer")}
WITHOUT_POSITIONS = ("GPT2Attention", "BertAttention")  # attentions called as f(X) alone: positions enter before them


def countable(module: nn.Module) -> nn.Module:
    """``module`` from transformers as a float64 function of one tensor, for :func:`~conslaw_lite.count_laws`.

    An attention or a decoder layer becomes ``f(X)``, X: (batch, T, d) (positions 0..T−1, causal; GPT-2's and BERT's
    attention have no positions of their own); a causal LM (GPT-2's ``GPT2LMHeadModel`` too) ``f(ids)`` → logits;
    an MLP or a MoE block stays ``f(X)``. Parameter names are the module's own, so
    :func:`~conslaw_lite.laws.laws_of` of the result evaluates the same laws.

    Examples
    ========
    >>> countable(nn.Linear(2, 2)).weight.dtype  # a module with no float32 piece: a float64 copy
    torch.float64
    """
    name = class_name(module) if type(module).__module__.startswith("transformers.") else ""
    if name.endswith(("Attention", "DecoderLayer")) and name not in (*ROTARY_LAYERS, *WITHOUT_POSITIONS):
        raise ValueError(
            f"transformers' {name} is counted only as the attention or decoder layer of {', '.join(MODELS.values())}, "
            "whose rotary embedding and call it knows, or as GPT-2's or BERT's attention; count the model's MLP "
            "instead, or the whole model where its forward keeps float64 throughout (Gemma's and Phi3's norms round "
            "to float32: refused)"
        )
    exact = exact_copy(module)
    if name in WITHOUT_POSITIONS:
        return called_as_one_tensor(exact, _hidden_forward)
    if name in ROTARY_LAYERS:
        config = getattr(module, "config", None) or module.self_attn.config  # a decoder layer keeps none of its own
        return called_as_one_tensor(exact, _position_forward, ExactRotary.of(config))
    if name.endswith(("ForCausalLM", "LMHeadModel")):
        return called_as_one_tensor(exact, _logits_forward)
    return exact


def is_from_transformers(module: nn.Module) -> bool:
    """Whether ``module`` (or one of its submodules) is transformers' own: the counter then evaluates
    :func:`countable` of it.

    Examples
    ========
    >>> is_from_transformers(nn.Sequential(nn.Linear(2, 2)))
    False
    """
    return any(type(m).__module__.startswith("transformers.") for m in module.modules())
