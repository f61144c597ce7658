"""A model cut into the parts a monitor searches for their laws: the modules outside its registered blocks.

A registered block (:func:`conslaw_lite.laws.find_blocks`) comes with its closed-form laws; the rest of the model
is cut into :class:`Cut` s, walked from the top:

* a module that holds no registered block is one cut (a plain MLP is the whole ``nn.Sequential``);
* inside an ``nn.Sequential`` that holds registered blocks, consecutive children between them form one cut;
* any other module that holds registered blocks (a transformer block of one's own, ``nn.TransformerEncoderLayer``)
  is one cut *with its blocks held fixed*: its parameters outside them are the coordinates, and the blocks'
  parameters stay at their values (buffers of a copy). The laws that couple its children are searched there: the
  ReLU units between ``linear1`` and ``linear2``, a LayerNorm's gains against the layer that reads them. The cuts
  of its children, walked the same way, are what is searched instead when it cannot be searched whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from conslaw_lite.config import model_device
from conslaw_lite.laws import find_blocks
from conslaw_lite.wrapped_modules import module_copy

MAX_LAYERS_SHOWN = 6  # classes named in a part's description before "…"


def inside(name: str, path: str) -> bool:
    """Whether module ``name`` is module ``path`` or lies below it (every module lies below the root, ``""``).

    Examples
    ========
    >>> inside("encoder.1.weight", "encoder.1"), inside("encoder.10", "encoder.1"), inside("head", "")
    (True, False, True)
    """
    return path == "" or name == path or name.startswith(path + ".")


@dataclass(frozen=True)
class Cut:
    """Modules searched as one part: ``members`` (one module, or consecutive children of an ``nn.Sequential``).

    ``held``: the registered blocks inside, held fixed; ``instead``: the cuts searched when this one is not
    searched whole (its children's); ``own``: a module's own parameters beside the blocks below it, read by its
    own forward, listed and never searched alone.
    """

    members: tuple[str, ...]
    held: tuple[str, ...] = ()
    instead: tuple[Cut, ...] = field(default=(), repr=False)
    own: bool = False

    def holds(self, name: str) -> bool:
        """Whether parameter or module ``name`` is one of the cut's coordinates (inside it, outside its blocks).

        Examples
        ========
        >>> cut = Cut(("layer",), held=("layer.attn",))
        >>> cut.holds("layer.ffn.0.weight"), cut.holds("layer.attn.q.weight"), cut.holds("head.weight")
        (True, False, False)
        """
        return any(inside(name, m) for m in self.members) and not any(inside(name, b) for b in self.held)

    @property
    def label(self) -> str:
        """``"encoder.3"`` for one module, ``"encoder.1-3"`` for children 1 to 3 of ``encoder``."""
        if len(self.members) == 1:
            return self.members[0]
        parent, _, first = self.members[0].rpartition(".")
        last = self.members[-1].rpartition(".")[2]
        return f"{parent}.{first}-{last}" if parent else f"{first}-{last}"

    def finest(self) -> list[Cut]:
        """The cuts listed when nothing is searched: a cut with blocks held stands for its children's."""
        return [c for cut in self.instead for c in cut.finest()] if self.held else [self]


def cuts(model: nn.Module, under: str = "", blocks: list[str] | None = None) -> list[Cut]:
    """The cuts of ``model`` (module docstring), from the top, or from its module ``under`` (named as in ``model``);
    ``blocks``: the paths of its registered blocks, where the caller has them (:func:`~conslaw_lite.laws.find_blocks`).

    Examples
    ========
    >>> from conslaw_lite.families.ffn.block import SwiGLU
    >>> [c.label for c in cuts(nn.Sequential(SwiGLU(4, 3, 4), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)))]
    ['1-3']
    >>> layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    >>> (whole,) = cuts(layer)
    >>> whole.held, [c.label for c in whole.instead]
    (('self_attn',), ['linear1', 'linear2', 'norm1', 'norm2'])
    >>> [c.members for c in cuts(nn.Sequential(nn.Linear(4, 5), nn.Sequential(nn.Linear(5, 2))), under="1")]
    [('1',)]
    """
    return _walk(model, under, [block.path for block in find_blocks(model)] if blocks is None else blocks)


def _has_params(module: nn.Module, recurse: bool = True) -> bool:
    return any(True for _ in module.parameters(recurse=recurse))


def _walk(model: nn.Module, name: str, known: list[str]) -> list[Cut]:
    module = model.get_submodule(name)
    if any(inside(name, path) for path in known):
        return []
    if not any(inside(path, name) for path in known):  # no block below: one cut, if it has parameters
        return [Cut((name,))] if _has_params(module) else []
    found = [Cut((name,), own=True)] if _has_params(module, recurse=False) else []
    run: list[str] = []

    def close_run() -> None:
        found.extend([Cut(tuple(run))] if any(_has_params(model.get_submodule(n)) for n in run) else [])
        run.clear()

    for child_name, _ in module.named_children():
        full = f"{name}.{child_name}" if name else child_name
        if isinstance(module, nn.Sequential) and not any(inside(path, full) for path in known):
            run.append(full)  # consecutive children between blocks: one cut
            continue
        close_run()
        found.extend(_walk(model, full, known))
    close_run()
    if isinstance(module, nn.Sequential) or not found:  # a Sequential's runs already join what is consecutive
        return found
    held = tuple(path for path in known if inside(path, name) and path != name)
    return [Cut((name,), held=held, instead=tuple(found))]


def lacks_forward(model: nn.Module, err: BaseException) -> bool:
    """Whether ``err`` is torch's for ``model`` itself having no forward: ``nn.Module``'s placeholder ran for it, not
    for a module it calls (a ``LightningModule`` whose ``training_step`` calls ``self.model(x)`` has none).

    Examples
    ========
    >>> holder, x = nn.Module(), torch.ones(1, 2)
    >>> holder.net = nn.Linear(2, 1)
    >>> try:
    ...     holder(x)
    ... except NotImplementedError as err:
    ...     lacks_forward(holder, err), lacks_forward(holder.net, err)
    (True, False)
    """
    tb = err.__traceback__ if isinstance(err, NotImplementedError) else None
    while tb is not None:
        if tb.tb_frame.f_code is nn.Module.forward.__code__ and tb.tb_frame.f_locals.get("self") is model:
            return True
        tb = tb.tb_next
    return False


def layers(model: nn.Module, cut: Cut) -> str:
    """The classes of the cut's leaf modules outside its blocks, in order: ``"Linear-ReLU-Linear"``; a module with
    parameters of its own beside its children is named too (its law may read them: ``s² − ‖W‖²`` for ``s · W x``).

    Examples
    ========
    >>> layers(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)), Cut(("",)))
    'Linear-ReLU-Linear'
    >>> class Scaled(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.s, self.lin = nn.Parameter(torch.ones(())), nn.Linear(2, 3)
    >>> layers(Scaled(), Cut(("",)))
    'Scaled-Linear'
    """
    if cut.own:
        return f"{type(model.get_submodule(cut.members[0])).__name__}'s own parameters"
    named = [
        (".".join(filter(None, (m, n))), leaf)
        for m in cut.members
        for n, leaf in model.get_submodule(m).named_modules()
    ]
    owns = [(n, m) for n, m in named if not list(m.children()) or next(m.parameters(recurse=False), None) is not None]
    leaves = [type(leaf).__name__ for n, leaf in owns if cut.holds(n)]  # with modules of parameters of their own
    if len(leaves) > MAX_LAYERS_SHOWN:
        leaves = [*leaves[:MAX_LAYERS_SHOWN], "…"]
    shown = "-".join(leaves) if leaves else type(model.get_submodule(cut.members[0])).__name__
    blocks = len(cut.held)
    return f"{shown} around {blocks} registered block{'' if blocks == 1 else 's'}" if blocks else shown


class Chain(nn.Module):
    """Modules of a model, registered under their names in it, applied one after the other.

    Its parameter names are the model's own (``encoder.1.weight``), so the laws found for it read the model's θ.
    ``extra``: the positional arguments after the input and the keyword arguments the first module is called with
    (the model's own call passed them: ``is_causal=False``).

    Examples
    ========
    >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    >>> chain = Chain([("1", model[1]), ("2", model[2])])
    >>> [name for name, _ in chain.named_parameters()]
    ['2.weight', '2.bias']
    """

    def __init__(self, named: list[tuple[str, nn.Module]], extra: tuple[tuple, dict] = ((), {})) -> None:
        super().__init__()
        self._order, self._extra = [name for name, _ in named], extra  # not names a model's modules take (`extra`)
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
        args, kwargs = self._extra
        for index, name in enumerate(self._order):
            x = self.get_submodule(name)(x, *args, **kwargs) if index == 0 else self.get_submodule(name)(x)
        return x


def part_module(model: nn.Module, cut: Cut, extra: tuple[tuple, dict] = ((), {})) -> nn.Module:
    """The cut as a module whose parameters are its coordinates, named as in the model.

    With blocks held, it is a copy of the module whose blocks' parameters are buffers (the model is untouched).

    Examples
    ========
    >>> layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    >>> (whole,) = cuts(layer)
    >>> sorted({name.split(".")[0] for name, _ in part_module(layer, whole).named_parameters()})
    ['linear1', 'linear2', 'norm1', 'norm2']
    """
    if not cut.held:
        if list(cut.members) == [""] and not any(extra):
            return model
        return Chain([(name, model.get_submodule(name)) for name in cut.members], extra)
    (name,) = cut.members
    held = module_copy(model.get_submodule(name))
    for block in cut.held:
        below = held.get_submodule(block[len(name) + 1 :] if name else block)
        for path, p in list(below.named_parameters()):
            owner_path, _, last = path.rpartition(".")
            owner = below.get_submodule(owner_path)
            del owner._parameters[last]
            owner.register_buffer(last, p.detach())
    if name == "" and not any(extra):
        return held
    return Chain([(name, held)], extra)


def searchable(module: nn.Module) -> nn.Module:
    """``module`` as a part is searched: on the CPU (its laws read θ by name, on any device), and a float16 or bfloat16
    one as its float64 copy: the laws of its exact function (training rounds θ at each step, which ε then shows).

    Examples
    ========
    >>> net = nn.Linear(2, 1)
    >>> searchable(net) is net, searchable(net.bfloat16()).weight.dtype
    (True, torch.float64)
    """
    low = any(p.dtype in (torch.float16, torch.bfloat16) for p in module.parameters())
    if model_device(module) in (None, torch.device("cpu")) and not low:
        return module
    moved = module_copy(module).cpu()
    return moved.to(torch.float64) if low else moved
