"""Interrupted experiments resume from one file: the finished runs and the state of the unfinished one.

The state of a run is the model, the optimizer, the record so far and the step index. No random state
is needed: θ₀ comes from the seed alone and each step's batch from :func:`~conslaw_lite.flows.batch_indices`,
a stateless draw from (seed, k).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from conslaw_lite.experiments.cluster import Cluster
from conslaw_lite.experiments.experiment_config import ExperimentConfig


class Interrupted(Exception):
    """Raised when ``stop_after`` steps were taken in this session (a checkpoint was saved first)."""


def run_key(lr: float, seed: int) -> str:
    """The name of the (τ, seed) run in the checkpoint and in messages.

    Examples
    ========
    >>> run_key(0.002, 1)
    'lr=0.002/seed=1'
    """
    return f"lr={lr:g}/seed={seed}"


class Checkpoint:
    """One file holding the finished runs and the state of the unfinished one (rank 0 writes it)."""

    def __init__(self, path: Path | None, config: ExperimentConfig, cluster: Cluster) -> None:
        self.path, self.config, self.cluster = path, config, cluster
        self.finished: dict[str, dict] = {}
        self.current: dict | None = None
        if path is not None and path.exists():
            saved = torch.load(path, weights_only=False)
            if saved["config"] != asdict(config):
                raise ValueError(
                    f"checkpoint {path} was written for another configuration "
                    f"({saved['config']}); delete it or choose another --out"
                )
            self.finished, self.current = saved["finished"], saved["current"]

    def save(self) -> None:
        if self.path is None or not self.cluster.main:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save({"config": asdict(self.config), "finished": self.finished, "current": self.current}, tmp)
        tmp.replace(self.path)  # atomic: a kill during the save leaves the previous checkpoint
