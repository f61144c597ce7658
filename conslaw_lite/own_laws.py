"""The laws of the parts of a model that no registered block covers, found for it: ``Monitor(model, input_shape=...)``.

A registered block (:func:`conslaw_lite.laws.find_blocks`) comes with its closed-form laws. The rest of
the model is cut into *parts*, and each part is searched with :func:`~conslaw_lite.find_laws.find_laws`
as a function of its own input:

* a module that holds no registered block is one part (a plain MLP is the whole ``nn.Sequential``, so
  the laws that couple its layers, ``‖A[i, :]‖² − ‖C[:, i]‖²``, are found);
* inside a module that holds registered blocks, consecutive children of an ``nn.Sequential`` between
  them form one part; the children of any other module are walked one by one;
* a part over ``SEARCH_MAX_PARAMS`` = 3,072 parameters (a monitor starts before training: ``find_laws``
  takes about a minute there), or that ``find_laws`` refuses, is searched again in pieces: an
  ``nn.Sequential`` in windows from one layer with parameters to the next (the laws across each hidden
  layer), any other module child by child.

**Why a part's law is a law of the model.** When the part's parameters θ_P enter the output only
through the part's output g(z; θ_P), then ∇_{θ_P} f = J · ∇_{θ_P} g, so ⟨∇h, ∇_{θ_P} g⟩ = 0 for every
input z of the part gives ⟨∇h, ∇f⟩ = 0. That needs the part to be called once per forward, on one
tensor, and its parameters to be used nowhere else (not tied to another module's): a part that is not
is reported and not searched. Laws that couple two parts, or a part and a block (a SwiGLU's C with a
linear layer right after it), are not found: the report names the parts that were searched.

**Checked on the whole model.** A layer of a part called from elsewhere, or a weight of it read by another
module's forward (``F.linear(z, self.mlp[2].weight.T)``), breaks that condition where the recorded calls cannot
see it. So every law found is checked on the whole model's gradient, at its θ and at a random θ, on the example
input: ``|⟨∇h, ∇_P⟨a, f⟩⟩| ≤ MODEL_TOL ‖∇h‖ ‖∇_P⟨a, f⟩‖`` for ``MODEL_COTANGENTS`` random a, the gradients taken
on the part's coordinates P. A part whose laws fail is reported and none of its laws are watched.

**Inputs.** One forward of the model on the example input (in eval mode: no running statistic moves)
records each part's input. A part is searched on standard-normal inputs of that shape, over every
scale (:func:`~conslaw_lite.counting.count_laws`' draws), or, on token ids, on every id of its first
``nn.Embedding`` (:func:`~conslaw_lite.user_inputs.token_inputs`). Only a conclusive search's laws,
each of which passed :func:`~conslaw_lite.counting.check_laws`, are watched; laws that are no quadratic
polynomial are counted, not found, and the report says how many.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from torch.func import jacrev, vjp

from conslaw_lite.config import evaluating, model_device
from conslaw_lite.counting import RESIDUAL_TOL
from conslaw_lite.counting.check import cosine_residuals
from conslaw_lite.counting.problem import problem_of
from conslaw_lite.find_laws import find_laws
from conslaw_lite.laws import Law, find_blocks
from conslaw_lite.seeding import Stream, generator
from conslaw_lite.user_inputs import inputs_needed, token_inputs

MAX_LAYERS_SHOWN = 6  # classes named in a part's description before "…"
# A monitor starts before training does: a part over this many parameters is not searched whole (find_laws takes
# about a minute at D = 3,072, a 32-64-16 MLP on 2 cores, and its count grows as D³), but in pieces.
SEARCH_MAX_PARAMS = 3072
# Looser than RESIDUAL_TOL, which the part's own check met: the rest of a model may compute in float32 (round-off
# about 1e-7), while a law that something outside its part breaks is off by far more (1e-3 and up at a random θ).
MODEL_TOL = 1e-6
MODEL_COTANGENTS = 8  # random ⟨a, f⟩ whose gradients every law's gradient must be orthogonal to


class _Chain(nn.Module):
    """Modules of a model, registered under their names in it, applied one after the other.

    Its parameter names are the model's own (``encoder.1.weight``), so the laws found for it read the model's θ.
    """

    def __init__(self, named: list[tuple[str, nn.Module]]) -> None:
        super().__init__()
        self.order = [name for name, _ in named]
        for name, module in named:
            *parents, last = name.split(".")
            holder: nn.Module = self
            for parent in parents:
                if parent not in holder._modules:
                    holder.add_module(parent, nn.Module())
                holder = holder._modules[parent]
            holder.add_module(last, module)
        self.training = named[0][1].training  # the mode of what it holds; .train() would switch theirs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.order:
            x = self.get_submodule(name)(x)
        return x


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
    members: tuple[str, ...] = ()  # the module names the part is made of

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

    @property
    def laws(self) -> dict[str, Law]:
        """Every law watched, over all parts."""
        return {key: law for part in self.parts for key, law in part.laws.items()}

    def covers(self, name: str) -> bool:
        """Whether module ``name`` lies inside a part whose laws are watched."""
        return any(part.laws and any(_inside(name, m) for m in part.members) for part in self.parts)

    def __str__(self) -> str:
        parts = f"{len(self.parts)} part{'' if len(self.parts) == 1 else 's'} outside the registered blocks"
        head = f"searched {parts} for their laws, in {self.seconds:.1f} s" if self.searched else parts
        lines = [f"{head}:", *(f"  {part}" for part in self.parts)]
        if self.searched and len(self.parts) > 1:
            lines.append("  (each part alone: laws that couple two parts, or a part and a block, are not searched)")
        return "\n".join(lines)


def own_laws(
    model: nn.Module,
    input_shape: tuple[int, ...] | int | None = None,
    inputs: torch.Tensor | None = None,
    seed: int = 0,
) -> OwnLaws:
    """Find the laws of every part of ``model`` outside the registered blocks (module docstring: how, and why valid).

    ``input_shape`` (one input, no batch dimension) or ``inputs`` (a batch) is what the model takes; without
    either the parts are listed, each with the outcome "not searched". Another example is in :class:`OwnLaws`.

    Examples
    ========
    The toy block ``a·b·x`` is registered (its law a² − b² is known); the affine map after it, ``w·z + c``, has none:

    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> model = nn.Sequential(ToyProduct(a=2.0, b=1.0), nn.Linear(1, 1)).double()
    >>> print(own_laws(model).parts[0])
    `1` (Linear, 2 parameters): not searched: no input_shape or inputs given
    >>> print(own_laws(model, input_shape=(1,)).parts[0])
    `1` (Linear, 2 parameters): no laws (N = 0: none exist)
    """
    start = time.perf_counter()
    parts, direct = _parts(model)
    own = [_own_parameters(model, name) for name in direct]
    if input_shape is None and inputs is None:
        listed = [_unsearched(model, members, "not searched: no input_shape or inputs given") for members in parts]
        return OwnLaws(tuple(listed + own), 0.0, searched=False)
    if not parts:  # nothing outside the registered blocks but their modules' own parameters: no forward to run
        return OwnLaws(tuple(own), 0.0, searched=True)
    example = _example(model, input_shape, inputs)
    recorded = _record(model, example)
    found = [p for members in parts for p in _search(model, members, recorded, seed)]
    return OwnLaws(tuple(_on_the_model(model, found, example, seed) + own), time.perf_counter() - start, True)


def uncovered(model: nn.Module) -> list[str]:
    """The names of the modules (or runs, ``"1-3"``) of ``model`` that hold parameters outside every registered block.

    Examples
    ========
    >>> from conslaw_lite.families.ffn.block import SwiGLU
    >>> uncovered(nn.Sequential(SwiGLU(4, 3, 4), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)))
    ['1-3']
    """
    return [_label(members) for members in _parts(model)[0]]


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


# ---------------------------------------------------------------- cutting the model into parts


def _inside(name: str, path: str) -> bool:
    """Whether module ``name`` is module ``path`` or lies below it (every module lies below the root, ``""``)."""
    return path == "" or name == path or name.startswith(path + ".")


def _parts(model: nn.Module) -> tuple[list[list[str]], list[str]]:
    """Each part as the names of its modules (one module, or consecutive children of an ``nn.Sequential``), and the
    modules whose own parameters sit beside registered blocks below them (read by their own forward: no part)."""
    known = [block.path for block in find_blocks(model)]
    parts: list[list[str]] = []
    direct: list[str] = []
    _walk(model, "", known, parts, direct)
    return parts, direct


def _has_params(module: nn.Module, recurse: bool = True) -> bool:
    return any(True for _ in module.parameters(recurse=recurse))


def _walk(model: nn.Module, name: str, known: list[str], parts: list[list[str]], direct: list[str]) -> None:
    module = model.get_submodule(name)
    if any(_inside(name, path) for path in known):
        return
    if not any(_inside(path, name) for path in known):  # no block below: one part, if it has parameters
        parts.extend([[name]] if _has_params(module) else [])
        return
    direct.extend([name] if _has_params(module, recurse=False) else [])
    run: list[str] = []
    for child_name, _ in module.named_children():
        full = f"{name}.{child_name}" if name else child_name
        if isinstance(module, nn.Sequential) and not any(_inside(path, full) for path in known):
            run.append(full)  # consecutive children between blocks: one part
            continue
        parts.extend([run] if any(_has_params(model.get_submodule(n)) for n in run) else [])
        run = []
        _walk(model, full, known, parts, direct)
    parts.extend([run] if any(_has_params(model.get_submodule(n)) for n in run) else [])


def _label(members: list[str]) -> str:
    """``"encoder.3"`` for one module, ``"encoder.1-3"`` for children 1 to 3 of ``encoder``."""
    if len(members) == 1:
        return members[0]
    parent, _, first = members[0].rpartition(".")
    last = members[-1].rpartition(".")[2]
    return f"{parent}.{first}-{last}" if parent else f"{first}-{last}"


def _layers(modules: list[nn.Module]) -> str:
    """The classes of the leaf modules, in order: ``"Linear-ReLU-Linear"``."""
    leaves = [type(m).__name__ for module in modules for m in module.modules() if not list(m.children())]
    if len(leaves) > MAX_LAYERS_SHOWN:
        leaves = [*leaves[:MAX_LAYERS_SHOWN], "…"]
    return "-".join(leaves) if leaves else type(modules[0]).__name__


def _part_module(model: nn.Module, members: list[str]) -> nn.Module:
    """The part as a module whose parameter names are the model's."""
    if members == [""]:
        return model
    return _Chain([(name, model.get_submodule(name)) for name in members])


def _unsearched(model: nn.Module, members: list[str], outcome: str) -> Part:
    modules = [model.get_submodule(name) for name in members]
    count = sum(p.numel() for p in _part_module(model, members).parameters() if p.requires_grad)  # what trains
    return Part(_label(members), _layers(modules), count, outcome, {}, tuple(members))


def _own_parameters(model: nn.Module, name: str) -> Part:
    """A module's own parameters beside the registered blocks below it: its own forward reads them, no submodule."""
    module = model.get_submodule(name)
    count = sum(p.numel() for p in module.parameters(recurse=False))
    outcome = "not searched: read by the module's own forward, beside its registered blocks"
    return Part(name, f"{type(module).__name__}'s own parameters", count, outcome)


# ---------------------------------------------------------------- one forward: each module's input


@dataclass
class _Call:
    calls: int = 0
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def _example(model: nn.Module, input_shape: tuple[int, ...] | None, inputs: torch.Tensor | None) -> torch.Tensor:
    """A batch of two inputs: ``inputs[:2]``, or standard normal of ``input_shape`` in the model's dtype and device."""
    if inputs is not None:
        if input_shape is not None:
            raise ValueError("give input_shape (one input's shape) or inputs (a batch of inputs), not both")
        if not isinstance(inputs, torch.Tensor) or inputs.dim() < 1 or len(inputs) < 1:
            raise ValueError(f"inputs must be a batch of inputs (a tensor with a batch dimension), got {inputs!r}")
        return inputs[:2]
    shape = (input_shape,) if isinstance(input_shape, int) else tuple(input_shape)
    if not shape or any(not isinstance(n, int) or n < 1 for n in shape):
        raise ValueError(f"input_shape must be positive integers (one input, no batch dimension), got {input_shape}")
    param = next(model.parameters())
    dtype = param.dtype if param.is_floating_point() else torch.float64
    return torch.randn(2, *shape, dtype=dtype, device=param.device)


def _record(model: nn.Module, x: torch.Tensor) -> dict[str, _Call]:
    """Each module's calls in one forward on ``x`` (eval mode, no gradient) and the arguments of its first call."""
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
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        batch = " (the first dimension of inputs= counts the inputs)" if x.dim() == 1 else ""
        raise ValueError(f"the model rejects inputs of shape {tuple(x.shape[1:])}{batch}: {first_line}") from err
    finally:
        for handle in handles:
            handle.remove()
    return calls


# ---------------------------------------------------------------- searching one part


def _search(model: nn.Module, members: list[str], recorded: dict[str, _Call], seed: int) -> list[Part]:
    """The part's laws (``find_laws``), or why it was not searched; a part refused for its size, in pieces."""
    why = _unsearchable(model, members, recorded)
    if why:
        return [_unsearched(model, members, f"not searched: {why}")]
    x = recorded[members[0]].args[0].cpu()
    module = _part_module(model, members)
    if model_device(module) != torch.device("cpu"):  # searched on the CPU; its laws read θ by name, on any device
        module = copy.deepcopy(module).cpu()
    try:
        _check_size(module)
        shape, inputs = _part_inputs(module, x, seed)
        found = find_laws(module, shape, inputs=inputs, seed=seed)
    except ValueError as err:  # refused: its size, its mode, its dtype (the message says which)
        pieces = _pieces(model, members)
        refused = _unsearched(model, members, f"not searched: {str(err).splitlines()[0]}")
        return [refused, *(p for piece in pieces for p in _search(model, piece, recorded, seed))]
    return [_found(model, members, found)]


def _unsearchable(model: nn.Module, members: list[str], recorded: dict[str, _Call]) -> str:
    """Why the part's laws would not be laws of the model (module docstring), or ``""``."""
    for name in members:
        if recorded[name].calls != 1:
            return f"`{name}` is called {recorded[name].calls} times in one forward, not once"
    first = recorded[members[0]]
    if len(first.args) != 1 or first.kwargs or not isinstance(first.args[0], torch.Tensor):
        return f"`{members[0] or 'the model'}` takes {len(first.args) + len(first.kwargs)} arguments, not one tensor"
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    prefixes = members if members != [""] else []
    for name, _ in _part_module(model, members).named_parameters():
        outside = [n for n in names.get(id(model.get_parameter(name)), []) if not any(_inside(n, m) for m in prefixes)]
        if outside and prefixes:
            return f"its parameter `{name}` is also `{outside[0]}`"
    return ""


def _check_size(module: nn.Module) -> None:
    D = sum(p.numel() for p in module.parameters())
    if D > SEARCH_MAX_PARAMS:
        raise ValueError(
            f"D = {D:,} parameters, over the {SEARCH_MAX_PARAMS:,} a monitor searches at its start (find_laws would "
            "take minutes); find_laws(part, input_shape) finds them, and Monitor(model, laws=...) watches them"
        )


def _part_inputs(module: nn.Module, x: torch.Tensor, seed: int) -> tuple[tuple[int, ...], torch.Tensor | None]:
    """The input shape the part is searched on, or (for token ids) the inputs themselves."""
    shape = tuple(x.shape[1:])
    if x.is_floating_point():
        return shape, None
    embedding = next((m for m in module.modules() if isinstance(m, nn.Embedding)), None)
    if embedding is None:
        raise ValueError(f"its input is {x.dtype} and it has no nn.Embedding to take the vocabulary from")
    example = token_inputs(shape, embedding.num_embeddings, 1, seed)
    return shape, token_inputs(shape, embedding.num_embeddings, inputs_needed(module, example), seed)


def _pieces(model: nn.Module, members: list[str]) -> list[list[str]]:
    """A refused part in smaller ones: Sequential windows between consecutive layers with parameters, or children."""
    if len(members) == 1:
        module = model.get_submodule(members[0])
        prefix = f"{members[0]}." if members[0] else ""
        children = [f"{prefix}{name}" for name, _ in module.named_children()]
        if not isinstance(module, nn.Sequential):
            return [[c] for c in children if any(True for _ in model.get_submodule(c).parameters())]
        members = children
    with_params = [i for i, name in enumerate(members) if any(True for _ in model.get_submodule(name).parameters())]
    if len(with_params) < 3:  # a window would be the whole part again
        return []
    return [members[i : j + 1] for i, j in zip(with_params, with_params[1:])]


def _found(model: nn.Module, members: list[str], found) -> Part:
    """The part with the outcome of ``find_laws`` and, when conclusive and checked, its laws."""
    base = _unsearched(model, members, "")
    residual = found.check.max_residual
    if not found.conclusive:  # no certificate: the laws found are not watched (a count alone may still be given)
        outcome = f"{found.message}; none watched"
    elif residual > RESIDUAL_TOL:
        outcome = f"{found.message}; none watched: check_laws residual {residual:.1e} > {RESIDUAL_TOL:g}"
    elif found.count.conclusive and found.count.num_laws == 0:
        outcome = "no laws (N = 0: none exist)"
    else:  # conclusive laws, each passing check_laws; when the count is inconclusive the message says so
        outcome = found.message
    watched = found.conclusive and residual <= RESIDUAL_TOL
    laws = {f"{base.path}:{name}" if base.path else name: law for name, law in found.laws.items()} if watched else {}
    return Part(base.path, base.layers, base.num_params, outcome, laws, tuple(members))


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
    host = model if model_device(model) in (None, torch.device("cpu")) else copy.deepcopy(model).cpu()
    with evaluating(host):  # as the parts were searched: no dropout, no running statistics
        problem = problem_of(host, None)
    x = x.cpu().double() if x.is_floating_point() else x.cpu()
    gen = generator(seed, Stream.MODEL_CHECK)
    coordinates = dict(problem.split(torch.arange(problem.num_params)))
    names = {part.path: [n for n in problem.shapes if any(_inside(n, m) for m in part.members)] for part in parts}
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
            grad_h = jacrev(_entries(part.laws, values, names[part.path]))(theta[P])  # (law entries, |P|)
            worst[part.path] = max(worst[part.path], float(cosine_residuals(grad_h, g[:, P])[0].max()))
    return worst


def _entries(laws: dict[str, Law], values: dict[str, torch.Tensor], names: list[str]):
    """The part's coordinates ↦ every entry of its laws, the rest of θ held at ``values``."""
    sizes = [values[n].numel() for n in names]

    def h(sub: torch.Tensor) -> torch.Tensor:
        p = dict(values) | {n: t.reshape(values[n].shape) for n, t in zip(names, sub.split(sizes))}
        return torch.cat([torch.as_tensor(law(p)).reshape(-1) for law in laws.values()])

    return h
