"""conslaw_lite: conservation laws of neural-network training, computed.

The package behind the book: symbolic derivations (:mod:`conslaw_lite.symbolic`),
numerical law counting (:mod:`conslaw_lite.counting`) and finding
(:mod:`conslaw_lite.find_laws`), one folder per block family with its module, laws, sympy form
and architectures (:mod:`conslaw_lite.families`, read through the registry :mod:`conslaw_lite.laws`),
flows and training (:mod:`conslaw_lite.flows`), what the laws are good for (:mod:`conslaw_lite.orbits`,
:mod:`conslaw_lite.teleport`), and plots (:mod:`conslaw_lite.plots`).
"""

import warnings
from importlib.metadata import PackageNotFoundError, version

from conslaw_lite.config import device, scale
from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.find_laws import find_laws
from conslaw_lite.flows import Diverged, gradient_flow, mse_loss, step_sizes, train
from conslaw_lite.laws import controls_of, find_blocks, law_functions, laws_of
from conslaw_lite.monitor import Monitor

# torch's own forward-mode AD (torch.func.jvp, used by counting.py) imports
# torch._decomp.decompositions_for_jvp on first use, and that module calls the
# deprecated torch.jit.script: a FutureWarning about torch internals that our code
# cannot act on. Silence exactly that message from that torch module.
warnings.filterwarnings(
    "ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning, module=r"torch\.jit\._script"
)

__all__ = [
    "Diverged",
    "Monitor",
    "check_laws",
    "controls_of",
    "count_laws",
    "device",
    "find_laws",
    "find_blocks",
    "gradient_flow",
    "law_functions",
    "laws_of",
    "mse_loss",
    "scale",
    "step_sizes",
    "train",
]


def _version() -> str:
    """pyproject.toml's version (the one place it is written): the installed one's, else the source tree's."""
    try:
        return version("conslaw_lite")
    except PackageNotFoundError:  # run from a checkout on PYTHONPATH, not installed
        import re
        from pathlib import Path

        text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
        return re.search(r'^version = "([^"]+)"', text, re.MULTILINE).group(1)


__version__ = _version()
