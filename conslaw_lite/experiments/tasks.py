"""The two experiments as data plus a model builder: next-byte prediction and image classification.

A :class:`Task` holds N examples ``(x[i], y[i])`` and builds a fresh model; the
loss of a batch is the mean cross-entropy of its examples (of every token, for
the language model), so the mean of equal shares' losses is the batch's loss —
what lets data-parallel training give the same steps as one process.
Sizes come from the scale (``ci`` < ``cpu`` < ``gpu``); only sizes change with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.config import Scale
from conslaw_lite.data import load_images, load_text
from conslaw_lite.models.qwen import QwenConfig, QwenDecoder

TASKS = ("lm", "vit")


@dataclass(frozen=True)
class Task:
    """Examples ``x`` (N, ...), targets ``y``, where they came from, and ``build()`` for a fresh model."""

    name: str
    x: torch.Tensor
    y: torch.Tensor
    source: str
    build: Callable[[], nn.Module]
    tokens_per_example: int  # sequence length (LM) or patches + class token (ViT), for tokens/s

    @property
    def n(self) -> int:
        return self.x.shape[0]


def cross_entropy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy ``−(1/n) Σ log softmax(f(x))_y`` over every prediction (each token, or each image).

    Examples
    ========
    >>> model = nn.Linear(2, 3, bias=False)
    >>> with torch.no_grad(): _ = model.weight.zero_()
    >>> round(cross_entropy(model, torch.ones(4, 2), torch.zeros(4, dtype=torch.long)).item(), 4)  # ln 3
    1.0986
    """
    out = model(x)  # (B, [T,] classes)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def lm_task(
    scale: Scale,
    *,
    dataset: str = "wikitext-103",
    qk_norm: bool | str = False,
    n_experts: int = 0,
    gating: str = "softmax",
    top_k: int | None = None,
    n_shared_experts: int = 0,
) -> Task:
    """Next-byte prediction on N windows of T+1 bytes with a Qwen-3-style decoder.

    ``x[i]`` = bytes t..t+T−1 of window i, ``y[i]`` = bytes t+1..t+T.

    Examples
    ========
    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):  # offline data; the environment is restored
    ...     task = lm_task(Scale("ci"))
    >>> task.x.shape == task.y.shape, bool((task.x[:, 1:] == task.y[:, :-1]).all())
    (True, True)
    """
    n, T = scale.pick(ci=16, cpu=16, gpu=128), scale.pick(ci=32, cpu=64, gpu=256)
    text = load_text(dataset, max_bytes=n * (T + 1))
    if text.tokens.numel() < n * (T + 1):
        raise ValueError(f"{text.source} has {text.tokens.numel()} bytes, fewer than {n}·{T + 1} needed")
    windows = text.tokens[: n * (T + 1)].view(n, T + 1)  # (N, T+1)
    config = QwenConfig(
        vocab_size=text.vocab_size,
        dim=scale.pick(ci=32, cpu=64, gpu=384),
        n_layers=scale.pick(ci=2, cpu=2, gpu=6),
        n_heads=scale.pick(ci=2, cpu=4, gpu=6),
        n_kv_heads=scale.pick(ci=1, cpu=2, gpu=2),  # grouped K/V heads, as in Qwen-3
        head_dim=scale.pick(ci=16, cpu=16, gpu=64),
        hidden=scale.pick(ci=64, cpu=128, gpu=1024) // (2 if n_experts else 1),
        qk_norm=qk_norm,
        n_experts=n_experts,
        gating=gating,
        top_k=top_k,
        n_shared_experts=n_shared_experts,
    )
    return Task("lm", windows[:, :-1], windows[:, 1:], text.source, lambda: QwenDecoder(config), T)


def vit_task(scale: Scale, *, dataset: str = "cifar10") -> Task:
    """Image classification with a small timm ViT (learned absolute PE, SwiGLU MLP).

    Patches of 2 pixels on 8×8 images (the offline digits), 4 on 32×32 (CIFAR-10), 8 on 64×64 (ImageNet).

    Examples
    ========
    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):
    ...     task = vit_task(Scale("ci"))
    >>> task.x.shape[1:], task.tokens_per_example
    (torch.Size([1, 8, 8]), 17)
    """
    from conslaw_lite.models.vit import small_vit  # timm is an optional dependency

    images = load_images(dataset, max_images=scale.pick(ci=64, cpu=128, gpu=8192))
    channels, size = images.x.shape[1], images.x.shape[-1]
    patch = max(2, size // 8)
    dim = scale.pick(ci=32, cpu=64, gpu=384)

    def build() -> nn.Module:
        return small_vit(
            img_size=size,
            patch_size=patch,
            in_chans=channels,
            num_classes=images.n_classes,
            dim=dim,
            depth=scale.pick(ci=2, cpu=2, gpu=6),
            num_heads=scale.pick(ci=2, cpu=4, gpu=6),
        )

    return Task("vit", images.x, images.y, images.source, build, (size // patch) ** 2 + 1)
