"""One scale setting for the whole book, and the device to run on.

Every notebook asks :func:`scale` for its sizes, so the same logic runs small in
CI and on a laptop CPU, and larger on a GPU (Colab or a lent accelerator).
Only sizes change with the scale, never the code path.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib.metadata import version
from typing import TypeVar

import torch

SCALES = ("ci", "cpu", "gpu")
T = TypeVar("T")


def device() -> torch.device:
    """``cuda`` when a GPU is visible, else ``cpu``.

    Examples
    ========
    >>> device().type in ("cpu", "cuda")
    True
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
