"""A module of one's own from a file: ``FILE.py:FACTORY`` → ``FACTORY()``, its inputs, its errors named by line.

``certify --module FILE.py:FACTORY`` imports ``FILE.py`` and calls ``FACTORY()`` for the module (or takes
``FACTORY`` as it is when the file built it: ``model = Net()``). When the
file also defines ``inputs(n)`` (:data:`INPUTS`), that function gives the counter its ``n`` inputs (a tensor
whose first dimension is at least ``n``): the way to count a model whose inputs are not standard-normal floats.

What the user's file raises (a syntax error, a failed import, a factory that raises) is neither bad input
to the CLI nor a bug of ours: :class:`UserCodeError`, one line ``FILE:LINE: Error: message``, its own exit code.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from conslaw_lite.counting.embedding_rows import EMBEDDINGS
from conslaw_lite.counting.problem import TOKEN_IDS
from conslaw_lite.user_inputs import inputs_needed, token_inputs

INPUTS = "inputs"  # the name of the optional ``inputs(n)`` function of a module file


class UserCodeError(Exception):
    """The user's module file failed (syntax, import, factory, ``inputs(n)``): the message is ``FILE:LINE: ...``."""


@dataclass(frozen=True)
class UserModule:
    """``FACTORY()`` of a module file, and the file's ``inputs(n)`` function when it defines one."""

    model: nn.Module
    path: Path
    make_inputs: Callable[[int], torch.Tensor] | None

    def inputs(self, input_shape: tuple[int, ...] | None, vocab: int | None, seed: int = 0) -> torch.Tensor | None:
        """The counter's inputs: token ids of ``0..vocab−1`` when ``vocab`` is given, else the file's ``inputs(n)``,
        else ``None`` (standard-normal inputs of ``input_shape``, drawn by the counter). A file's ``inputs(n)`` and
        an ``input_shape`` or ``vocab`` given too is an error: one of them would be dropped unsaid.

        ``n`` is as many inputs as the counter would draw (:func:`~conslaw_lite.user_inputs.inputs_needed`).
        """
        self._given_once(input_shape, vocab)
        if vocab is not None:
            one = token_inputs(input_shape, vocab, 1, seed)  # a vocab below 1 refused before the rows are compared
            _check_vocab(self.model, vocab)
            return token_inputs(input_shape, vocab, inputs_needed(self.model, one), seed)
        if self.make_inputs is None:
            return None
        n = inputs_needed(self.model, self._call_inputs(1))
        return self._call_inputs(n)

    def samples(
        self, n: int, input_shape: tuple[int, ...] | None, vocab: int | None, seed: int = 0
    ) -> torch.Tensor | None:
        """``n`` inputs to train on: token ids of ``0..vocab−1`` with ``vocab``, else the file's ``inputs(n)``, else
        ``None`` (standard-normal inputs of ``input_shape``, drawn by the trainer). :meth:`inputs` checks ``vocab``
        against the model's embedding."""
        self._given_once(input_shape, vocab)
        if vocab is not None:
            return token_inputs(input_shape, vocab, n, seed)
        return None if self.make_inputs is None else self._call_inputs(n)[:n]

    def _given_once(self, input_shape: tuple[int, ...] | None, vocab: int | None) -> None:
        """A file's ``inputs(n)`` and an ``input_shape`` or ``vocab`` given too is an error: one of them would be
        dropped unsaid; ``vocab`` needs ``input_shape``."""
        if self.make_inputs is not None and (vocab is not None or input_shape is not None):
            given = "--input-shape" if vocab is None else "--input-dtype long --vocab"
            raise ValueError(
                f"{self.path} defines {INPUTS}(n), which gives the model's inputs, and {given} gives them too: leave "
                f"out one of the two"
            )
        if vocab is not None and input_shape is None:
            raise ValueError("--vocab needs --input-shape: the token ids of one input, e.g. --input-shape 5")

    def located(self, err: ValueError, tokens: bool) -> str:
        """``err``'s message, after the line of the file where it surfaced (the model's ``forward``, say), and for
        a model with an ``nn.Embedding`` given float inputs, how to give it token ids."""
        where = user_line(err, self.path)
        text = f"{where}: {err}" if where else str(err)
        embeds = any(isinstance(m, EMBEDDINGS) for m in self.model.modules())
        if not tokens and self.make_inputs is None and embeds:  # the CLI's way to give them, not the API's
            text = text.replace(TOKEN_IDS, "") + "; a model of token ids takes --input-dtype long --vocab V"
        if tokens and not embeds:
            text += "; --input-dtype long gives the model token ids, and it has no nn.Embedding to read them"
        return text

    def _call_inputs(self, n: int) -> torch.Tensor:
        x = _run(self.path, f"{INPUTS}({n})", lambda: self.make_inputs(n))
        if isinstance(x, (tuple, list)) and x and all(isinstance(t, torch.Tensor) for t in x):
            raise ValueError(
                f"{self.path}: {INPUTS}({n}) returned a {type(x).__name__} of tensors: a model takes one tensor here; "
                "wrap a model of several inputs in a module whose forward takes one tensor and splits it"
            )
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or len(x) < n:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{self.path}: {INPUTS}({n}) must return a tensor of ≥ {n} inputs, got {got}")
        return x


def _check_vocab(model: nn.Module, vocab: int) -> None:
    """``--vocab`` against the model's first ``nn.Embedding``: more ids than its rows is an error; fewer, a warning
    (an id never drawn leaves its row free: spurious laws)."""
    name, embedding = next(((n, m) for n, m in model.named_modules() if isinstance(m, EMBEDDINGS)), (None, None))
    if embedding is None:
        return
    rows = embedding.num_embeddings
    if vocab > rows:
        kind = type(embedding).__name__
        raise ValueError(f"--vocab {vocab}: the model's {kind} `{name}` has {rows} rows (ids 0..{rows - 1})")
    if vocab < rows:
        print(
            f"warning: --vocab {vocab} draws ids 0..{vocab - 1} only, but `{name}` has {rows} rows: each row never "
            "read is free, and counts as laws",
            file=sys.stderr,
        )


def load_module(spec: str) -> UserModule:
    r"""``FILE.py:FACTORY`` → ``FACTORY()`` (or ``FACTORY`` itself, an ``nn.Module`` the file builds) and the file's
    ``inputs`` function (``ValueError`` naming what is missing). ``FILE.py`` alone: its ``model``, or the one
    ``nn.Module`` the file builds at its top level.

    Examples
    ========
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp(), "mine.py")
    >>> _ = path.write_text("from torch import nn\n\ndef build():\n    return nn.Linear(3, 2)\n")
    >>> load_module(f"{path}:build").model
    Linear(in_features=3, out_features=2, bias=True)
    >>> _ = path.write_text("from torch import nn\n\nmodel = nn.Linear(3, 2)\n")
    >>> load_module(f"{path}:model").model
    Linear(in_features=3, out_features=2, bias=True)
    >>> load_module(str(path)).model  # the file alone: its model
    Linear(in_features=3, out_features=2, bias=True)
    >>> load_module(f"{path}:missing")
    Traceback (most recent call last):
    ...
    ValueError: ... has no function or nn.Module 'missing'
    >>> _ = path.write_text("def build():\n    raise OSError('no weights file')\n")
    >>> load_module(f"{path}:build")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    conslaw_lite.user_module.UserCodeError: .../mine.py:2: OSError: no weights file (in build())
    """
    path_text, sep, factory_name = spec.rpartition(":")
    if spec.endswith(".py"):  # a folder's name may hold a colon: a/b:c/mine.py is the file itself
        path_text, factory_name = spec, ""
    elif Path(spec).is_dir():
        raise ValueError(f"{spec} is a directory; give the file: FILE.py:FACTORY")
    elif not sep or not path_text or not factory_name:
        raise ValueError(f"a module file is given as FILE.py:FACTORY (or FILE.py, whose model is taken), got {spec!r}")
    path = Path(path_text)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give the file: FILE.py:FACTORY")
    if path.is_file() and path.suffix != ".py":
        raise ValueError(f"{path} is not a Python file: a module file is given as FILE.py:FACTORY")
    if not path.is_file():
        inner, _, _ = path_text.partition(":")
        if inner != path_text and Path(inner).is_file():  # FILE.py:NAME:more: one name after the file
            raise ValueError(f"one name after {inner}: FILE.py:FACTORY, got {spec!r}")
        if path.suffix != ".py" and path.with_suffix(".py").is_file():
            raise ValueError(f"module file not found: {path}; give its file name, {path.with_suffix('.py')}")
        if path.suffix != ".py":  # a dotted import path (torch.nn:Linear), which is not taken
            raise ValueError(f"module file not found: {path}; a module is given by its file, FILE.py:FACTORY")
        raise ValueError(f"module file not found: {path}")
    source = _import(path)
    factory_name = factory_name or _built_model(source, path)
    factory = getattr(source, factory_name, None)
    if isinstance(factory, nn.Module):  # built in the file (``model = Net()``): that module itself
        model = factory
    elif callable(factory):
        _check_no_arguments(factory, factory_name, path)
        model = _run(path, f"{factory_name}()", factory, _defined_at(factory))
    else:
        raise ValueError(f"{path} has no function or nn.Module {factory_name!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"{path}: {factory_name}() returned {type(model).__name__!r}, not an nn.Module")
    make_inputs = getattr(source, INPUTS, None)
    return UserModule(model, path, make_inputs if callable(make_inputs) else None)


def names_a_file(spec: str) -> bool:
    """Whether ``spec`` names a module file, ``FILE.py[:FACTORY]`` (its folders may hold a colon), not an architecture.

    Examples
    ========
    >>> names_a_file("runs/a:b/mine.py:build"), names_a_file("mine.py"), names_a_file("swiglu")
    (True, True, False)
    """
    return spec.endswith(".py") or spec.rpartition(":")[0].endswith(".py")


def _built_model(source: ModuleType, path: Path) -> str:
    """The name of the model a file builds at its top level: ``model``, else its one ``nn.Module``."""
    if isinstance(getattr(source, "model", None), nn.Module):
        return "model"
    built = [name for name, value in vars(source).items() if isinstance(value, nn.Module) and not name.startswith("_")]
    if len(built) == 1:
        return built[0]
    classes = [
        name for name, value in vars(source).items()
        if isinstance(value, type) and issubclass(value, nn.Module) and value.__module__ == source.__name__
    ]  # fmt: skip
    found = f"builds {', '.join(built)}" if built else "builds no nn.Module at its top level"
    found += f" (it defines {', '.join(classes)})" if classes and not built else ""
    raise ValueError(f"{path} {found}: name the model, or the function that builds it, as FILE.py:NAME")


def _import(path: Path) -> ModuleType:
    """The file as a module; its folder goes first on ``sys.path``, as ``python FILE.py`` puts it (its own imports)."""
    module_spec = importlib.util.spec_from_file_location(f"_certify_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"cannot import {path} (is it a .py file?)")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    source = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = source  # as import does: dataclasses and inspect look the module up there
    _run(path, "", lambda: module_spec.loader.exec_module(source))
    return source


def _run(path: Path, what: str, call: Callable, line: int = 0):
    """``call()``, its exception turned into a :class:`UserCodeError` naming the file's line it came from (``line``,
    the function's own, when no frame of the file is in the traceback: a call with the wrong arguments)."""
    try:
        return call()
    except (Exception, SystemExit) as err:  # the user's code: neither bad input to the CLI nor a bug of ours
        where = user_line(err, path) or (f"{path}:{line}" if line else str(path))
        raise UserCodeError(f"{where}: {first_line(err)}" + (f" (in {what})" if what else "")) from err


def _check_no_arguments(factory: Callable, name: str, path: Path) -> None:
    """A ``ValueError`` where ``name()`` cannot be called with no arguments: it is called as it stands."""
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise ValueError(
            f"{path}:{_defined_at(factory)}: {name} needs arguments, and it is called with none: name a function "
            f"that takes none (def {'build' if name == 'make' else 'make'}(): return {name}(...))"
        ) from None
    except ValueError:  # no signature Python can read (a builtin): the call itself will say
        pass


def _defined_at(factory: Callable) -> int:
    """The line a function or class of the file starts at (0 when Python cannot tell)."""
    try:
        return inspect.getsourcelines(factory)[1]
    except (OSError, TypeError):
        return 0


def user_line(err: BaseException, path: Path) -> str:
    """``FILE:LINE`` of the error in the user's file (``FILE`` as given): a syntax error's own line, else the last
    frame in that file of the traceback (of the error or of what caused it); ``""`` when none is.

    Examples
    ========
    >>> user_line(ValueError("not from a file"), Path("mine.py"))
    ''
    """
    if isinstance(err, SyntaxError) and err.filename:
        return f"{path}:{err.lineno}"
    while err is not None:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve() == path.resolve()]
        if frames:
            return f"{path}:{frames[-1].lineno}"
        err = err.__cause__
    return ""


def first_line(err: BaseException) -> str:
    """``Type: the first line of its message``, as an error of the user's file is said in one line.

    Examples
    ========
    >>> first_line(RuntimeError("no batch of 64")), first_line(SystemExit(3))
    ('RuntimeError: no batch of 64', 'SystemExit: the file called sys.exit(3)')
    """
    if isinstance(err, SystemExit):
        return f"SystemExit: the file called sys.exit({err.code!r})"
    text = err.msg if isinstance(err, SyntaxError) else str(err)
    lines = text.strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
