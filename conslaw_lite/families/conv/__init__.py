"""Convolutional ReLU nets: per hidden channel ``‖W2[:, c]‖² − ‖W1[c]‖²`` (kernel positions summed).

``block`` (:class:`~.block.ConvBlock`), ``laws`` (the finder, also for a user's ``nn.Sequential`` of
convolutions and activations, and :func:`~.laws.formula`) and ``archs`` (``conv-relu``, ``conv2d-relu``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.conv import laws  # noqa: F401  (registers the finders)
from conslaw_lite.families.conv.archs import ARCHITECTURES
from conslaw_lite.families.conv.block import ConvBlock

FAMILY = Family("conv", "convolutional ReLU nets: one law per hidden channel", 16, ARCHITECTURES)

__all__ = ["FAMILY", "ConvBlock"]
