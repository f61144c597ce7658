"""The paper's experiments, reproducible: a Qwen-3-style language model and a timm ViT on real data.

:func:`run_experiment` trains every (τ, seed) of an :class:`ExperimentConfig`
with the monitor on; ``python -m conslaw_lite experiment`` is the same function
behind a command line, with checkpoints and ``torchrun`` support.
"""

from conslaw_lite.experiments.checkpoint import Interrupted
from conslaw_lite.experiments.experiment_config import ExperimentConfig
from conslaw_lite.experiments.runner import ratios, run_experiment
from conslaw_lite.experiments.tasks import Task, lm_task, vit_task

__all__ = ["ExperimentConfig", "Interrupted", "Task", "lm_task", "ratios", "run_experiment", "vit_task"]
