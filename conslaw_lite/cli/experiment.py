"""``python -m conslaw_lite experiment``: the options of :func:`conslaw_lite.experiments.run_experiment`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch.distributed as dist

from conslaw_lite.cli import INTERRUPTED
from conslaw_lite.config import SCALES, scale
from conslaw_lite.experiments.checkpoint import Interrupted
from conslaw_lite.experiments.cluster import Cluster
from conslaw_lite.experiments.experiment_config import ExperimentConfig
from conslaw_lite.experiments.runner import ROOT, run_experiment
from conslaw_lite.experiments.tasks import TASKS
from conslaw_lite.flows import SCHEDULES

EXIT_CODES = (
    "exit codes: 0 the experiment ran (or stopped at a checkpoint, to resume), 2 bad input or a diverging run, "
    f"3 internal error, {INTERRUPTED} interrupted"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``experiment`` subcommand's options; its exit codes, which have no count and no ``--module``.

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> parser.epilog
    'exit codes: 0 the experiment ran (or stopped at a checkpoint, to resume), 2 bad input or a diverging run, ...'
    """
    parser.epilog = EXIT_CODES
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
    parser.add_argument("--shared-experts", type=int, default=0, help="lm: experts every token uses (DeepSeek-MoE)")
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
    if args.task == "vit" and (args.experts or args.qk_norm != "none" or args.top_k or args.shared_experts):
        raise ValueError("--experts, --top-k, --shared-experts and --qk-norm apply to the lm task only")
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
        n_shared_experts=args.shared_experts,
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

