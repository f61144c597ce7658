"""One (τ, seed) run of an experiment, in three parts: resume, step, checkpoint.

:func:`resume` builds θ₀ from the seed (or takes the checkpoint's state of this run), :func:`step`
takes one plain gradient step ``θ_{k+1} = θ_k − τ_k g_k`` and records the loss and ε_block, and
:func:`save_checkpoint` writes the run's state so that the same command continues it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from conslaw_lite.config import dtype_for
from conslaw_lite.experiments.checkpoint import Checkpoint, Interrupted, run_key
from conslaw_lite.experiments.cluster import Cluster
from conslaw_lite.experiments.experiment_config import ExperimentConfig
from conslaw_lite.experiments.tasks import Task, cross_entropy
from conslaw_lite.flows import batch_indices, check_loss, step_sizes
from conslaw_lite.laws import groups
from conslaw_lite.monitor import Monitor, epsilon_block
from conslaw_lite.seeding import seeded

if TYPE_CHECKING:
    from tqdm import tqdm

MAX_LOSS_RATIO = 10.0  # a cross-entropy ten times its start means the logits blew up


def tracked_columns(model: nn.Module, keys: tuple[str, ...]) -> dict[str, tuple[str, list[int]]]:
    """For each short key, the key of the :class:`Monitor` group holding it and its columns there (one per block).

    The columns index :meth:`Monitor.relative_drift`, whose laws come in the order of
    :func:`~conslaw_lite.laws.groups`.

    Examples
    ========
    >>> from conslaw_lite.families.moe.block import MoE
    >>> tracked_columns(nn.Sequential(MoE(3, 2, 1, 1, gating="sigmoid")), ("sum_W_e_(sigmoid)",))
    {'sum_W_e_(sigmoid)': ('moe-sigmoid:control', [2])}

    A per-head law's short key leaves out the head (:attr:`~conslaw_lite.laws.Quantity.short_key`), so one
    key tracks it in every head:

    >>> from conslaw_lite.families.attention.block import MultiHeadAttention
    >>> tracked_columns(nn.Sequential(MultiHeadAttention(4, 2, 2)), ("Q^TQ-K^TK",))
    {'Q^TQ-K^TK': ('mha', [0, 2])}
    """
    grouped = groups(model)
    out = {}
    for key in keys:
        hits = {g.key: [i for i, q in enumerate(qs) if q.short_key == key] for g, qs in grouped.items()}
        hits = {g: cols for g, cols in hits.items() if cols}
        if len(hits) != 1:
            known = sorted({q.short_key for qs in grouped.values() for q in qs})
            raise ValueError(f"law {key!r} is in {len(hits)} monitor groups, not one; this model's laws: {known}")
        out[key] = next(iter(hits.items()))
    return out


@dataclass
class RunState:
    """A run under way: its model and optimizer, the monitor (rank 0), the record so far, the next step."""

    lr: float
    seed: int
    model: nn.Module
    optimizer: torch.optim.Optimizer
    monitor: Monitor | None
    tracked: dict[str, tuple[str, list[int]]]
    record: dict
    start: int


def resume(task: Task, config: ExperimentConfig, lr: float, seed: int, ckpt: Checkpoint, cluster: Cluster) -> RunState:
    """θ₀ from ``seed`` alone, or the checkpoint's state when it holds this (τ, seed) run unfinished."""
    with seeded(seed):  # θ₀ from the seed, leaving the caller's random state as it was
        model = task.build().to(cluster.device, dtype_for(config.scale))
    # The monitor reads h(θ₀) now, so a resumed run compares with the same start.
    monitor = Monitor(model) if config.monitor and cluster.main else None
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    record = {"lr": lr, "seed": seed, "steps": [0], "loss": [], "epsilon": {}, "wall_s": 0.0}
    tracked = tracked_columns(model, config.track) if monitor is not None else {}
    if monitor is not None:
        record["epsilon"] = {key: [0.0] for key in [*(g.key for g in monitor.groups), *tracked]}
    start = 0
    saved = ckpt.current if ckpt.current and ckpt.current["key"] == run_key(lr, seed) else None
    if saved is not None:
        model.load_state_dict(saved["model"])  # in place: the monitor keeps watching these tensors
        optimizer.load_state_dict(saved["optimizer"])
        record, start = saved["record"], saved["k"]
    return RunState(lr, seed, model, optimizer, monitor, tracked, record, start)


def step(
    state: RunState,
    net: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor],
    config: ExperimentConfig,
    cluster: Cluster,
    k: int,
    taus: np.ndarray,
) -> None:
    """Step k on ``data = (x, y)``: the batch :func:`~conslaw_lite.flows.batch_indices` draws from (seed, k),
    then ``θ_{k+1} = θ_k − τ_k g_k``.

    :func:`~conslaw_lite.flows.check_loss` stops a run whose loss leaves the finite numbers or grows
    tenfold. The loss and, with the monitor, each group's ε_block (and each tracked law's) are recorded.
    """
    x, y = data
    idx = batch_indices(len(x), config.batch, state.seed, k)
    idx = (torch.arange(len(x)) if idx is None else idx).to(cluster.device)
    if len(idx) % cluster.world:
        raise ValueError(f"the batch of {len(idx)} examples does not split over {cluster.world} processes")
    mine = idx.chunk(cluster.world)[cluster.rank]  # equal shares: the mean of share means is the batch mean
    loss = cross_entropy(net, x[mine], y[mine])
    value = float(cluster.mean(loss.detach()))
    record = state.record
    loss0 = record["loss"][0] if record["loss"] else value
    check_loss(k, value, loss0, MAX_LOSS_RATIO, float(taus[k - 1]) if k else None)
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()  # DDP averages the gradients over processes here
    state.optimizer.param_groups[0]["lr"] = float(taus[k])
    state.optimizer.step()  # θ_{k+1} = θ_k − τ_k g_k
    record["loss"].append(value)
    record["steps"].append(k + 1)
    if state.monitor is not None:
        state.monitor.step()
        for key, eps in state.monitor.last_epsilon().items():  # ε_block of this step's record
            record["epsilon"][key].append(eps)
        for key, (group, columns) in state.tracked.items():
            record["epsilon"][key].append(float(epsilon_block(state.monitor.last_relative_drift(group)[columns])))


def save_checkpoint(state: RunState, ckpt: Checkpoint, k: int) -> None:
    """Save the run's state before step ``k`` (model, optimizer, record) in the checkpoint file."""
    ckpt.current = {
        "key": run_key(state.lr, state.seed),
        "k": k,
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "record": state.record,
    }
    ckpt.save()


def train_one(
    task: Task,
    config: ExperimentConfig,
    lr: float,
    seed: int,
    ckpt: Checkpoint,
    cluster: Cluster,
    bar: tqdm,
    budget: list[int],
) -> dict:
    """Train one model (τ = ``lr``, ``seed``) from θ₀ or from the checkpoint; return its record.

    ``bar`` advances one per step; ``budget[0]`` counts down the steps this session may still
    take (−1: no limit) and is shared by all runs of :func:`~conslaw_lite.experiments.run_experiment`.
    """
    state = resume(task, config, lr, seed, ckpt, cluster)
    net = nn.parallel.DistributedDataParallel(state.model) if cluster.world > 1 else state.model
    x, y = task.x.to(cluster.device), task.y.to(cluster.device)
    if x.is_floating_point():
        x = x.to(dtype_for(config.scale))
    taus = step_sizes(lr, config.steps, config.schedule)
    clock = time.perf_counter()
    for k in range(state.start, config.steps):
        step(state, net, (x, y), config, cluster, k, taus)
        bar.update(1)
        budget[0] -= 1
        if k + 1 < config.steps and ((k + 1) % config.checkpoint_every == 0 or budget[0] == 0):
            state.record["wall_s"] += time.perf_counter() - clock
            clock = time.perf_counter()
            save_checkpoint(state, ckpt, k + 1)
            if budget[0] == 0:
                raise Interrupted(f"stopped after step {k + 1} of {run_key(lr, seed)}; run again to resume")
    if cluster.device.type == "cuda":
        torch.cuda.synchronize()
    state.record["wall_s"] += time.perf_counter() - clock
    tokens = config.steps * (config.batch or task.n) * task.tokens_per_example
    state.record["tokens_per_s"] = tokens / state.record["wall_s"] if state.record["wall_s"] > 0 else None
    return state.record
