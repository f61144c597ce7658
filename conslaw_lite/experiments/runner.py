"""The paper's experiments as one resumable command: ``python -m conslaw_lite experiment lm|vit``.

For each step size τ and seed it trains a fresh model with plain gradient steps
``θ_{k+1} = θ_k − τ_k g_k`` (full batch, or a mini-batch drawn from (seed, k)),
while a :class:`~conslaw_lite.monitor.Monitor` records ε_block(k) for every
block kind and its controls. The result file holds the configuration, the
environment (torch, device, data source, git commit, the command) and, per τ
and seed, ε over k.

Interruptions: every few steps the run saves a checkpoint (model, optimizer,
random states, monitor history, step index); the same command continues from
it and ends with the same numbers as an uninterrupted run. A diverging run
stops with :class:`~conslaw_lite.flows.Diverged`, naming the step.
Under ``torchrun --nproc_per_node=N`` each process takes an equal share of every
batch and ``DistributedDataParallel`` averages the gradients; the monitor, the
checkpoints and the result file live on rank 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from conslaw_lite.config import SCALES, Scale, dtype_for, scale
from conslaw_lite.config import device as default_device
from conslaw_lite.experiments.tasks import TASKS, Task, cross_entropy, lm_task, vit_task
from conslaw_lite.flows import SCHEDULES, Diverged, batch_indices, check_loss, step_sizes
from conslaw_lite.laws import Group, groups
from conslaw_lite.monitor import Monitor, epsilon_block

if TYPE_CHECKING:
    from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
# Two step sizes a factor 3 apart, so ε visibly grows with τ; small enough that the controls' first-order
# motion (∝ τ) stays ten times the laws' second-order drift (∝ τ²) at every k (ratio ∝ 1/τ).
DEFAULT_LRS = {"lm": (0.002, 0.006), "vit": (0.001, 0.003)}
MAX_LOSS_RATIO = 10.0  # a cross-entropy ten times its start means the logits blew up


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
            steps=self.steps or S.pick(ci=30, cpu=60, gpu=200),
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
        )
    return vit_task(S, dataset=config.dataset)


@dataclass
class Cluster:
    """This process's place among ``world`` data-parallel processes (1 without torchrun)."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def join(cls) -> Cluster:
        """Join the torchrun group when ``WORLD_SIZE`` > 1 (gloo on CPU, NCCL on GPUs)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        device = default_device()
        cuda = device.type == "cuda"
        if cuda:  # one GPU per process
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        if world > 1 and not dist.is_initialized():
            if cuda:
                torch.cuda.set_device(device)
            dist.init_process_group("nccl" if cuda else "gloo")
        return cls(dist.get_rank() if world > 1 else 0, world, device)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of ``value`` over processes (itself in one process)."""
        if self.world == 1:
            return value
        value = value.detach().clone()
        dist.all_reduce(value)
        return value / self.world


def _rng_states() -> dict:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class Interrupted(Exception):
    """Raised when ``stop_after`` steps were taken in this session (a checkpoint was saved first)."""


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


def tracked_columns(model: nn.Module, keys: tuple[str, ...]) -> dict[str, tuple[str, list[int]]]:
    """For each short key, the key of the :class:`Monitor` group holding it and its columns there (one per block).

    The columns index :meth:`Monitor.relative_drift`, whose laws come in the order of
    :func:`~conslaw_lite.laws.groups`.

    Examples
    ========
    >>> from conslaw_lite.blocks.moe import MoE
    >>> tracked_columns(nn.Sequential(MoE(3, 2, 1, 1, gating="sigmoid")), ("sum_W_e_(sigmoid)",))
    {'sum_W_e_(sigmoid)': ('moe-sigmoid:control', [2])}
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


def run_key(lr: float, seed: int) -> str:
    return f"lr={lr:g}/seed={seed}"


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

    Step k uses the examples :func:`~conslaw_lite.flows.batch_indices` draws from (seed, k), and
    :func:`~conslaw_lite.flows.check_loss` stops a run whose loss leaves the finite numbers or
    grows tenfold. ``bar`` advances one per step; ``budget[0]`` counts down the steps this session
    may still take (−1: no limit) and is shared by all runs of :func:`run_experiment`.
    """
    torch.manual_seed(seed)
    dtype = dtype_for(config.scale)
    model = task.build().to(cluster.device, dtype)  # θ₀, decided by the seed alone
    # The monitor reads h(θ₀) now, so a resumed run compares with the same start.
    monitor = Monitor(model) if config.monitor and cluster.main else None
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    record = {"lr": lr, "seed": seed, "steps": [0], "loss": [], "epsilon": {}, "wall_s": 0.0}
    tracked = tracked_columns(model, config.track) if monitor is not None else {}
    if monitor is not None:
        record["epsilon"] = {key: [0.0] for key in [*(g.key for g in monitor.groups), *tracked]}
    start = 0
    resumed = ckpt.current if ckpt.current and ckpt.current["key"] == run_key(lr, seed) else None
    if resumed is not None:
        model.load_state_dict(resumed["model"])  # in place: the monitor keeps watching these tensors
        opt.load_state_dict(resumed["optimizer"])
        _set_rng_states(resumed["rng"])
        record, start = resumed["record"], resumed["k"]
    net = nn.parallel.DistributedDataParallel(model) if cluster.world > 1 else model
    x, y = task.x.to(cluster.device), task.y.to(cluster.device)
    if x.is_floating_point():
        x = x.to(dtype)
    taus = step_sizes(lr, config.steps, config.schedule)
    every = torch.arange(task.n)
    loss0 = record["loss"][0] if record["loss"] else None
    clock = time.perf_counter()
    for k in range(start, config.steps):
        idx = batch_indices(task.n, config.batch, seed, k)
        idx = (every if idx is None else idx).to(cluster.device)
        if len(idx) % cluster.world:
            raise ValueError(f"the batch of {len(idx)} examples does not split over {cluster.world} processes")
        mine = idx.chunk(cluster.world)[cluster.rank]  # equal shares: the mean of share means is the batch mean
        loss = cross_entropy(net, x[mine], y[mine])
        value = float(cluster.mean(loss.detach()))
        loss0 = value if loss0 is None else loss0
        check_loss(k, value, loss0, MAX_LOSS_RATIO, float(taus[k - 1]) if k else None)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP averages the gradients over processes here
        opt.param_groups[0]["lr"] = float(taus[k])
        opt.step()  # θ_{k+1} = θ_k − τ_k g_k
        record["loss"].append(value)
        record["steps"].append(k + 1)
        if monitor is not None:
            monitor.step()
            for group in monitor.groups:  # ε_block of this step's record
                record["epsilon"][group.key].append(float(epsilon_block(monitor.last_relative_drift(group.key))))
            for name, (group, columns) in tracked.items():
                record["epsilon"][name].append(float(epsilon_block(monitor.last_relative_drift(group)[columns])))
        bar.update(1)
        budget[0] -= 1
        done = k + 1 == config.steps
        if not done and ((k + 1) % config.checkpoint_every == 0 or budget[0] == 0):
            record["wall_s"] += time.perf_counter() - clock
            clock = time.perf_counter()
            ckpt.current = {
                "key": run_key(lr, seed),
                "k": k + 1,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "rng": _rng_states(),
                "record": record,
            }
            ckpt.save()
            if budget[0] == 0:
                raise Interrupted(f"stopped after step {k + 1} of {run_key(lr, seed)}; run again to resume")
    if cluster.device.type == "cuda":
        torch.cuda.synchronize()
    record["wall_s"] += time.perf_counter() - clock
    tokens = config.steps * (config.batch or task.n) * task.tokens_per_example
    record["tokens_per_s"] = tokens / record["wall_s"] if record["wall_s"] > 0 else None
    return record


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


def _git_commit() -> str | None:
    """``HEAD``'s hash, with ``+changes`` when the working tree differs from it; ``None`` outside git."""
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
        "git_commit": _git_commit(),
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
    >>> import os; os.environ["HF_HUB_OFFLINE"] = "1"
    >>> cfg = ExperimentConfig("lm", "ci", lrs=(0.1,), seeds=1, steps=2)
    >>> out = run_experiment(cfg, progress=False)
    >>> [len(r["steps"]) for r in out["runs"]], sorted(out["runs"][0]["epsilon"])[:2]
    ([3], ['mha-rope', 'mha-rope:control'])
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``experiment`` subcommand's options."""
    parser.add_argument("task", choices=TASKS, help="lm: Qwen-3-style decoder on text; vit: timm ViT on images")
    parser.add_argument("--scale", choices=SCALES, default=None, help="sizes (default: CONSLAW_SCALE or the machine)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N−1 (default: 2 ci, 3 cpu, 10 gpu)")
    parser.add_argument(
        "--lr", type=float, nargs="+", default=None, help="step sizes τ (default lm: 0.002 0.006; vit: 0.001 0.003)"
    )
    parser.add_argument("--schedule", choices=SCHEDULES, default="constant", help="τ_k = τ, or τ/(k+1)")
    parser.add_argument("--batch", default="full", help="'full' (gradient descent) or a mini-batch size (SGD)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default from the scale)")
    parser.add_argument("--data", default=None, help="wikitext-103 | ptb (lm); cifar10 | imagenet-1k (vit)")
    parser.add_argument("--qk-norm", choices=("none", "per_head", "shared"), default="none", help="lm: QK-norm")
    parser.add_argument("--experts", type=int, default=0, help="lm: experts per MoE layer (0: dense SwiGLU)")
    parser.add_argument("--gating", choices=("softmax", "sigmoid"), default="softmax", help="lm: MoE gating")
    parser.add_argument("--top-k", type=int, default=None, help="lm: experts per token (default: all, dense)")
    parser.add_argument("--no-monitor", action="store_true", help="train without the monitor (for timing)")
    parser.add_argument(
        "--track", nargs="+", default=(), help="ASCII keys of laws in a block to record alone, e.g. sum_W_e_(sigmoid)"
    )
    parser.add_argument("--out", default=None, help="results JSON (default results/<task>-<scale>.json)")
    parser.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints")
    parser.add_argument("--fresh", action="store_true", help="ignore and replace an existing checkpoint")
    parser.add_argument("--stop-after", type=int, default=None, help="stop after N steps, leaving a checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    """The :class:`ExperimentConfig` the command line asks for (``ValueError`` on bad values)."""
    if args.batch != "full" and not str(args.batch).isdigit():
        raise ValueError(f"--batch must be 'full' or a positive integer, got {args.batch!r}")
    if args.task == "vit" and (args.experts or args.qk_norm != "none" or args.top_k):
        raise ValueError("--experts, --top-k and --qk-norm apply to the lm task only")
    return ExperimentConfig(
        task=args.task,
        scale=args.scale or scale().name,
        lrs=tuple(args.lr or ()),
        seeds=args.seeds,
        schedule=args.schedule,
        batch=None if args.batch == "full" else int(args.batch),
        steps=args.steps,
        dataset=args.data,
        qk_norm=False if args.qk_norm == "none" else args.qk_norm,
        n_experts=args.experts,
        gating=args.gating,
        top_k=args.top_k,
        monitor=not args.no_monitor,
        checkpoint_every=args.checkpoint_every,
        track=tuple(args.track),
    )


def run(args: argparse.Namespace) -> int:
    """Run the experiment, write the results file on rank 0, print the ratios."""
    config = config_from_args(args)
    out = Path(args.out or ROOT / "results" / f"{config.task}-{config.scale}.json")
    ckpt = out.with_suffix(".ckpt")
    if args.fresh and ckpt.exists():
        ckpt.unlink()
    try:
        results = run_experiment(config, checkpoint=ckpt, progress=not args.quiet, stop_after=args.stop_after)
    except Interrupted as stop:
        print(stop)
        return 0
    if Cluster.join().main:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        ckpt.unlink(missing_ok=True)
        env = results["environment"]
        print(f"data: {env['data_source']}; device: {env['device']}; {env['processes']} process(es)")
        for lr, kinds in results["ratios"].items():
            print(f"lr={lr}: " + ", ".join(f"{kind} control/law ≥ {r:.3g}" for kind, r in kinds.items()))
        print(f"results: {out}")
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0
