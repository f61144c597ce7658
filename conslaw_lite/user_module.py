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
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

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
        else ``None`` (standard-normal inputs of ``input_shape``, drawn by the counter).

        ``n`` is as many inputs as the counter would draw (:func:`~conslaw_lite.user_inputs.inputs_needed`).
        """
        if vocab is not None:
            if input_shape is None:
                raise ValueError("--vocab needs --input-shape: the token ids of one input, e.g. --input-shape 5")
            one = token_inputs(input_shape, vocab, 1, seed)
            return token_inputs(input_shape, vocab, inputs_needed(self.model, one), seed)
        if self.make_inputs is None:
            return None
        n = inputs_needed(self.model, self._call_inputs(1))
        return self._call_inputs(n)

    def _call_inputs(self, n: int) -> torch.Tensor:
        x = _run(self.path, f"{INPUTS}({n})", lambda: self.make_inputs(n))
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or len(x) < n:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"--module: {self.path}: {INPUTS}({n}) must return a tensor of ≥ {n} inputs, got {got}")
        return x


def load_module(spec: str) -> UserModule:
    r"""``FILE.py:FACTORY`` → ``FACTORY()`` (or ``FACTORY`` itself, an ``nn.Module`` the file builds) and the file's
    ``inputs`` function (``ValueError`` naming what is missing).

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
    >>> load_module(f"{path}:missing")
    Traceback (most recent call last):
    ...
    ValueError: --module: ... has no function or nn.Module 'missing'
    >>> _ = path.write_text("def build():\n    raise OSError('no weights file')\n")
    >>> load_module(f"{path}:build")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    conslaw_lite.user_module.UserCodeError: .../mine.py:2: OSError: no weights file (in build())
    """
    path_text, sep, factory_name = spec.rpartition(":")
    if not sep or not path_text or not factory_name:
        raise ValueError(f"--module must be FILE.py:FACTORY, got {spec!r}")
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"--module: file not found: {path}")
    source = _import(path)
    factory = getattr(source, factory_name, None)
    if isinstance(factory, nn.Module):  # built in the file (``model = Net()``): that module itself
        model = factory
    elif callable(factory):
        model = _run(path, f"{factory_name}()", factory)
    else:
        raise ValueError(f"--module: {path} has no function or nn.Module {factory_name!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"--module: {factory_name}() returned a {type(model).__name__}, not an nn.Module")
    make_inputs = getattr(source, INPUTS, None)
    return UserModule(model, path, make_inputs if callable(make_inputs) else None)


def _import(path: Path) -> ModuleType:
    module_spec = importlib.util.spec_from_file_location(f"_certify_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"--module: cannot import {path} (is it a .py file?)")
    source = importlib.util.module_from_spec(module_spec)
    _run(path, "", lambda: module_spec.loader.exec_module(source))
    return source


def _run(path: Path, what: str, call: Callable):
    """``call()``, its exception turned into a :class:`UserCodeError` naming the file's line it came from."""
    try:
        return call()
    except Exception as err:  # the user's code: neither bad input to the CLI nor a bug of ours
        raise UserCodeError(_where(err, path) + f": {_first_line(err)}" + (f" (in {what})" if what else "")) from err


def _where(err: Exception, path: Path) -> str:
    """``FILE:LINE`` of the error: a syntax error's own line, else the traceback's last frame in the user's file."""
    if isinstance(err, SyntaxError) and err.filename:
        return f"{err.filename}:{err.lineno}"
    own = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve() == path.resolve()]
    return f"{path}:{own[-1].lineno}" if own else str(path)


def _first_line(err: Exception) -> str:
    text = err.msg if isinstance(err, SyntaxError) else str(err)
    lines = text.strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
