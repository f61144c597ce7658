"""Random small modules with the laws theory gives them: the generator of the certificate fuzz suite.

:func:`make_case` builds, from a seed, one module the way users write them (``nn.Sequential``,
an ``nn.Module`` subclass with a ``forward`` of functional calls, ``nn.MultiheadAttention``) and
states what theory says of it (chapters 02–05 of the book):

* a hidden unit of a **positively homogeneous** activation of degree p (relu, leaky_relu, prelu
  with a fixed slope, rrelu in eval mode, clamp(min=0), abs: p = 1; square: p = 2) between
  ``W_l, b_l`` and ``W_{l+1}`` keeps
  ``‖W_{l+1}[:, i]‖² − (‖W_l[i, :]‖² + b_l[i]²)/p`` (rescale the unit's input by λ and its
  output by λ^(−p));
* a **linear junction** (identity) keeps the balancedness matrix
  ``W_{l+1}ᵀW_{l+1} − [W_l, b_l][W_l, b_l]ᵀ``;
* a **capped or smooth** activation (relu6, hardtanh, hardsigmoid, hardswish, clamp with a
  threshold ≠ 0, elu, selu, celu(α), hardshrink(λ), softshrink(λ), gelu, silu, softplus(β), tanh,
  sigmoid): no law of its own;
* a **gated unit** ``A(g(Bx + b) ⊙ (Cx + c))``: ``‖A[:, i]‖² − ‖C[i, :]‖² − c_i²``, and with a
  homogeneous gate (relu) also the same with B;
* a **norm's gain** γ (and bias β) read by a linear layer W: ``‖W[:, i]‖² − γ_i² − β_i²``;
  LayerNorm without gain outputs vectors ⊥ 1, so the row sums ``W·1`` are laws;
* **attention** with K/V groups g (GQA, MQA, MHA), heads h ∈ g, ``Q_h`` the k rows of W_q of
  head h: ``Σ_{h∈g} Q_hQ_hᵀ − K_gK_gᵀ`` and ``[V_g, b_v][V_g, b_v]ᵀ − Σ_{h∈g} O_hᵀO_h`` (k×k);
* a **cast** to float32/float16/bfloat16 inside ``forward``, or **Dropout / BatchNorm in train
  mode**: no count is right, the counter must refuse (or be inconclusive).

These laws are a *lower* bound of N; :mod:`conslaw_lite.fuzz_oracle` verifies them and
bounds N from above. Weights are scaled by one factor per case, 1 or 10^U(−3, 3).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.seeding import seeded

Params = dict[str, torch.Tensor]
Law = Callable[[Params], torch.Tensor]

FAMILIES = {  # family -> share of the cases
    "mlp": 0.30, "glu": 0.12, "residual": 0.12, "norm": 0.12, "attention": 0.14, "cast": 0.08, "mode": 0.12,
}  # fmt: skip
ACTIVATIONS = (
    "relu", "relu6", "hardtanh", "leaky_relu", "elu", "gelu", "silu", "softplus", "tanh", "sigmoid",
    "hardsigmoid", "hardswish", "clamp", "abs", "square", "identity", "selu", "celu", "prelu", "rrelu",
    "hardshrink", "softshrink",
)  # fmt: skip


@dataclass(frozen=True)
class Activation:
    """One activation: its module (for ``nn.Sequential``), its function, and its homogeneity.

    ``degree`` is p when ``act(λz) = λ^p act(z)`` for all λ > 0 (``None``: not homogeneous);
    ``linear`` for the identity (a linear junction, the balancedness laws).
    """

    name: str
    function: Callable[[torch.Tensor], torch.Tensor]
    degree: int | None = None
    linear: bool = False

    def module(self) -> nn.Module:
        """The activation as a module, as ``nn.Sequential`` users write it."""
        return Pointwise(self.name, self.function)


class Pointwise(nn.Module):
    """An elementwise function as a module (``Square``, ``Clamp``, ... as users write them)."""

    def __init__(self, name: str, function: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.name, self.function = name, function

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function(x)

    def extra_repr(self) -> str:
        return self.name


def _clamp(lo: float | None, hi: float | None) -> Activation:
    homogeneous = (lo == 0 and hi is None) or (lo is None and hi == 0)  # max(z, 0) or min(z, 0)
    return Activation(f"clamp({lo}, {hi})", lambda z: torch.clamp(z, min=lo, max=hi), 1 if homogeneous else None)


def draw_activation(rng: random.Random, names: tuple[str, ...] = ACTIVATIONS) -> Activation:
    """A random activation of ``names`` (thresholds and slopes drawn too), with its degree of homogeneity.

    Examples
    ========
    >>> import random
    >>> act = draw_activation(random.Random(0), ("leaky_relu",))
    >>> act.degree, bool(act.function(torch.tensor(-2.0)) < 0)
    (1, True)
    >>> draw_activation(random.Random(0), ("relu6",)).degree is None  # capped: not homogeneous
    True
    """
    name = rng.choice(names)
    if name == "clamp":
        lo = rng.choice([None, 0.0, round(rng.uniform(-2, 2), 2)])
        hi = rng.choice([None, round((lo or 0.0) + rng.uniform(0.5, 3), 2)] + ([0.0] if lo is None else []))
        return _clamp(lo, hi) if (lo, hi) != (None, None) else _clamp(0.0, 6.0)
    if name == "hardtanh":
        lo, hi = rng.choice([(-1.0, 1.0), (round(-rng.uniform(0.2, 3), 2), round(rng.uniform(0.2, 3), 2))])
        return Activation(f"hardtanh({lo}, {hi})", lambda z: F.hardtanh(z, lo, hi))
    if name == "leaky_relu":
        slope = round(rng.uniform(0.01, 0.5), 3)
        return Activation(f"leaky_relu({slope})", lambda z: F.leaky_relu(z, slope), 1)
    if name == "prelu":  # a fixed slope, as F.prelu takes it: positively homogeneous like leaky_relu
        slope = torch.tensor([round(rng.uniform(-0.5, 0.5), 3)])
        return Activation(f"prelu({slope.item()})", lambda z: F.prelu(z, slope.to(z.dtype)), 1)
    if name == "softplus":  # torch returns z where βz > 20: a large β puts units on that linear piece
        beta = rng.choice([1.0, round(rng.uniform(2, 30), 1)])
        return Activation(f"softplus(β={beta})", lambda z: F.softplus(z, beta=beta))
    if name in ("celu", "hardshrink", "softshrink"):  # a scale α or a threshold λ of their own
        knob = rng.choice([1.0, round(rng.uniform(0.1, 2.0), 2)])
        calls = {"celu": F.celu, "hardshrink": F.hardshrink, "softshrink": F.softshrink}
        return Activation(f"{name}({knob})", lambda z: calls[name](z, knob))
    table: dict[str, tuple[Callable, int | None]] = {
        "relu": (torch.relu, 1), "relu6": (F.relu6, None), "elu": (F.elu, None), "gelu": (F.gelu, None),
        "silu": (F.silu, None), "tanh": (torch.tanh, None),
        "sigmoid": (torch.sigmoid, None), "hardsigmoid": (F.hardsigmoid, None), "hardswish": (F.hardswish, None),
        "abs": (torch.abs, 1), "square": (lambda z: z * z, 2), "identity": (lambda z: z, None),
        "selu": (F.selu, None), "rrelu": (lambda z: F.rrelu(z, training=False), 1),
    }  # fmt: skip
    function, degree = table[name]
    return Activation(name, function, degree, linear=name == "identity")


# ---- laws, by parameter name ---------------------------------------------------------------------------------


def unit_law(out_w: str, in_w: str, in_b: str | None, degree: int) -> Law:
    """``‖W_out[:, i]‖² − (‖W_in[i, :]‖² + b_in[i]²)/p`` per hidden unit i.

    Examples
    ========
    >>> law = unit_law("A", "B", None, 2)
    >>> law({"A": torch.tensor([[3.0, 1.0]]), "B": torch.tensor([[2.0], [4.0]])}).tolist()  # 9 − 4/2, 1 − 16/2
    [7.0, -7.0]
    """

    def law(p: Params) -> torch.Tensor:
        rows = (p[in_w] ** 2).sum(1) + (p[in_b] ** 2 if in_b else 0)
        return (p[out_w] ** 2).sum(0) - rows / degree

    return law


def gram_law(out_w: str, in_w: str, in_b: str | None) -> Law:
    """The upper triangle of ``W_outᵀW_out − [W_in, b_in][W_in, b_in]ᵀ`` (a linear junction).

    Examples
    ========
    >>> gram_law("A", "B", None)({"A": torch.eye(2), "B": 2 * torch.eye(2)}).tolist()
    [-3.0, 0.0, -3.0]
    """

    def law(p: Params) -> torch.Tensor:
        inner = p[in_w] if in_b is None else torch.cat([p[in_w], p[in_b][:, None]], 1)
        m = p[out_w].T @ p[out_w] - inner @ inner.T
        i, j = torch.triu_indices(len(m), len(m))
        return m[i, j]

    return law


def gain_law(w: str, gain: str, bias: str | None) -> Law:
    """``‖W[:, i]‖² − γ_i² − β_i²``: a norm's gain (and bias) against the layer reading it.

    Examples
    ========
    >>> gain_law("W", "g", None)({"W": torch.ones(2, 2), "g": torch.tensor([1.0, 3.0])}).tolist()
    [1.0, -7.0]
    """
    return lambda p: (p[w] ** 2).sum(0) - p[gain] ** 2 - (p[bias] ** 2 if bias else 0)


def group_laws(wq: str, wk: str, wv: str, bv: str | None, wo: str, heads: int, groups: int, k: int, d: int) -> Law:
    """Per K/V group g: upper triangles of ``Σ_{h∈g} Q_hQ_hᵀ − K_gK_gᵀ`` and ``ṼṼᵀ − Σ_{h∈g} O_hᵀO_h``.

    ``wq`` etc. name ``nn.Linear`` weights (Q_h: rows ``h·k:(h+1)·k`` of W_q; O_h: those columns of W_o);
    ``wk``/``wv`` may name rows ``d:2d`` / ``2d:3d`` of one stacked weight (``"in_proj_weight[1]"``).

    Examples
    ========
    >>> p = {"q": torch.eye(2), "k": torch.eye(2), "v": torch.eye(2), "o": torch.eye(2)}
    >>> group_laws("q", "k", "v", None, "o", heads=1, groups=1, k=2, d=2)(p).tolist()  # Q = K, V = O
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    i, j = torch.triu_indices(k, k)

    def weight(p: Params, name: str) -> torch.Tensor:
        base, _, part = name.partition("[")
        return p[base] if not part else p[base][int(part[:-1]) * d : (int(part[:-1]) + 1) * d]

    def law(p: Params) -> torch.Tensor:
        q, kk, v, o = weight(p, wq), weight(p, wk), weight(p, wv), weight(p, wo)
        out = []
        for g in range(groups):
            members = range(g * heads // groups, (g + 1) * heads // groups)
            K, V = kk[g * k : (g + 1) * k], v[g * k : (g + 1) * k]
            V = V if bv is None else torch.cat([V, p[bv][g * k : (g + 1) * k, None]], 1)
            qk = sum(q[h * k : (h + 1) * k] @ q[h * k : (h + 1) * k].T for h in members) - K @ K.T
            vo = V @ V.T - sum(o[:, h * k : (h + 1) * k].T @ o[:, h * k : (h + 1) * k] for h in members)
            out += [qk[i, j], vo[i, j]]
        return torch.cat(out)

    return law


# ---- modules, as users write them ----------------------------------------------------------------------------


class MLP(nn.Module):
    """Linear layers with functional activations between them; optionally a cast, dropout or BatchNorm inside."""

    def __init__(self, widths: list[int], acts: list[Activation], biases: list[bool], extra: str = "") -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=c) for a, b, c in zip(widths, widths[1:], biases))
        self.acts, self.extra = acts, extra
        if extra == "dropout":
            self.drop = nn.Dropout(0.2)
        if extra == "batchnorm":
            self.bn = nn.BatchNorm1d(widths[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i == 0 and self.extra in ("dropout", "batchnorm"):
                h = self.drop(h) if self.extra == "dropout" else self.bn(h)
            if i == 0 and self.extra.startswith("cast"):  # e.g. an autocast-like detour some users write
                h = getattr(h, self.extra.split(":")[1])().to(x.dtype)
            if i < len(self.acts):
                h = self.acts[i].function(h)
        return h


class GLU(nn.Module):
    """``A(g(Bx + b) ⊙ (Cx + c)) + a`` (SwiGLU with g = silu)."""

    def __init__(self, d: int, r: int, gate: Activation, bias: bool) -> None:
        super().__init__()
        self.B, self.C, self.A = nn.Linear(d, r, bias=bias), nn.Linear(d, r, bias=bias), nn.Linear(r, d, bias=bias)
        self.gate = gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.A(self.gate.function(self.B(x)) * self.C(x))


class Residual(nn.Module):
    """``x + W2 ρ(W1 norm(x))`` blocks (pre-norm optional), ``blocks`` of them."""

    def __init__(self, d: int, r: int, acts: list[Activation], bias: bool, norm: bool) -> None:
        super().__init__()
        self.W1 = nn.ModuleList(nn.Linear(d, r, bias=bias) for _ in acts)
        self.W2 = nn.ModuleList(nn.Linear(r, d, bias=bias) for _ in acts)
        self.norm = nn.RMSNorm(d) if norm else None
        self.acts = acts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (w1, w2, act) in enumerate(zip(self.W1, self.W2, self.acts)):
            h = self.norm(x) if self.norm is not None and i == 0 else x
            x = x + w2(act.function(w1(h)))
        return x


class GroupedAttention(nn.Module):
    """Self-attention with ``heads`` query heads sharing ``groups`` K/V heads (GQA; MQA when groups = 1)."""

    def __init__(self, d: int, heads: int, groups: int, k: int, bias: bool, sdpa: bool) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(d, heads * k, bias=False), nn.Linear(d, groups * k, bias=False)
        self.v, self.o = nn.Linear(d, groups * k, bias=bias), nn.Linear(heads * k, d, bias=bias)
        self.heads, self.groups, self.dk, self.sdpa = heads, groups, k, sdpa

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        S, T, _ = x.shape
        q = self.q(x).view(S, T, self.heads, self.dk).transpose(1, 2)
        rep = self.heads // self.groups
        k = self.k(x).view(S, T, self.groups, self.dk).transpose(1, 2).repeat_interleave(rep, dim=1)
        v = self.v(x).view(S, T, self.groups, self.dk).transpose(1, 2).repeat_interleave(rep, dim=1)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dk), dim=-1) @ v
        return self.o(out.transpose(1, 2).reshape(S, T, self.heads * self.dk))


class TorchMHA(nn.Module):
    """``nn.MultiheadAttention`` (batch first, no biases) as self-attention."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, bias=False, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


@dataclass
class Case:
    """One generated module, its input shape, and what theory says of it.

    ``must_refuse``: no count is right (a cast inside forward, Dropout/BatchNorm in train mode).
    ``laws``: the closed-form laws theory gives (a lower bound of N once verified).
    """

    seed: int
    family: str
    description: str
    model: nn.Module
    input_shape: tuple[int, ...]
    must_refuse: bool = False
    laws: dict[str, Law] = field(default_factory=dict)
    scale: float = 1.0


def _hidden_laws(laws: dict, names: list[tuple[str, str | None]], acts: list[Activation]) -> None:
    """The laws of each hidden layer l of a chain: ``names[l]`` = (weight, bias) of linear layer l."""
    for l, act in enumerate(acts):
        (w_in, b_in), (w_out, _) = names[l], names[l + 1]
        if act.linear:
            laws[f"balance {l}"] = gram_law(w_out, w_in, b_in)
        elif act.degree:
            laws[f"units {l} ({act.name})"] = unit_law(w_out, w_in, b_in, act.degree)


def _mlp(rng: random.Random, extra: str = "") -> tuple[nn.Module, tuple[int, ...], dict, str]:
    depth = rng.randint(1, 4)
    widths = [rng.randint(1, 6) for _ in range(depth + 1)]
    if extra == "batchnorm":
        widths[1] = max(widths[1], 2)  # BatchNorm1d needs a feature to normalize over a batch
    acts = [draw_activation(rng) for _ in range(depth - 1)]
    biases = [rng.random() < 0.5 for _ in range(depth)]
    sequential = extra == "" and rng.random() < 0.5
    if sequential:
        mods: list[nn.Module] = []
        for i, (a, b, c) in enumerate(zip(widths, widths[1:], biases)):
            mods += [nn.Linear(a, b, bias=c)] + ([acts[i].module()] if i < len(acts) else [])
        model: nn.Module = nn.Sequential(*mods)
        names = [(f"{2 * i}.weight", f"{2 * i}.bias" if c else None) for i, c in enumerate(biases)]
    else:
        model = MLP(widths, acts, biases, extra)
        names = [(f"layers.{i}.weight", f"layers.{i}.bias" if c else None) for i, c in enumerate(biases)]
    laws: dict[str, Law] = {}
    _hidden_laws(laws, names, acts)
    style = "Sequential" if sequential else "Module"
    text = f"{style} widths {widths} acts [{', '.join(a.name for a in acts)}] bias {[int(b) for b in biases]}"
    return model, (widths[0],), laws, text


def _glu(rng: random.Random):
    d, r = rng.randint(1, 5), rng.randint(1, 5)
    gate = draw_activation(rng, ("silu", "gelu", "sigmoid", "relu"))
    bias = rng.random() < 0.4
    model = GLU(d, r, gate, bias)
    laws = {"A vs C": unit_law("A.weight", "C.weight", "C.bias" if bias else None, 1)}
    if gate.degree:
        laws["A vs B"] = unit_law("A.weight", "B.weight", "B.bias" if bias else None, 1)
    return model, (d,), laws, f"GLU d {d} r {r} gate {gate.name} bias {int(bias)}"


def _residual(rng: random.Random):
    d, r, blocks = rng.randint(2, 5), rng.randint(1, 5), rng.randint(1, 2)
    acts = [draw_activation(rng) for _ in range(blocks)]
    bias, norm = rng.random() < 0.5, rng.random() < 0.3
    model = Residual(d, r, acts, bias, norm)
    laws: dict[str, Law] = {}
    for i, act in enumerate(acts):
        block: dict[str, Law] = {}
        _hidden_laws(block, [(f"W1.{i}.weight", f"W1.{i}.bias" if bias else None), (f"W2.{i}.weight", None)], [act])
        laws.update({f"block {i} {name}": law for name, law in block.items()})
    if norm:
        laws["rmsnorm gain"] = gain_law("W1.0.weight", "norm.weight", None)
    text = f"Residual d {d} r {r} acts [{', '.join(a.name for a in acts)}] bias {int(bias)} prenorm {int(norm)}"
    return model, (d,), laws, text


def _norm(rng: random.Random):
    d, r, out = rng.randint(3, 6), rng.randint(1, 5), rng.randint(1, 4)
    kind = rng.choice(["layernorm", "layernorm-nobias", "layernorm-plain", "rmsnorm", "rmsnorm-plain"])
    act, bias = draw_activation(rng), rng.random() < 0.5
    affine = not kind.endswith("plain")
    if kind.startswith("layernorm"):
        norm = nn.LayerNorm(d, elementwise_affine=affine, bias=kind == "layernorm")
    else:
        norm = nn.RMSNorm(d, elementwise_affine=affine)
    model = nn.Sequential(norm, nn.Linear(d, r, bias=bias), act.module(), nn.Linear(r, out))
    laws: dict[str, Law] = {}
    _hidden_laws(laws, [("1.weight", "1.bias" if bias else None), ("3.weight", None)], [act])
    if affine:
        laws["gain"] = gain_law("1.weight", "0.weight", "0.bias" if kind == "layernorm" else None)
    elif kind == "layernorm-plain":
        laws["row sums"] = lambda p: p["1.weight"].sum(1)  # LayerNorm's output is ⊥ 1
    return model, (d,), laws, f"{kind}({d}) → Linear({r}, bias {int(bias)}) → {act.name} → Linear({out})"


def _attention(rng: random.Random):
    style = rng.choice(["gqa", "gqa", "sdpa", "torch"])
    T = rng.randint(2, 4)
    if style == "torch":
        heads = rng.randint(1, 3)
        k = rng.randint(1, 2)
        d = heads * k
        model: nn.Module = TorchMHA(d, heads)
        law = group_laws("mha.in_proj_weight[0]", "mha.in_proj_weight[1]", "mha.in_proj_weight[2]", None,
                         "mha.out_proj.weight", heads, heads, k, d)  # fmt: skip
        groups, bias = heads, False
    else:
        groups = rng.randint(1, 2)
        heads = groups * rng.randint(1, 2)
        k, d = rng.randint(1, 3), rng.randint(2, 4)
        k = min(k, d)
        bias = rng.random() < 0.4
        model = GroupedAttention(d, heads, groups, k, bias, style == "sdpa")
        law = group_laws("q.weight", "k.weight", "v.weight", "v.bias" if bias else None, "o.weight",
                         heads, groups, k, d)  # fmt: skip
    text = f"attention {style} T {T} d {d} heads {heads} groups {groups} k {k} bias {int(bias)}"
    return model, (T, d), {"groups": law}, text


def _cast(rng: random.Random):
    dtype = rng.choice(["float", "half", "bfloat16"])
    model, shape, _, text = _mlp(rng, extra=f"cast:{dtype}")
    return model, shape, {}, f"{text} cast .{dtype}() in forward"


def _mode(rng: random.Random):
    """Dropout / BatchNorm in train mode (refuse), or in eval mode (count: dropout is the identity)."""
    kind, train = rng.choice(["dropout", "batchnorm"]), rng.random() < 0.6
    if train or kind == "dropout":
        model, shape, laws, text = _mlp(rng, extra=kind)
        model.train(train)
        return model, shape, laws, f"{text} {kind} {'train' if train else 'eval'} mode", train
    d, r = rng.randint(2, 5), rng.randint(1, 5)  # BatchNorm in eval mode at the input: a fixed affine map
    act, bias = draw_activation(rng), rng.random() < 0.5
    bn = nn.BatchNorm1d(d)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2.0)
    model = nn.Sequential(bn, nn.Linear(d, r, bias=bias), act.module(), nn.Linear(r, rng.randint(1, 3))).eval()
    laws = {"gain": gain_law("1.weight", "0.weight", "0.bias")}
    _hidden_laws(laws, [("1.weight", "1.bias" if bias else None), ("3.weight", None)], [act])
    return model, (d,), laws, f"BatchNorm1d({d}) eval → Linear({r}) → {act.name} → Linear", False


def make_case(seed: int, family: str | None = None) -> Case:
    """The case of ``seed``: a family drawn by :data:`FAMILIES`' shares (or ``family``), a module, its laws.

    Examples
    ========
    >>> case = make_case(3, "glu")
    >>> case.family, sorted(case.laws), case.must_refuse
    ('glu', ['A vs C'], False)
    >>> make_case(1, "cast").must_refuse
    True
    """
    rng = random.Random(seed)
    if family is None:
        family = rng.choices(list(FAMILIES), weights=list(FAMILIES.values()))[0]
    builders = {"mlp": _mlp, "glu": _glu, "residual": _residual, "norm": _norm, "attention": _attention,
                "cast": _cast}  # fmt: skip
    with seeded(seed):
        if family == "mode":
            model, shape, laws, text, refuse = _mode(rng)
        elif family in builders:
            model, shape, laws, text = builders[family](rng)
            refuse = family == "cast"
        else:
            raise ValueError(f"unknown family {family!r}: choose one of {', '.join(FAMILIES)}")
        scale = 1.0 if rng.random() < 0.5 else 10 ** rng.uniform(-3, 3)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
    model = model.double()
    return Case(seed, family, f"{text} scale {scale:.3g}", model, shape, refuse, laws, scale)
