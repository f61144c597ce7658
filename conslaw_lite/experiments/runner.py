"""The paper's experiments as one resumable command: ``python -m conslaw_lite experiment lm|vit``.

For each step size τ and seed it trains a fresh model with plain gradient steps
``θ_{k+1} = θ_k − τ_k g_k`` (full batch, or a mini-batch drawn from (seed, k)),
while a :class:`~conslaw_lite.monitor.Monitor` records ε_block(k) for every
block kind and its controls. The result file holds the configuration, the
environment (torch, device, data source, git commit, the command) and, per τ
and seed, ε over k.

Interruptions: every few steps the run saves a checkpoint (model, optimizer,
monitor history, step index); the same command continues from it and ends with
the same numbers as an uninterrupted run. A diverging run stops with
:class:`~conslaw_lite.flows.Diverged`, naming the step. Under
``torchrun --nproc_per_node=N`` each process takes an equal share of every
batch and ``DistributedDataParallel`` averages the gradients; the monitor, the
checkpoints and the result file live on rank 0.

The parts, one job each: :mod:`~conslaw_lite.experiments.experiment_config` (what decides the numbers),
:mod:`~conslaw_lite.experiments.cluster` (the processes), :mod:`~conslaw_lite.experiments.checkpoint`
(resuming), :mod:`~conslaw_lite.experiments.loop` (one run: resume, step, checkpoint); this module runs
them all, records the environment, and is the command line.
"""

from __future__ import annotations

import math
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from conslaw_lite.config import dtype_for
from conslaw_lite.experiments.checkpoint import Checkpoint, run_key
from conslaw_lite.experiments.cluster import Cluster
from conslaw_lite.experiments.experiment_config import ExperimentConfig, build_task
from conslaw_lite.experiments.loop import train_one
from conslaw_lite.experiments.tasks import Task
from conslaw_lite.flows import Diverged
from conslaw_lite.laws import Group

ROOT = Path(__file__).resolve().parents[2]


def ratios(runs: list[dict]) -> dict[str, dict[str, float]]:
    """``min over seeds and k ≥ 1 of ε_control(k) / ε_law(k)`` per τ and block kind.

    Only kinds that have both laws and controls are compared; at least 10 is the
    figure the experiments must reach.

    Examples
    ========
    >>> run = {"lr": 0.1, "epsilon": {"swiglu": [0, 0.25, 0.5], "swiglu:control": [0, 4.0, 4.0]}}
    >>> ratios([run])  # min(4/0.25, 4/0.5)
    {'0.1': {'swiglu': 8.0}}
    """
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        eps = run["epsilon"]
        for kind in eps:  # a law group's key is its block family; its controls' key is Group(kind, "control").key
            control_key = Group(kind, "control").key
            if control_key not in eps:
                continue
            law, control = np.array(eps[kind][1:]), np.array(eps[control_key][1:])
            r = float(np.min(control / np.maximum(law, np.finfo(float).tiny)))
            lr = f"{run['lr']:g}"
            out.setdefault(lr, {})[kind] = min(r, out.get(lr, {}).get(kind, math.inf))
    return out


def git_commit() -> str | None:
    """``HEAD``'s hash, with ``+changes`` when the working tree differs from it; ``None`` outside git.

    Examples
    ========
    >>> commit = git_commit()
    >>> commit is None or len(commit.removesuffix("+changes")) == 40
    True
    """
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5)
        changes = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if changes.stdout.strip() else "")


def environment(task: Task, cluster: Cluster, config: ExperimentConfig) -> dict:
    """How the numbers were made: software, hardware, data, code version and command line."""
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(cluster.device)
        if cluster.device.type == "cuda"
        else platform.processor() or "cpu",
        "dtype": str(dtype_for(config.scale)).removeprefix("torch."),
        "processes": cluster.world,
        "data_source": task.source,
        "git_commit": git_commit(),
        "command": " ".join(["python -m conslaw_lite"] + sys.argv[1:]) if sys.argv[0].endswith("__main__.py") else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def run_experiment(
    config: ExperimentConfig,
    *,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    stop_after: int | None = None,
) -> dict:
    """Train every (τ, seed) of ``config`` and return the results (config, environment, runs, ratios).

    ``checkpoint``: a file to save to and resume from (none by default).
    ``stop_after``: take at most this many steps in this call, then save and raise
    :class:`Interrupted` — how the tests interrupt a run.

    Examples
    ========
    >>> import os
    >>> from unittest import mock
    >>> cfg = ExperimentConfig("lm", "ci", lrs=(0.1,), seeds=1, steps=2)
    >>> with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):  # offline data; the environment is restored
    ...     out = run_experiment(cfg, progress=False)
    Monitor: the registered blocks' laws only; `embed`, ... outside them not searched (...)
    >>> [len(r["steps"]) for r in out["runs"]], sorted(out["runs"][0]["epsilon"])[:2]
    ([3], ['gqa-rope', 'gqa-rope:control'])
    """
    config = config.resolved()
    cluster = Cluster.join()
    threads = torch.get_num_threads()
    if cluster.device.type == "cpu" and config.scale != "gpu":
        # Models this small gain nothing from intra-op threads and lose several-fold when cores are shared;
        # to use more cores, run more processes (torchrun).
        torch.set_num_threads(1)
    try:
        return _run(config, cluster, checkpoint, progress, stop_after)
    finally:
        torch.set_num_threads(threads)


def _run(config: ExperimentConfig, cluster: Cluster, checkpoint, progress: bool, stop_after: int | None) -> dict:
    """:func:`run_experiment` once the threads are set: every (τ, seed) not yet in the checkpoint."""
    from tqdm.auto import tqdm

    ckpt = Checkpoint(Path(checkpoint) if checkpoint else None, config, cluster)
    task = build_task(config)
    keys = [(lr, seed) for lr in config.lrs for seed in range(config.seeds)]
    done_steps = sum(config.steps for lr, s in keys if run_key(lr, s) in ckpt.finished)
    if ckpt.current:
        done_steps += ckpt.current["k"]
    budget = [stop_after if stop_after is not None else -1]
    total = len(keys) * config.steps
    with tqdm(total=total, initial=done_steps, disable=not (progress and cluster.main), desc=config.task) as bar:
        for lr, seed in keys:
            key = run_key(lr, seed)
            if key in ckpt.finished:
                continue
            try:
                ckpt.finished[key] = train_one(task, config, lr, seed, ckpt, cluster, bar, budget)
            except Diverged as stop:  # say which of the (τ, seed) runs it was
                raise Diverged(stop.step, f"{stop.reason} ({key})") from None
            ckpt.current = None
            ckpt.save()
    runs = [ckpt.finished[run_key(lr, s)] for lr, s in keys]
    return {
        "config": asdict(config),
        "environment": environment(task, cluster, config),
        "runs": runs,
        "ratios": ratios(runs),
    }






