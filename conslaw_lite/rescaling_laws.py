"""The laws of rescaling one unit between two layers, for a model too large to count: proposed, then checked.

A unit i of a layer P (row i of a ``Linear``'s weight and entry i of its bias, output channel i of a convolution, gain
and shift i of a norm's affine map, column i of an embedding) that the next layer C reads only through a positively
homogeneous map σ(c z) = c σ(z), c > 0 (ReLU, LeakyReLU, max-pooling, flattening, none), can be rescaled: P's unit
times c, C's weights on it (its columns i, or the block of m columns that flattening gives channel i) times 1/c, the
output unchanged. That one-parameter symmetry gives the law

    h_i(θ) = ‖P_i‖² − ‖C_{:, i}‖²        (the sums of squares of every entry of unit i in P and in C).

A layer whose outputs the model reads only through a softmax or a LayerNorm over them also has the linear laws of a
shift common to all its units (:mod:`conslaw_lite.shift_laws`); they are proposed and checked here too.

:func:`~conslaw_lite.find_laws.find_laws` finds these (and every other quadratic law) and certifies the list
against the count, up to ``MAX_PARAMS`` = 8,192 parameters; past a monitor's ``SEARCH_MAX_PARAMS`` its search
would take longer than a monitor waits before training. Here, whatever D, each pair of consecutive layers in the
order the forward calls them proposes its laws, and a law is kept only where
:func:`~conslaw_lite.counting.check.law_residuals` finds it conserved: ``|⟨∇h, ∇f_i(x)⟩| ≤ RESIDUAL_TOL ‖∇h‖
‖∇f_i(x)‖`` at two random θ and fresh inputs. A GELU, a norm or a residual connection between P and C breaks the
symmetry and its law fails there; it is dropped, never guessed. The list kept is not counted, so not known to be
complete (a linear layer between two others has the whole GL(n) of laws, of which these are the diagonal).

A BatchNorm in train mode normalizes with the statistics of the batch, so the outputs of one batch are coupled and no
count (of one input's function) applies. The check is then run as the model trains: its BatchNorms in train mode, on
batches of ``COUPLED_SAMPLES`` inputs, each output's gradient that of the batch's function. A kept law holds in eval
mode too: a norm's gain and shift scale its output in either mode, and a pattern with a BatchNorm between P and C
fails in train mode (the norm divides the scale out, then C's 1/c changes the output).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

import torch
from torch import nn

from conslaw_lite.config import evaluating
from conslaw_lite.counting import RESIDUAL_TOL
from conslaw_lite.counting.check import law_residuals
from conslaw_lite.counting.layer_kinds import is_batch_norm
from conslaw_lite.counting.problem import checked_outputs, problem_of
from conslaw_lite.dataflow import forward_watched
from conslaw_lite.head_laws import (
    BLOCK_ROWS,
    CORNER_ROWS,
    Pattern,
    choose,
    head_patterns,
    layers_of,
    reached_columns,
    widest,
)
from conslaw_lite.laws import Law, Params
from conslaw_lite.parameter_heads import parameter_head_patterns
from conslaw_lite.shared_squares import squared
from conslaw_lite.shift_laws import shift_patterns
from conslaw_lite.user_inputs import example_inputs

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
COUPLED_SAMPLES = 8  # inputs in one batch of the check where BatchNorms train: their statistics couple its outputs
CHECK_ROWS = 512  # output entries each θ of the check reads, drawn at random where there are more: a language
# model's 8 windows of 8 tokens over 64 words took 160 s (each row its own backward pass where vmap runs attention's
# one by one), a ResNet stage's 2 maps of 128 × 8 × 8 more than the 120 s a monitor gives its whole search

Unit = tuple[str, int]  # a tensor's name and the axis along which its entries belong to the units


def producer(name: str, module: nn.Module) -> list[Unit]:
    """The tensors of ``module`` whose slices along the axis given are its output units (``[]``: it has none).

    Examples
    ========
    >>> producer("0", nn.Linear(3, 4)), producer("emb", nn.Embedding(10, 4)), producer("c", nn.Conv2d(1, 2, 3))
    ([('0.weight', 0), ('0.bias', 0)], [('emb.weight', 1)], [('c.weight', 0), ('c.bias', 0)])
    >>> producer("n", nn.RMSNorm(4)), producer("bn", nn.BatchNorm1d(4, affine=False))
    ([('n.weight', 0)], [])
    """
    if isinstance(module, (nn.Linear, *CONVS)):  # a grouped convolution's output channel o too: weight[o], bias[o]
        return [(f"{name}.{t}", 0) for t in ("weight", "bias") if getattr(module, t) is not None]
    if _is_conv1d(module):
        return [(f"{name}.weight", 1), *([(f"{name}.bias", 0)] if module.bias is not None else [])]
    if isinstance(module, nn.Embedding):
        return [(f"{name}.weight", 1)]
    own = dict(module.named_parameters(recurse=False))
    if own.keys() <= {"weight", "bias"} and _elementwise(own):  # a norm's gain and shift, of torch or one's own
        return [(f"{name}.{t}", 0) for t in ("weight", "bias") if t in own]
    return []


def shift_units(name: str, module: nn.Module, shapes: dict[str, torch.Size]) -> list[list[Unit]]:
    """The units of ``module`` whose common shift :mod:`conslaw_lite.shift_laws` proposes: its :func:`producer`'s, or,
    in a module of one's own, each of its matrices along either axis (``x @ W`` or ``W @ x``) and each of its vectors
    alone; trainable ones only.

    Examples
    ========
    >>> shapes = {"r.weight": torch.Size([3, 4]), "m.W": torch.Size([4, 3]), "m.b": torch.Size([3])}
    >>> shift_units("r", nn.Linear(4, 3, bias=False), shapes)
    [[('r.weight', 0)]]
    >>> own = nn.Module()
    >>> own.W, own.b = nn.Parameter(torch.ones(4, 3)), nn.Parameter(torch.ones(3))
    >>> shift_units("m", own, shapes)
    [[('m.W', 0)], [('m.W', 1)], [('m.b', 0)]]
    """
    made = producer(name, module)
    if made:
        units = [u for u in made if u[0] in shapes]
        return [units] if units else []
    own = [f"{name}.{t}" if name else t for t, _ in module.named_parameters(recurse=False)]
    return [[(t, axis)] for t in own if t in shapes and len(shapes[t]) <= 2 for axis in range(len(shapes[t]))]


def _elementwise(own: dict[str, torch.Tensor]) -> bool:
    """Whether a layer's own parameters are a gain and maybe a shift, one entry per feature (a norm's affine map,
    of torch or of one's own: the check decides whether its units rescale)."""
    return "weight" in own and all(t.dim() == 1 and t.shape == own["weight"].shape for t in own.values())


def consumer(name: str, module: nn.Module) -> tuple[Unit, int] | None:
    """The weight of ``module`` read along its input axis, and how many inputs it reads; ``None`` for another layer.

    Examples
    ========
    >>> consumer("2", nn.Linear(4, 3)), consumer("c", nn.Conv1d(4, 2, 3)), consumer("n", nn.LayerNorm(4))
    ((('2.weight', 1), 4), (('c.weight', 1), 4), None)
    >>> consumer("dw", nn.Conv2d(4, 8, 3, groups=4)), consumer("g", nn.Conv2d(4, 4, 3, groups=2))  # depthwise; groups
    ((('dw.weight', 0), 4), None)
    """
    if isinstance(module, nn.Linear):
        return (f"{name}.weight", 1), module.in_features
    if isinstance(module, CONVS) and module.groups == 1:
        return (f"{name}.weight", 1), module.in_channels
    if isinstance(module, CONVS) and module.groups == module.in_channels:  # depthwise: channel c is weight[mc:mc+m]
        return (f"{name}.weight", 0), module.in_channels
    if _is_conv1d(module):
        return (f"{name}.weight", 0), module.weight.shape[0]
    return None


def _is_conv1d(module: nn.Module) -> bool:
    """transformers' ``Conv1D`` (GPT-2's layers): ``y = x W + b``, its weight of shape (inputs, outputs), the transpose
    of ``nn.Linear``'s; recognised by name, transformers being optional."""
    weight = getattr(module, "weight", None)
    return type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and weight.dim() == 2


def called_layers(model: nn.Module, x: torch.Tensor) -> list[tuple[str, nn.Module]]:
    """The modules that hold parameters of their own, in the order they first return in one forward on ``x``; a module
    called twice is left out (its units are shared by two places).

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> [name for name, _ in called_layers(net, torch.randn(2, 3))]
    ['0', '2']
    """
    return _called(model, x)[0]


def _called(model: nn.Module, x: torch.Tensor) -> tuple[list[tuple[str, nn.Module]], dict[str, tuple[int, int]]]:
    """:func:`called_layers`, and the ids of the tensor each of them read first and of the one it returned (kept
    alive until the end, so that no other tensor takes their ids)."""
    order: list[str] = []
    flows: dict[str, tuple[int, int]] = {}
    alive: list[object] = []

    def seen(name: str, args: tuple, output: object) -> None:
        order.append(name)
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        flows[name] = (id(first) if first is not None else -1, id(output))
        alive.extend((first, output))

    forward_watched(model, x, seen)
    modules = dict(model.named_modules())
    return [(n, modules[n]) for n in dict.fromkeys(order) if order.count(n) == 1], flows


def _unit_sums(name: str, axis: int, ndim: int, n: int, part: slice = slice(None)) -> Callable[[Params], torch.Tensor]:
    """``p ↦ (‖t_0‖², …, ‖t_{n−1}‖²)``: the squares of tensor ``name`` summed per unit, the units along ``axis`` (in
    blocks of equal size when the axis is longer than n; ``part``: the entries along it that hold them), over any
    leading axes a stack of θ adds."""

    def sums(p: Params) -> torch.Tensor:
        t = squared(p[name])
        lead = t.dim() - ndim
        t = t.movedim(lead + axis, lead)[(slice(None),) * lead + (part,)]
        return t.reshape(*t.shape[:lead], n, -1).sum(-1)

    return sums


def _term(name: str, axis: int, ndim: int, n: int, m: int, index: str = "i") -> str:
    if ndim == 1:
        return f"{name}[{index}]²"
    index = index if m == 1 else f"{m}i:{m}i+{m}"
    slices = [":"] * ndim
    slices[axis] = index
    return f"‖{name}[{', '.join(slices)}]‖²"


def proposed_laws(model: nn.Module, x: torch.Tensor) -> dict[str, Law]:
    """For each two layers the forward calls one after the other, P with n units and C reading n·m inputs, the laws
    ``h_i = ‖P_i‖² − ‖C_{:, i}‖²`` (module docstring), one pattern of n laws each; not checked.

    Examples
    ========
    >>> net = nn.Sequential(nn.Conv1d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(12, 2))
    >>> list(proposed_laws(net, torch.randn(2, 2, 6)))
    ['for i in 0..2: ‖0.weight[i, :, :]‖² + 0.bias[i]² − ‖3.weight[:, 4i:4i+4]‖²']
    """
    patterns = unit_patterns(called_layers(model, x), _trainable(model))
    return {p.key: p.law for p in _by_first_names(patterns, _tied(model))}


def _trainable(model: nn.Module) -> dict[str, torch.Size]:
    """The trainable parameters' shapes, a tied one's under each of its names (a head tied to the embedding:
    ``head.weight`` beside ``emb.weight``), as the layers that read it name it."""
    named = dict(model.named_parameters(remove_duplicate=False))
    return {name: p.shape for name, p in named.items() if p.requires_grad}


def _tied(model: nn.Module) -> dict[str, str]:
    """Each other name of a tied parameter → the one ``named_parameters()`` gives it (``head.weight`` → ``emb.weight``).

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    >>> net[1].weight = net[0].weight
    >>> _tied(net)
    {'1.weight': '0.weight'}
    """
    first = {id(p): name for name, p in model.named_parameters()}
    return {name: first[id(p)] for name, p in model.named_parameters(remove_duplicate=False) if first[id(p)] != name}


def _by_first_names(patterns: list[Pattern], tied: dict[str, str]) -> list[Pattern]:
    """``patterns`` reading each tied parameter by the name θ holds it under (``tied``: :func:`_tied`; a law reads θ
    by ``named_parameters()``'s names)."""

    def first(law: Law | None) -> Law | None:
        return None if law is None else lambda p: law(_FirstNames(p, tied))

    return [replace(p, law=first(p.law), corners=first(p.corners)) for p in patterns] if tied else patterns


class _FirstNames(Mapping):
    """``p`` read by any name of a tied parameter (what a law reads is read from ``p`` alone, under its first name)."""

    def __init__(self, p: Params, tied: dict[str, str]) -> None:
        self.p, self.tied = p, tied

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.p[self.tied.get(name, name)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.p)

    def __len__(self) -> int:
        return len(self.p)


def unit_patterns(
    layers: list[tuple[str, nn.Module]], shapes: dict[str, torch.Size], flows: dict[str, tuple[int, int]] | None = None
) -> list[Pattern]:
    """:func:`proposed_laws` of ``layers`` (in the order a forward calls them, ``shapes``: the trainable parameters),
    each a :class:`~conslaw_lite.head_laws.Pattern` of units (size 1) in the family of P's blocks against C; with
    ``flows`` (the ids of the tensor each layer reads and returns), also P against every layer that reads P's output
    when two or more do (a pre-norm's gain against q, k and v: ``‖P_i‖² − Σ_C ‖C_{:, i}‖²``)."""
    groups = [(p, [c]) for p, c in zip(layers, layers[1:])]
    if flows is not None:
        for made in layers:
            readers = [layer for layer in layers if flows[layer[0]][0] == flows[made[0]][1]]
            groups += [(made, readers)] if len(readers) > 1 else []
    return [pattern for made, readers in groups for pattern in _units_against(made, readers, shapes)]


def _units_against(
    made: tuple[str, nn.Module], readers: list[tuple[str, nn.Module]], shapes: dict[str, torch.Size]
) -> list[Pattern]:
    """The pattern ``‖P_i‖² − Σ_C ‖C_{:, i}‖²`` of a producer against the layers that read it; none where one of
    them is no consumer or reads no whole number of entries per unit. A producer of twice the units its one reader
    reads (a GLU's gate and linear branch fused, ``gate_up``, interleaved row by row) gets the pattern of the even and
    of the odd rows: the linear branch's passes. (Cut in halves, they are a fused projection's segments, which
    :mod:`conslaw_lite.head_laws` proposes.)"""
    p_name, p_module = made
    units, reads = producer(p_name, p_module), [consumer(c_name, c_module) for c_name, c_module in readers]
    if not units or not all(t in shapes for t, _ in units) or any(r is None or r[0][0] not in shapes for r in reads):
        return []
    n = shapes[units[0][0]][units[0][1]]
    if len(reads) == 1 and reads[0][1] * 2 == n and shapes[reads[0][0][0]][reads[0][0][1]] == n // 2:
        parts = [(slice(0, None, 2), "2i"), (slice(1, None, 2), "2i+1")]  # the reader's unit i: P's unit 2i or 2i + 1
        return [_pattern(p_name, units, readers, reads, shapes, n // 2, part, index) for part, index in parts]
    if any(inputs % n or shapes[weight][axis] % n for (weight, axis), inputs in reads):
        return []
    return [_pattern(p_name, units, readers, reads, shapes, n)]


def _pattern(
    p_name: str,
    units: list[Unit],
    readers: list[tuple[str, nn.Module]],
    reads: list[tuple[Unit, int]],
    shapes: dict[str, torch.Size],
    n: int,
    part: slice = slice(None),
    index: str = "i",
) -> Pattern:
    """``‖P_i‖² − Σ_C ‖C_{:, i}‖²`` for the n units P holds in ``part`` of its unit axis (named ``index`` in i)."""
    kept = [_unit_sums(t, axis, len(shapes[t]), n, part) for t, axis in units]
    read = [_unit_sums(weight, axis, len(shapes[weight]), n) for (weight, axis), _ in reads]
    terms = " + ".join(_term(t, axis, len(shapes[t]), n, 1, index) for t, axis in units)
    # entries along the axis per unit: m per channel flattened, or depthwise
    taken = " − ".join(_term(w, axis, len(shapes[w]), n, shapes[w][axis] // n) for (w, axis), _ in reads)
    law = lambda p, kept=kept, read=read: sum(part(p) for part in kept) - sum(part(p) for part in read)  # noqa: E731
    # the family of head_laws' blocks of the same rows against the same columns (whose widest passing block is kept)
    family = ("rescale", p_name, 0 if part == slice(None) else index, "+".join(name for name, _ in readers), 0)
    return Pattern(family, 1, f"for i in 0..{n - 1}: {terms} − {taken}", law)


def rescaling_laws(
    model: nn.Module,
    input_shape: tuple[int, ...] | None = None,
    *,
    inputs: torch.Tensor | None = None,
    seed: int = 0,
) -> tuple[dict[str, Law], str]:
    """The laws :func:`proposed_laws` proposes for ``model``, and those of the blocks of units of
    :mod:`conslaw_lite.head_laws` (an attention's heads written with ``nn.Linear``), that their check keeps (on
    standard-normal inputs of ``input_shape``, or on the first of ``inputs``, e.g. token ids: 2 to 8 inputs, as many as
    give ``CHECK_ROWS`` output entries, and that many of their outputs where they have more), and one line saying
    what came of them; any D.

    Examples
    ========
    >>> torch.manual_seed(0) and None
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2)).double()
    >>> laws, outcome = rescaling_laws(net, (3,))
    >>> list(laws), outcome
    (['for i in 0..3: ‖0.weight[i, :]‖² + 0.bias[i]² − ‖2.weight[:, i]‖²'], '4 laws of rescaled units checked, 1 \
proposed pattern failed its check (a unit or block the layers between do not keep); not counted: other laws may exist')
    """
    x = example_inputs(model, input_shape, inputs)
    layers, flows = _called(model, x)
    shapes = _trainable(model)
    trained = [(n, m) for n, m in layers if all(p.requires_grad for p in m.parameters(recurse=False))]
    reached = reached_columns(model, x, trained, flows)
    proposed = unit_patterns(layers, shapes, flows) + head_patterns(trained, flows, reached)
    proposed += parameter_head_patterns(trained)
    coupled = training_batch_norms(model)
    with evaluating(model):
        for norm in coupled:
            norm.train()  # as the model trains: the check's outputs are the batch's
        problem = problem_of(model, None)
        for norm in training_batch_norms(problem.module):  # the float64 copy: no running statistics to update
            norm.track_running_stats = False
        probe = x[:1].double() if x.is_floating_point() else x[:1]  # the problem computes in float64
        theta = problem.flatten(dict(model.named_parameters()))
        one = 0 if coupled else checked_outputs(problem, theta, probe).numel()
        samples = COUPLED_SAMPLES if coupled else min(8, max(2, math.ceil(CHECK_ROWS / max(one, 1))))
        given = None if inputs is None else inputs[:samples]
        tied = _tied(model)
        units = [(name, kept) for name, module in trained for kept in shift_units(name, module, shapes)]
        units = [(name, kept) for name, kept in units if not any(t in tied for t, _ in kept)]  # θ's names only
        proposed += shift_patterns(problem, theta, x[:samples] if coupled else probe, units)
        if not proposed:
            return {}, "no two layers in a row whose units could be rescaled, no layer whose outputs' shift is ignored"
        proposed = _by_first_names(proposed, tied)

        def passing(laws: dict[str, Law], rows: int) -> set[str]:
            residuals, _ = law_residuals(
                problem, laws, input_shape, given, seed, samples, rows, rank=False, pieces=not coupled
            )
            return {key for key, r in residuals.items() if r <= RESIDUAL_TOL}

        chosen = choose(proposed, lambda laws: passing(laws, CORNER_ROWS))
        screened = {p.key: p.law for p in chosen if p.corners is not None}  # blocks of units: chosen by their corners
        passed = passing({p.key: p.law for p in chosen if p.corners is None}, CHECK_ROWS)
        passed |= passing(screened, BLOCK_ROWS) if screened else set()
    kept = _without_biases_twice(widest([p for p in chosen if p.key in passed]))
    return {p.key: p.law for p in kept}, _outcome(model, proposed, kept, bool(coupled))


def _without_biases_twice(kept: list[Pattern]) -> list[Pattern]:
    """``kept`` but the shift of a vector whose every entry is a kept law (a key bias held in a parameter of its
    own: the sum of its entries would be watched twice)."""
    laws = {p.family[1] for p in kept if p.family[0] == "bias"}
    return [p for p in kept if not (p.family[0] == "shift" and all(t in laws for t, _ in p.family[2:]))]


def _outcome(model: nn.Module, proposed: list[Pattern], kept: list[Pattern], coupled: bool) -> str:
    """The line saying what the check kept: laws of units, of wider blocks, and the families none of whose patterns
    passed."""
    with torch.no_grad():
        p = dict(model.named_parameters())
        units = sum(q.law(p).numel() for q in kept if q.size == 1)
        shifts = sum(q.law(p).numel() for q in kept if q.family[0] == "shift")
        blocks = sum(q.law(p).numel() for q in kept if q.size != 1 and q.family[0] != "shift")
    outcome = f"{units} laws of rescaled units"
    if blocks:
        outcome += f" and {blocks} of blocks of units (an attention's heads: k × k laws, key biases)"
    if shifts:
        outcome += f" and {shifts} linear laws of shifts a softmax or a norm ignores"
    outcome += " checked"
    if coupled:
        outcome += f" on batches of {COUPLED_SAMPLES} (its BatchNorms train with batch statistics)"
    failed = len({layers_of(q.family) for q in proposed}) - len({layers_of(q.family) for q in kept})
    if failed:
        patterns, their = ("pattern", "its") if failed == 1 else ("patterns", "their")
        outcome += (
            f", {failed} proposed {patterns} failed {their} check (a unit or block the layers between do not keep)"
        )
    return outcome + ("; not counted: other laws may exist" if kept else "")


def training_batch_norms(model: nn.Module) -> list[nn.Module]:
    """The BatchNorms of ``model`` in train mode, normalizing with batch statistics.

    Examples
    ========
    >>> net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU())
    >>> len(training_batch_norms(net)), training_batch_norms(net.eval())
    (1, [])
    """
    return [m for m in model.modules() if m.training and is_batch_norm(m)]
