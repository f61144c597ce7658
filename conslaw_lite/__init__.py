"""conslaw_lite: conservation laws of neural-network training, computed.

The package behind the book: symbolic derivations (:mod:`conslaw_lite.symbolic`),
numerical law counting (:mod:`conslaw_lite.counting`), blocks and their laws
(:mod:`conslaw_lite.blocks`, :mod:`conslaw_lite.laws`), flows and training
(:mod:`conslaw_lite.flows`), and plots (:mod:`conslaw_lite.plots`).
"""

from conslaw_lite.config import device, scale
from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.flows import Diverged, gradient_flow, mse_loss, step_sizes, train
from conslaw_lite.laws import controls_of, find_blocks, law_functions, laws_of
from conslaw_lite.monitor import Monitor

__all__ = [
    "Diverged",
    "Monitor",
    "check_laws",
    "controls_of",
    "count_laws",
    "device",
    "find_blocks",
    "gradient_flow",
    "law_functions",
    "laws_of",
    "mse_loss",
    "scale",
    "step_sizes",
    "train",
]
__version__ = "0.1.0"
