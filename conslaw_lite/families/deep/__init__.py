"""Deep feed-forward stacks, the paper's open problem: conjectured laws, one per unit (ReLU, SwiGLU) or none (GELU).

``block`` (:class:`~.block.DeepFFN`), ``laws`` (the conjectured laws, their finder and :func:`~.laws.formula`)
and ``archs`` (``deep-relu``, ``deep-gelu``, ``deep-swiglu``, each with ``--depth``).
``benchmarks/deep_stacks.py`` counts them over widths and depths.
"""

from conslaw_lite.families import Family
from conslaw_lite.families.deep import laws  # noqa: F401  (registers the finder)
from conslaw_lite.families.deep.archs import ARCHITECTURES
from conslaw_lite.families.deep.block import DeepFFN

FAMILY = Family("deep", "deep FFN stacks of ReLU, GELU or SwiGLU layers: conjectured laws", 16, ARCHITECTURES)

__all__ = ["DeepFFN", "FAMILY"]
