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

The parts, one job each: :mod:`~conslaw_lite.experiments.config` (what decides the numbers),
:mod:`~conslaw_lite.experiments.cluster` (the processes), :mod:`~conslaw_lite.experiments.checkpoint`
(resuming), :mod:`~conslaw_lite.experiments.loop` (one run: resume, step, checkpoint); this module runs
them all, records the environment, and is the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from conslaw_lite.config import SCALES, dtype_for, scale
from conslaw_lite.experiments.checkpoint import Checkpoint, Interrupted, run_key
from conslaw_lite.experiments.cluster import Cluster
from conslaw_lite.experiments.config import ExperimentConfig, build_task
from conslaw_lite.experiments.loop import train_one
from conslaw_lite.experiments.tasks import TASKS, Task
from conslaw_lite.flows import SCHEDULES, Diverged
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
    >>> import os
    >>> from unittest import mock
    >>> cfg = ExperimentConfig("lm", "ci", lrs=(0.1,), seeds=1, steps=2)
    >>> with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):  # offline data; the environment is restored
    ...     out = run_experiment(cfg, progress=False)
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
