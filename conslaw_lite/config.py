"""One scale setting for the whole book, and the device to run on.

Every notebook asks :func:`scale` for its sizes, so the same logic runs small in
CI and on a laptop CPU, and larger on a GPU (Colab or a lent accelerator).
Only sizes change with the scale, never the code path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import TypeVar

import torch

SCALES = ("ci", "cpu", "gpu")
T = TypeVar("T")


def device(name: str | torch.device | None = None) -> torch.device:
    """The device to train on: ``name`` if given, else ``cuda`` when a GPU is visible, else ``cpu``.

    The one place the book, the tests and the CLI choose a device; a CUDA device that is
    not there is refused here, not at the first tensor that lands on it.

    Examples
    ========
    >>> device().type in ("cpu", "cuda")
    True
    >>> device("cpu")
    device(type='cpu')
    >>> device("gpu0")
    Traceback (most recent call last):
    ...
    ValueError: device 'gpu0' is not a device torch knows (cpu, cuda, cuda:1, ...): ...
    """
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(name)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device {name!r} is not a device torch knows (cpu, cuda, cuda:1, ...): {err}") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but no CUDA GPU is visible; use the cpu")
    return chosen


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """``model`` in eval mode inside the block, every module's own mode restored after (``.train()`` would set one
    mode for all).

    Examples
    ========
    >>> net = torch.nn.Sequential(torch.nn.Dropout(), torch.nn.Linear(1, 1).eval())
    >>> with evaluating(net):
    ...     net.training, net[0].training
    (False, False)
    >>> net.training, net[0].training, net[1].training
    (True, True, False)
    """
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def model_device(model: torch.nn.Module) -> torch.device | None:
    """The one device all of ``model``'s parameters and buffers are on (``None`` if it has none).

    Examples
    ========
    >>> model_device(torch.nn.Linear(2, 1))
    device(type='cpu')
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.Linear(1, 1, device="meta"))
    >>> model_device(model)
    Traceback (most recent call last):
    ...
    ValueError: the model's tensors are on several devices (cpu, meta); move it to one with model.to(device)
    """
    devices = {t.device for t in (*model.parameters(), *model.buffers())}
    if len(devices) > 1:
        names = ", ".join(sorted(str(d) for d in devices))
        raise ValueError(f"the model's tensors are on several devices ({names}); move it to one with model.to(device)")
    return next(iter(devices), None)


def dtype_for(scale_name: str) -> torch.dtype:
    """The training dtype of a scale: float32 at ``gpu`` (a GPU's fast path), float64 on the CPU scales.

    float64 keeps drifts of 1e-12 visible on the CPU scales; laws and their drift are evaluated
    in float64 at every scale (:func:`conslaw_lite.flows.train`, :class:`conslaw_lite.monitor.Monitor`).

    Examples
    ========
    >>> dtype_for("ci"), dtype_for("gpu")
    (torch.float64, torch.float32)
    """
    Scale(scale_name)  # validates the name
    return torch.float32 if scale_name == "gpu" else torch.float64


@dataclass(frozen=True)
class Scale:
    """A named scale; :meth:`pick` chooses the size that goes with it.

    Examples
    ========
    >>> Scale("ci").pick(ci=10, cpu=100, gpu=1000)
    10
    >>> Scale("gpu").pick(ci=10, cpu=100)  # gpu falls back to the cpu size
    100
    """

    name: str

    def __post_init__(self) -> None:
        if self.name not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.name!r}")

    def pick(self, *, ci: T, cpu: T | None = None, gpu: T | None = None) -> T:
        """The size for this scale: ``ci`` < ``cpu`` < ``gpu``, each defaulting to the one below.

        Examples
        ========
        >>> Scale("cpu").pick(ci=100, cpu=400, gpu=2000)  # e.g. the number of training steps
        400
        """
        cpu = ci if cpu is None else cpu
        gpu = cpu if gpu is None else gpu
        return {"ci": ci, "cpu": cpu, "gpu": gpu}[self.name]

    @property
    def is_ci(self) -> bool:
        """Whether this is the smallest scale, the one the book's CI runs.

        Examples
        ========
        >>> Scale("ci").is_ci, Scale("cpu").is_ci
        (True, False)
        """
        return self.name == "ci"


def scale() -> Scale:
    """The scale in force: ``CONSLAW_SCALE`` if set, else ``ci`` under CI, ``gpu`` with CUDA, else ``cpu``.

    Examples
    ========
    >>> import os
    >>> os.environ["CONSLAW_SCALE"] = "ci"; scale().name
    'ci'
    >>> del os.environ["CONSLAW_SCALE"]
    """
    name = os.environ.get("CONSLAW_SCALE", "").strip().lower()
    if name:
        return Scale(name)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return Scale("ci")
    return Scale("gpu" if torch.cuda.is_available() else "cpu")


GPU_HINT = "this chapter wants a GPU (10× slower on a CPU): Runtime → Change runtime type → GPU, then run it again"


def runtime_summary(*, wants_gpu: bool = False) -> str:
    """One line for a chapter's first cell: package and torch versions, device and scale.

    On Colab without a GPU, a chapter that wants one (``wants_gpu=True``) adds
    :data:`GPU_HINT`.

    Examples
    ========
    >>> runtime_summary().startswith("conslaw_lite ")
    True
    >>> "· torch " in runtime_summary() and "· device " in runtime_summary()
    True
    """
    line = f"conslaw_lite {version('conslaw_lite')} · torch {torch.__version__}"
    line += f" · device {device().type} · scale {scale().name}"
    on_colab = "google.colab" in sys.modules
    if wants_gpu and on_colab and device().type != "cuda":
        line += f"\n{GPU_HINT}"
    return line
