"""Whole models for the paper's experiments, assembled from blocks whose laws are known.

:class:`QwenDecoder` is a Qwen-3-style language model; ``conslaw_lite.models.vit.small_vit``
a timm vision transformer (import it from there: it needs the optional ``timm``).
Both are plain ``nn.Module`` s: the monitor finds their laws. :mod:`conslaw_lite.models.user_attention` holds
attention as users write it, which no registered block matches: :func:`conslaw_lite.find_laws.find_laws` searches it.
"""

from conslaw_lite.models.qwen import QwenConfig, QwenDecoder

__all__ = ["QwenConfig", "QwenDecoder"]
