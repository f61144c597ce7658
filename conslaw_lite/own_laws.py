"""The laws of the parts of a model that no registered block covers, found for it: ``Monitor(model, input_shape=...)``.

A registered block (:func:`conslaw_lite.laws.find_blocks`) comes with its closed-form laws. The rest of
the model is cut into *parts* (:mod:`conslaw_lite.model_parts`), and each part is searched with
:func:`~conslaw_lite.find_laws.find_laws` as a function of its own input:

* a module that holds no registered block is one part (a plain MLP is the whole ``nn.Sequential``, so
  the laws that couple its layers, ``‖A[i, :]‖² − ‖C[:, i]‖²``, are found);
* inside an ``nn.Sequential`` that holds registered blocks, consecutive children between them form one part;
* any other module that holds registered blocks is searched whole with its blocks held fixed, when its parameters
  outside them number at most ``SEARCH_MAX_PARAMS`` and all of it at most ``HELD_MAX_PARAMS`` (each search
  runs its forward, blocks included): the laws that couple its children are found there (the ReLU units between
  ``nn.TransformerEncoderLayer``'s ``linear1`` and ``linear2``, a pre-norm's LayerNorm gains against the layer
  that reads them). When it is larger, or called otherwise than on one tensor, or its search is not conclusive,
  its children are walked the same way instead;
* a part over ``SEARCH_MAX_PARAMS`` = 3,072 parameters (a monitor starts before training: ``find_laws``
  takes about a minute there) gets the laws of its rescaled units instead (:mod:`conslaw_lite.rescaling_laws`:
  ``‖P_i‖² − ‖C_{:, i}‖²`` for each two layers its forward calls one after the other, each kept only where its
  check passes, the k × k laws of the heads of an attention written with ``nn.Linear`` layers
  (:mod:`conslaw_lite.head_laws`), and the linear laws of a shift that a softmax or a norm ignores
  (:mod:`conslaw_lite.shift_laws`); in about a second, whatever D: a LeNet, an MNIST MLP of 109,386 parameters), not
  counted, so the outcome says other laws may exist. Where none passes, or ``find_laws`` refuses the part, it is
  searched again in pieces: an ``nn.Sequential`` in windows from one layer with parameters to the next (the laws
  across each hidden layer), any other module child by child.

**Why a part's law is a law of the model.** When the part's parameters θ_P enter the output only
through the part's output g(z; θ_P), then ∇_{θ_P} f = J · ∇_{θ_P} g, so ⟨∇h, ∇_{θ_P} g⟩ = 0 for every
input z of the part gives ⟨∇h, ∇f⟩ = 0. That needs the part to be called once per forward, on one
tensor (with the same other arguments, none of them a tensor: ``is_causal=False``), and its parameters to be
used nowhere else (not tied to another module's, nor to a block's it holds): a part that is not is reported and
not searched. Its blocks' parameters held fixed, a law is found at their present values; the check below takes it
at a random θ too. Laws that couple two parts, or a part and a block, are not found: the report names the parts
that were searched.

**Checked on the whole model.** A layer of a part called from elsewhere, or a weight of it read by another
module's forward (``F.linear(z, self.mlp[2].weight.T)``), breaks that condition where the recorded calls cannot
see it. So every law found is checked on the whole model's gradient, at its θ and at a random θ, on the example
input: ``|⟨∇h, ∇_P⟨a, f⟩⟩| ≤ MODEL_TOL ‖∇h‖ ‖∇_P⟨a, f⟩‖`` for ``MODEL_COTANGENTS`` random a, the gradients taken
on the part's coordinates P. A part whose laws fail is reported and none of its laws are watched.

**Dropout.** A part whose dropouts train is searched with them off (the count needs one deterministic function), and
each law found (or of its rescaled units) is kept only where it holds under the masks they draw in training
(:mod:`conslaw_lite.dropout_masks`); the outcome says how many fail and are left out.

**Time.** The search stops after ``seconds`` (``SEARCH_SECONDS`` = 120 by default: a monitor starts before training
does), within one step of it (:mod:`conslaw_lite.time_limit`); a tiny MobileNetV3 of 1,169 parameters, read at many
positions, takes minutes. A part whose search stopped there keeps the laws of the blocks it solved before (each one
checked as always; the outcome says how many of N were found), a part whose count stopped has none. A search still
running after ``SAY_AFTER`` seconds says so in one line.

**Inputs.** One forward of the model on the example input (in eval mode: no running statistic moves) records each
part's input. A model with no forward of its own (a ``LightningModule`` whose ``training_step`` calls
``self.model(x)``) is not called: each child that takes the example input is, and searched as above; its laws are
laws of training as long as ``training_step`` reads its parameters only by calling it. A part is searched on
standard-normal inputs of that shape, over every scale (:func:`~conslaw_lite.counting.count_laws`' draws), or, on
token ids, on every id of its first ``nn.Embedding`` (:func:`~conslaw_lite.user_inputs.token_inputs`). Only a
conclusive search's laws, each of which passed :func:`~conslaw_lite.counting.check_laws`, are watched; laws that are
no quadratic polynomial are counted, not found, and the report says how many.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from torch.func import vjp

from conslaw_lite import dropout_masks as masks
from conslaw_lite.config import evaluating
from conslaw_lite.counting import RESIDUAL_TOL
from conslaw_lite.counting.check import LawGradients, law_reads
from conslaw_lite.counting.exact_ops import quiet_vmap
from conslaw_lite.counting.layer_kinds import is_batch_norm
from conslaw_lite.counting.problem import outputs_note, problem_of, token_ids_hint
from conslaw_lite.find_laws import MAX_PARAMS, FoundLaws, find_laws
from conslaw_lite.laws import Law, find_blocks
from conslaw_lite.model_parts import Cut, cuts, lacks_forward, layers, part_module, searchable
from conslaw_lite.rescaling_laws import rescaling_laws, training_batch_norms
from conslaw_lite.seeding import Stream, generator
from conslaw_lite.time_limit import OutOfTime, said_if_long, time_left, time_limit
from conslaw_lite.user_inputs import example_inputs, part_inputs

# A monitor starts before training does: a part over this many parameters is not searched whole (find_laws takes
# about a minute at D = 3,072, a 32-64-16 MLP on 2 cores, and its count grows as D³), but in pieces.
SEARCH_MAX_PARAMS = 3072
HELD_MAX_PARAMS = 4 * SEARCH_MAX_PARAMS  # a module searched with its blocks held: its forward runs them too
SEARCH_SECONDS = 120.0  # the search stops after this long: a monitor on a model of many or slow parts starts anyway
SAY_AFTER = 5.0  # seconds of search after which a line says it is running (and for how long it may)
SPENT = (
    "not searched: the seconds for the search were spent on the parts before it (own_laws' seconds=, Monitor's "
    "search_seconds=)"
)
LONGER = (
    "own_laws' seconds= (Monitor's search_seconds=) gives it longer; find_laws(part, input_shape) finds its laws "
    "without a limit, and Monitor(model, laws=...) watches them"
)
STOPPED = f"not searched in full: its count stopped at the seconds a monitor gives it at its start; {LONGER}"
NO_LAWS = "no laws (N = 0: none exist)"
# a part of a model: none as a function of its own input, while laws that couple it to the rest may exist
NO_LAWS_OF_ITS_OWN = "no laws of its own (N = 0 as a function of its input)"
# Looser than RESIDUAL_TOL, which the part's own check met: the rest of a model may compute in float32 (round-off
# about 1e-7), while a law that something outside its part breaks is off by far more (1e-3 and up at a random θ).
MODEL_TOL = 1e-6
MODEL_COTANGENTS = 8  # random ⟨a, f⟩ whose gradients every law's gradient must be orthogonal to


@dataclass(frozen=True)
class Part:
    """One part of a model searched for its laws, and what came of it.

    ``path`` is the module's name (``"encoder.1-3"`` for children 1 to 3 of ``encoder``), ``layers`` its
    classes, ``outcome`` one line; ``laws`` (by ``"path:law"``) holds the laws watched: none unless the
    search was conclusive.
    """

    path: str
    layers: str
    num_params: int
    outcome: str
    laws: dict[str, Law] = field(default_factory=dict)
    cut: Cut = field(default=Cut(()), repr=False)  # the modules it is made of, and the blocks it held fixed
    batch_coupled: bool = False  # its laws were checked with its BatchNorms in train mode: they hold in both modes
    dropout_masked: bool = False  # its laws were found with its dropouts off and checked under their masks

    def __str__(self) -> str:
        return f"`{self.path or '(the model)'}` ({self.layers}, {self.num_params} parameters): {self.outcome}"


@dataclass(frozen=True)
class OwnLaws:
    """The parts of a model that no registered block covers, the laws found for each, and the time it took.

    Examples
    ========
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0) and None
    >>> mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> own = own_laws(mlp, input_shape=(3,))
    >>> print(own.parts[0])
    `(the model)` (Linear-ReLU-Linear, 26 parameters): 4 quadratic laws found; N = 4: the list is complete
    >>> list(own.laws)
    ['for i in 0..3: ‖0.weight[i, :]‖² + 0.bias[i]² − ‖2.weight[:, i]‖²']
    """

    parts: tuple[Part, ...]
    seconds: float
    searched: bool  # False when no input was given: the parts are listed, not searched
    note: str = ""  # for a model with no forward of its own: which of its children were searched
    beside_blocks: bool = False  # the model has registered blocks, whose laws with a part's are not searched

    @property
    def laws(self) -> dict[str, Law]:
        """Every law watched, over all parts."""
        return {key: law for part in self.parts for key, law in part.laws.items()}

    def breaks_in_train(self, name: str, layer: nn.Module) -> bool:
        """Whether module ``name`` (``layer``, which computes otherwise in train mode) lies inside a part whose laws
        are watched, and were found with it in eval mode: not a BatchNorm of a part checked with batch statistics."""
        batch_norm, dropout = is_batch_norm(layer), masks.is_dropout(layer)
        watched = [part for part in self.parts if part.laws and part.cut.holds(name)]
        return any(not (batch_norm and part.batch_coupled or dropout and part.dropout_masked) for part in watched)

    def __str__(self) -> str:
        parts = f"{len(self.parts)} part{'' if len(self.parts) == 1 else 's'} outside the registered blocks"
        head = f"searched {parts} for their laws, in {self.seconds:.1f} s" if self.searched else parts
        lines = [*([self.note] if self.note else []), f"{head}:", *(f"  {part}" for part in self.parts)]
        if self.searched and (len(self.parts) > 1 or self.beside_blocks):
            lines.append("  (each part alone: laws that couple two parts, or a part and a block, are not searched)")
        return "\n".join(lines)


@quiet_vmap()  # torch's note on vmap's speed, at each of the search's many calls
def own_laws(
    model: nn.Module,
    input_shape: tuple[int, ...] | int | None = None,
    inputs: torch.Tensor | None = None,
    seed: int = 0,
    seconds: float = SEARCH_SECONDS,
) -> OwnLaws:
    """Find the laws of every part of ``model`` outside the registered blocks (module docstring: how, and why valid).

    ``input_shape`` (one input, no batch dimension) or ``inputs`` (a batch) is what the model takes; without
    either the parts are listed, each with the outcome "not searched". Another example is in :class:`OwnLaws`.
    The search stops after ``seconds``: the part searched then is listed as not searched in full, the parts after
    it as not searched, each saying so.

    Examples
    ========
    The toy block ``a·b·x`` is registered (its law a² − b² is known); the affine map after it, ``w·z + c``, has none:

    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> model = nn.Sequential(ToyProduct(a=2.0, b=1.0), nn.Linear(1, 1)).double()
    >>> print(own_laws(model).parts[0])
    `1` (Linear, 2 parameters): not searched: no input_shape or inputs given
    >>> print(own_laws(model, input_shape=(1,)).parts[0])
    `1` (Linear, 2 parameters): no laws of its own (N = 0 as a function of its input)

    A module with no forward of its own (a ``LightningModule`` whose ``training_step`` calls ``self.net(x)``): the
    laws of its children that take the input.

    >>> class Lit(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.net = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    >>> own = own_laws(Lit(), input_shape=(3,))
    >>> print(own.note)
    `Lit` has no forward of its own: searched its child `net`, which takes inputs of shape (3,) (its laws are \
laws of training as long as the training step reads its parameters only by calling it)
    >>> print(own.parts[0])
    `net` (Linear-ReLU-Linear, 11 parameters): 2 quadratic laws found; N = 2: the list is complete
    """
    start = time.monotonic()
    blocks = [block.path for block in find_blocks(model)]
    top = cuts(model, blocks=blocks)
    finest = [c for cut in top for c in cut.finest()]
    if input_shape is None and inputs is None:
        listed = [_unsearched(model, c, "not searched: no input_shape or inputs given") for c in finest if not c.own]
        return OwnLaws(tuple(listed + [_own_parameters(model, c) for c in finest if c.own]), 0.0, searched=False)
    if all(c.own for c in finest):  # nothing outside the registered blocks but their modules' own parameters
        return OwnLaws(tuple(_own_parameters(model, c) for c in finest), 0.0, searched=True)
    example = example_inputs(model, input_shape, inputs)
    try:
        entries, skipped, note = {"": (model, _record(model, example))}, [], ""
    except NotImplementedError:  # the model's own forward is missing (_record turns any other error into ValueError)
        entries, skipped, note = _children_taking(model, example)
    parts, waiting = [], f"own_laws: searching the laws of `{type(model).__name__}` (stops after {seconds:g} s at most)"
    spent = time.monotonic() - start  # recording the inputs: part of the seconds
    with said_if_long(waiting, SAY_AFTER - spent), time_limit(seconds, since=start):
        for entry, (host, recorded) in entries.items():  # host: the entry, named as in the model (the model for "")
            below = cuts(model, entry, blocks) if entry else top
            searched = [p for cut in below for p in _search(host, cut, recorded, example, seed)]
            searched.sort(key=lambda p: p.cut.own)
            alone = [p for p in searched if not p.cut.held]  # a part with blocks held was checked when searched
            checked = dict(zip(map(id, alone), _on_the_model(host, alone, example, seed)))
            parts += [checked.get(id(p), p) for p in searched]
    return OwnLaws(tuple(parts + skipped), time.monotonic() - start, True, note, bool(blocks))


def uncovered(model: nn.Module) -> list[str]:
    """The names of the modules (or runs, ``"1-3"``) of ``model`` that hold parameters outside every registered block.

    Examples
    ========
    >>> from conslaw_lite.families.ffn.block import SwiGLU
    >>> uncovered(nn.Sequential(SwiGLU(4, 3, 4), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)))
    ['1-3']
    """
    return [c.label for cut in cuts(model) for c in cut.finest() if not c.own]


def missing_input_message(model: nn.Module) -> str:
    """What a monitor says when no block of ``model`` is registered and nothing tells it what the model takes.

    Examples
    ========
    >>> print(missing_input_message(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))))
    Monitor: no registered block covers `(the model)` (Linear-ReLU-Linear), so its laws must be found: \
give input_shape=(...) (one input, without the batch dimension) or inputs= (a batch of inputs); or watch \
laws of your own with laws= (e.g. find_laws(model, input_shape).laws)
    """
    parts = ", ".join(f"`{part.path or '(the model)'}` ({part.layers})" for part in own_laws(model).parts)
    return (
        f"Monitor: no registered block covers {parts}, so its laws must be found: give input_shape=(...) (one input, "
        "without the batch dimension) or inputs= (a batch of inputs); or watch laws of your own with laws= "
        "(e.g. find_laws(model, input_shape).laws)"
    )


# ---------------------------------------------------------------- one forward: each module's input


@dataclass
class _Call:
    calls: int = 0
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def _record(model: nn.Module, x: torch.Tensor, what: str = "the model") -> dict[str, _Call]:
    """Each module's calls in one forward on ``x`` (eval mode, no gradient) and the arguments of its first call.

    A model that fails on ``x`` is bad input (``ValueError``, naming it as ``what``), except one that has no forward
    of its own: torch's ``NotImplementedError``, for the caller to search its children instead."""
    each = {id(m): _Call() for m in model.modules()}  # a module used in two places is one module, called twice
    calls = {name: each[id(m)] for name, m in model.named_modules(remove_duplicate=False)}

    def hook(call: _Call):
        def record(_module, args, kwargs):
            call.calls += 1
            if call.calls == 1:
                call.args, call.kwargs = args, kwargs

        return record

    handles = [m.register_forward_pre_hook(hook(each[id(m)]), with_kwargs=True) for m in model.modules()]
    try:
        with evaluating(model), torch.no_grad():
            model(x)
    except Exception as err:  # the user's model: its error is bad input, named with the shape that caused it
        if lacks_forward(model, err):
            raise
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        batch = " (the first dimension of inputs= counts the inputs)" if x.dim() == 1 else ""
        failed = f"{type(err).__name__}: {first_line}"
        hint = token_ids_hint(x, model.modules())
        raise ValueError(f"{what} fails on inputs of shape {tuple(x.shape[1:])}{batch} ({failed}){hint}") from err
    finally:
        for handle in handles:
            handle.remove()
    return calls


def _children_taking(model: nn.Module, x: torch.Tensor) -> tuple[dict[str, tuple[nn.Module, dict]], list[Part], str]:
    """For a model with no forward of its own: each child with parameters that takes ``x`` (as a module named as in
    the model, and its calls on ``x``), the others as parts not searched, and the note that says so; a
    ``ValueError`` when no child takes ``x``."""
    entries, skipped, why = {}, [], []
    for name, child in model.named_children():
        if not any(True for _ in child.parameters()):
            continue
        host = part_module(model, Cut((name,)))
        try:
            entries[name] = (host, _record(host, x, "it"))
        except ValueError as err:  # a child that takes other inputs (a decoder's), or has no forward either
            skipped.append(_unsearched(model, Cut((name,)), f"not searched: {err}"))
            why.append(f"`{name}`: {err}")
    kind, shape = type(model).__name__, tuple(x.shape[1:])
    if not entries:
        children = "; ".join(why) if why else "it has no child with parameters"
        raise ValueError(
            f"`{kind}` has no forward of its own, and no child of it takes inputs of shape {shape}, so no laws can be "
            f"found for it: {children}"
        )
    names = ", ".join(f"`{name}`" for name in entries)
    one = len(entries) == 1
    child, takes, its, it = ("child", "takes", "its", "it") if one else ("children", "take", "their", "them")
    note = (
        f"`{kind}` has no forward of its own: searched its {child} {names}, which {takes} inputs of shape {shape} "
        f"({its} laws are laws of training as long as the training step reads {its} parameters only by calling {it})"
    )
    return entries, skipped, note


# ---------------------------------------------------------------- searching one part


def _search(model: nn.Module, cut: Cut, recorded: dict[str, _Call], x: torch.Tensor, seed: int) -> list[Part]:
    """The part's laws (``find_laws``), or why it was not searched; a part refused for its size, in pieces."""
    if cut.own:
        return [_own_parameters(model, cut)]
    if time_left() <= 0:  # own_laws' time_limit
        return [_unsearched(model, cut, SPENT)]
    if cut.held:
        return _search_held(model, cut, recorded, x, seed)
    why = _unsearchable(model, cut, recorded)
    if why:
        return [_unsearched(model, cut, f"not searched: {why}")]
    rescaled = None
    try:
        rescaled = _rescaled(model, cut, recorded, seed)
        if rescaled is not None and rescaled[0].laws:
            return [rescaled[0]]
        found = _find(model, cut, recorded, seed)
    except ValueError as err:  # refused: its size, its mode, its dtype (the message says which)
        why = str(err).splitlines()[0]
        if rescaled is not None:  # tried first: say what came of it
            why += f"; tried first: {rescaled[1]}"
        refused = _unsearched(model, cut, f"not searched: {why}")
        return [refused, *(p for piece in _pieces(model, cut) for p in _search(model, piece, recorded, x, seed))]
    except OutOfTime:
        return [_unsearched(model, cut, STOPPED)]
    return [_found(model, cut, *found)]


def _search_held(model: nn.Module, cut: Cut, recorded: dict[str, _Call], x: torch.Tensor, seed: int) -> list[Part]:
    """A module with blocks, searched whole with them held fixed, when that gives its laws (kept by the whole model
    at a random θ too: the blocks' values may add laws, a rank-2 SwiGLU's output leaving directions unread) or
    shows there are none; else its children's parts, which then say for themselves what came of them."""
    total = sum(p.numel() for p in model.get_submodule(cut.members[0]).parameters())
    if total <= HELD_MAX_PARAMS and not _unsearchable(model, cut, recorded):
        try:
            (part,) = _on_the_model(model, [_found(model, cut, *_find(model, cut, recorded, seed))], x, seed)
        except ValueError:  # its size, or what find_laws refuses: its children say what came of them
            part = None
        except OutOfTime:  # the seconds spent here, not on the parts listed before it: say so before its children
            stopped = _unsearched(model, cut, f"{STOPPED} (searched whole, its blocks held fixed)")
            return [stopped, *(p for c in cut.instead for p in _search(model, c, recorded, x, seed))]
        if part is not None and (part.laws or part.outcome.startswith(NO_LAWS_OF_ITS_OWN)):
            return [part]
    return [p for c in cut.instead for p in _search(model, c, recorded, x, seed)]


def _find(model: nn.Module, cut: Cut, recorded: dict[str, _Call], seed: int) -> tuple[FoundLaws, dict | None]:
    """``find_laws`` on the part, as a function of its recorded input (refusals are ``ValueError``), stopped at the
    own_laws' time_limit (``OutOfTime``); with dropouts that train, on the part with them off, and each law's
    residual under their masks (:mod:`conslaw_lite.dropout_masks`), else ``None``."""
    call = recorded[cut.members[0]]
    module = searchable(part_module(model, cut, (call.args[1:], call.kwargs)))
    _check_size(module)
    shape, inputs = part_inputs(module, call.args[0].cpu(), seed)
    masked = bool(masks.training_dropouts(module))
    with masks.FunctionalDropoutsOff() as off:
        found = find_laws(masks.dropouts_off(module) if masked else module, shape, inputs=inputs, seed=seed)
    masked = masked or off.called
    return found, masks.masked_residuals(module, found.laws, shape, inputs, seed) if masked and found.laws else None


def _rescaled(model: nn.Module, cut: Cut, recorded: dict[str, _Call], seed: int) -> tuple[Part, str] | None:
    """A part over ``SEARCH_MAX_PARAMS``: the laws of its rescaled units that pass their check
    (:mod:`conslaw_lite.rescaling_laws`), not counted, and the check's own line; ``None`` for a part a monitor
    searches."""
    call = recorded[cut.members[0]]
    module = part_module(model, cut, (call.args[1:], call.kwargs))
    D = sum(p.numel() for p in module.parameters() if p.requires_grad)
    coupled = bool(training_batch_norms(module))  # no count applies: checked on batches, whatever D
    if D <= SEARCH_MAX_PARAMS and not coupled:
        return None
    module = searchable(module)
    shape, inputs = part_inputs(module, call.args[0].cpu(), seed)
    shape = None if inputs is not None else shape
    laws, outcome = rescaling_laws(module, shape, inputs=inputs, seed=seed)
    dropouts = bool(masks.training_dropouts(module) and laws)  # checked in eval mode: now under their masks
    laws, note = _under_masks(laws, masks.masked_residuals(module, laws, shape, inputs, seed) if dropouts else None)
    base, outcome = _unsearched(model, cut, ""), outcome + note
    why = (
        f" (D = {D:,} is over the {SEARCH_MAX_PARAMS:,} a monitor searches whole; find_laws(part, input_shape) finds "
        f"and counts its laws up to {MAX_PARAMS:,} parameters)"
    )
    if coupled and D <= SEARCH_MAX_PARAMS:
        why = " (a count is of one input's function; model.eval() counts the eval-mode one)"
    keyed = {f"{base.path}:{name}" if base.path else name: law for name, law in laws.items()}
    return replace(base, outcome=outcome + why, laws=keyed, batch_coupled=coupled, dropout_masked=dropouts), outcome


def _unsearchable(model: nn.Module, cut: Cut, recorded: dict[str, _Call]) -> str:
    """Why the part's laws would not be laws of the model (module docstring), or ``""``."""
    for name in cut.members:
        if recorded[name].calls != 1:
            return f"`{name}` is called {recorded[name].calls} times in one forward, not once"
    first = recorded[cut.members[0]]
    tensors = [a for a in (*first.args, *first.kwargs.values()) if isinstance(a, torch.Tensor)]
    who = cut.members[0] or "the model"
    if len(tensors) != 1:
        return f"`{who}` is called with {len(tensors)} tensor arguments, not one"
    if not first.args or not isinstance(first.args[0], torch.Tensor):
        keyword = next(k for k, v in first.kwargs.items() if isinstance(v, torch.Tensor))
        return f"`{who}` is called with its tensor as a keyword argument ({keyword}=...), not as its first argument"
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    for shared in names.values():
        mine, outside = [n for n in shared if cut.holds(n)], [n for n in shared if not cut.holds(n)]
        if mine and outside:
            return f"its parameter `{mine[0]}` is also `{outside[0]}`"
    return ""


def _check_size(module: nn.Module) -> None:
    D = sum(p.numel() for p in module.parameters())
    if D > SEARCH_MAX_PARAMS:
        raise ValueError(
            f"D = {D:,} parameters, over the {SEARCH_MAX_PARAMS:,} a monitor searches at its start (find_laws would "
            "take minutes); find_laws(part, input_shape) finds them, and Monitor(model, laws=...) watches them"
        )


def _pieces(model: nn.Module, cut: Cut) -> list[Cut]:
    """A refused part in smaller ones: Sequential windows between consecutive layers with parameters, or children."""
    members = list(cut.members)
    if len(members) == 1:
        module = model.get_submodule(members[0])
        prefix = f"{members[0]}." if members[0] else ""
        children = [f"{prefix}{name}" for name, _ in module.named_children()]
        if not isinstance(module, nn.Sequential):
            return [Cut((c,)) for c in children if any(True for _ in model.get_submodule(c).parameters())]
        members = children
    with_params = [i for i, name in enumerate(members) if any(True for _ in model.get_submodule(name).parameters())]
    if len(with_params) < 3:  # a window would be the whole part again
        return []
    return [Cut(tuple(members[i : j + 1])) for i, j in zip(with_params, with_params[1:])]


def _unsearched(model: nn.Module, cut: Cut, outcome: str) -> Part:
    count = sum(p.numel() for p in part_module(model, cut).parameters() if p.requires_grad)  # what trains
    return Part(cut.label, layers(model, cut), count, outcome, {}, cut)


def _own_parameters(model: nn.Module, cut: Cut) -> Part:
    """A module's own parameters beside the registered blocks below it: its own forward reads them, no submodule."""
    count = sum(p.numel() for p in model.get_submodule(cut.label).parameters(recurse=False))
    outcome = "not searched: read by the module's own forward, beside its registered blocks"
    return Part(cut.label, layers(model, cut), count, outcome, {}, cut)


def _found(model: nn.Module, cut: Cut, found: FoundLaws, masked: dict[str, float] | None = None) -> Part:
    """The part with the outcome of ``find_laws`` and, when conclusive and checked, its laws; ``masked``: each law's
    residual under the masks of the part's dropouts, found with them off (watched within ``MASK_TOL``)."""
    base = _unsearched(model, cut, "")
    residual = found.check.max_residual
    # the note on several outputs is the whole model's: the rest of a model reads all of a part's outputs
    several = f"; {outputs_note(found.count.outputs)}" if found.count.outputs and not base.path else ""
    message = found.verdict + several
    if not found.conclusive:  # no certificate: the laws found are not watched (a count alone may still be given)
        outcome = f"{message}; none watched"
    elif residual > RESIDUAL_TOL:
        outcome = f"{message}; none watched: check_laws residual {residual:.1e} > {RESIDUAL_TOL:g}"
    elif found.count.conclusive and found.count.num_laws == 0:
        outcome = (NO_LAWS_OF_ITS_OWN if base.path or cut.held else NO_LAWS) + several
    else:  # conclusive laws, each passing check_laws; when the count is inconclusive the message says so
        outcome = message + (f"; {LONGER}" if found.stopped else "")
    watched = found.conclusive and residual <= RESIDUAL_TOL
    kept, note = _under_masks(found.laws, masked)
    laws = {f"{base.path}:{name}" if base.path else name: law for name, law in kept.items()} if watched else {}
    return replace(base, outcome=outcome + note, laws=laws, dropout_masked=masked is not None)


def _under_masks(laws: dict[str, Law], masked: dict[str, float] | None) -> tuple[dict[str, Law], str]:
    """The laws that hold under the masks of the part's dropouts (``masked``: each law's residual there; None: no
    dropout trains), and what the outcome says of it."""
    if masked is None or not laws:
        return laws, ""
    kept = masks.holding(laws, masked)
    under, failed = f"under their masks in training ({masks.MASK_DRAWS} draws at two θ)", len(laws) - len(kept)
    if not failed:
        return kept, f"; found with its dropouts off, and each holds {under}"
    return kept, f"; found with its dropouts off: {failed} of the {len(laws)} laws listed fail {under} and are left out"


# ---------------------------------------------------------------- the laws found, checked on the whole model


def _on_the_model(model: nn.Module, parts: list[Part], x: torch.Tensor, seed: int) -> list[Part]:
    """The parts, with none of a part's laws watched where one of them is not a law of the whole model."""
    watched = [part for part in parts if part.laws]
    if not watched:
        return parts
    try:
        why = {
            path: f"the whole model does not keep them (residual {residual:.1e}): something outside "
            f"`{path or 'the model'}` calls its layers or reads its parameters"
            for path, residual in _model_residuals(model, watched, x, seed).items()
            if residual > MODEL_TOL
        }
    except (ValueError, TypeError, RuntimeError) as err:  # the user's model: never watched unchecked
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        why = dict.fromkeys((part.path for part in watched), f"not checked on the whole model: {first}")
    return [
        replace(part, laws={}, outcome=f"{part.outcome}; none watched: {why[part.path]}") if part.path in why else part
        for part in parts
    ]


def _model_residuals(model: nn.Module, parts: list[Part], x: torch.Tensor, seed: int) -> dict[str, float]:
    """Per part, the largest ``|⟨∇h, ∇_P⟨a, f(x)⟩⟩| / (‖∇h‖ ‖∇_P⟨a, f(x)⟩‖)`` over its law entries h, random a and two
    θ (the model's own and a random one), the gradients taken on the part's coordinates P."""
    host = searchable(model)
    with evaluating(host):  # as the parts were searched: no dropout, no running statistics
        problem = problem_of(host, None)
    x = x.cpu().double() if x.is_floating_point() else x.cpu()
    gen = generator(seed, Stream.MODEL_CHECK)
    coordinates = dict(problem.split(torch.arange(problem.num_params)))
    names = {part.path: [n for n in problem.shapes if part.cut.holds(n)] for part in parts}
    columns = {path: torch.cat([coordinates[n] for n in part_names]) for path, part_names in names.items()}
    worst = dict.fromkeys(names, 0.0)
    for theta in (problem.flatten(dict(host.named_parameters())), problem.random_theta(gen)):
        out, pull = vjp(problem.outputs(x), theta)
        if not torch.isfinite(out).all():  # a random θ where the model overflows: its own θ is still checked
            continue
        a = torch.randn(MODEL_COTANGENTS, out.numel(), generator=gen, dtype=torch.float64)
        g = torch.stack([pull(row)[0] for row in a])  # (cotangents, D); vmap would warn on some attention kernels
        values = problem.unflatten(theta)
        for part in parts:
            P = columns[part.path]
            read, sizes = names[part.path], [values[n].numel() for n in names[part.path]]
            h = _entries(part.laws, values, read)
            grad_h = LawGradients(h, theta[P], False, gen, sizes=sizes, reads=law_reads(part.laws, values, read))
            worst[part.path] = max(worst[part.path], float(grad_h.cosines(g[:, P])[0].max()))
    return worst


def _entries(laws: dict[str, Law], values: dict[str, torch.Tensor], names: list[str]):
    """The part's coordinates ↦ every entry of its laws, the rest of θ held at ``values``."""
    sizes = [values[n].numel() for n in names]

    def h(sub: torch.Tensor) -> torch.Tensor:
        p = dict(values) | {n: t.reshape(values[n].shape) for n, t in zip(names, sub.split(sizes))}
        return torch.cat([torch.as_tensor(law(p)).reshape(-1) for law in laws.values()])

    return h
