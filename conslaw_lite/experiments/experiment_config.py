"""What decides an experiment's numbers: :class:`ExperimentConfig` and the task it builds."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from conslaw_lite.config import Scale
from conslaw_lite.experiments.tasks import TASKS, Task, lm_task, vit_task
from conslaw_lite.flows import SCHEDULES

# Two step sizes a factor 3 apart, so ε visibly grows with τ; small enough that the controls' first-order
# motion (∝ τ) stays ten times the laws' second-order drift (∝ τ²) at every k (ratio ∝ 1/τ).
DEFAULT_LRS = {"lm": (0.002, 0.006), "vit": (0.001, 0.003)}


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that decides the numbers of an experiment (sizes beyond these come from ``scale``).

    ``batch=None`` is full batch; ``steps=None`` and ``seeds=None`` take the scale's default.
    ``track``: ASCII keys of laws or controls within their block (:attr:`~conslaw_lite.laws.Quantity.short_key`,
    e.g. ``"sum_W_e_(sigmoid)"`` for ``ΣW_e (sigmoid)``) whose ε, over the blocks that have them, is also
    recorded on its own under that key.
    """

    task: str = "lm"
    scale: str = "ci"
    lrs: tuple[float, ...] = ()
    seeds: int | None = None
    schedule: str = "constant"
    batch: int | None = None
    steps: int | None = None
    dataset: str | None = None
    qk_norm: bool | str = False  # LM only
    n_experts: int = 0  # LM only; 0 = dense SwiGLU
    gating: str = "softmax"
    top_k: int | None = None
    n_shared_experts: int = 0  # LM only; DeepSeek-MoE's experts that every token uses, beside the routed ones
    monitor: bool = True
    checkpoint_every: int | None = None
    track: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        Scale(self.scale)  # validates the name
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if any(not (lr > 0 and math.isfinite(lr)) for lr in self.lrs):
            raise ValueError(f"every lr must be a positive finite number, got {self.lrs}")
        for name in ("seeds", "batch", "steps", "checkpoint_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if self.track and not self.monitor:
            raise ValueError(f"track={self.track} needs the monitor; drop monitor=False")

    def resolved(self) -> ExperimentConfig:
        """The same configuration with every default filled in from the scale."""
        S = Scale(self.scale)
        return replace(
            self,
            lrs=tuple(self.lrs) or DEFAULT_LRS[self.task],
            seeds=self.seeds or S.pick(ci=2, cpu=3, gpu=10),
            steps=self.steps or S.pick(ci=30, cpu=40, gpu=200),
            dataset=self.dataset or ("wikitext-103" if self.task == "lm" else "cifar10"),
            checkpoint_every=self.checkpoint_every or S.pick(ci=10, cpu=20, gpu=50),
        )


def build_task(config: ExperimentConfig) -> Task:
    """The :class:`Task` of ``config`` (data loaded once for all τ and seeds)."""
    S = Scale(config.scale)
    if config.task == "lm":
        return lm_task(
            S,
            dataset=config.dataset,
            qk_norm=config.qk_norm,
            n_experts=config.n_experts,
            gating=config.gating,
            top_k=config.top_k,
            n_shared_experts=config.n_shared_experts,
        )
    return vit_task(S, dataset=config.dataset)
