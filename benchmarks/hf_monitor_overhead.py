"""What monitoring every step costs on transformers' models: ``Monitor.step()`` over one training step.

A tiny ``Qwen3ForCausalLM`` and ``Qwen3MoeForCausalLM`` (d = 64, 2 layers, 4 query heads on 2 K/V heads of
width 16, vocabulary 256; random weights, no download) trained with SGD in float32 on random token ids,
batch 8 × 32, the laws of :mod:`conslaw_lite.families.hf` watched after every step; then the same Qwen3 with
8 layers, whose repeated layers the monitor evaluates in one call each (:mod:`conslaw_lite.law_stacks`), and the
two-layer Qwen3 on longer windows (8 × 64, 8 × 128): a record costs the same whatever the batch, so these rows
show from which step size on it stays under the target. "back to back" is the mean of 64 records taken one
after the other, no training between them: what a record costs when θ and the monitor's code are in the caches.
Means as in ``monitor_overhead.py``; the target is ≤ 5 %. ``--sweep`` times the two- and eight-layer Qwen3 with
1 to 16 records evaluated at once instead (``Monitor(evaluate_every=...)``), the measurement behind
:data:`conslaw_lite.snapshots.MOST` and :data:`~conslaw_lite.snapshots.BUDGET`.

    python benchmarks/hf_monitor_overhead.py [--sweep]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from monitor_overhead import overhead  # this folder's script: the same timing

from conslaw_lite.archs import ArchOptions
from conslaw_lite.families.hf.archs import tiny_model
from conslaw_lite.monitor import Monitor

# (architecture, layers, window): 8 windows a step
RUNS = (("qwen3", 2, 32), ("qwen3_moe", 2, 32), ("qwen3", 8, 32), ("qwen3", 2, 64), ("qwen3", 2, 128))
OPTIONS = ArchOptions(dim=64, heads=2, head_dim=16, hidden=128, out=256, experts=4, top_k=2)
SWEEP = (1, 2, 3, 4, 6, 8, 16)  # records evaluated at once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="1 to 16 records evaluated at once, two Qwen3")
    torch.set_num_threads(1)
    if parser.parse_args().sweep:
        sweep()
        return
    header = f"{'model':24s} {'params':>8s} {'tokens':>7s} {'step ms':>8s} {'monitor ms':>11s} {'ratio':>7s}"
    print(f"{header} {'back to back ms':>16s}")
    for arch, layers, T in RUNS:
        model, step, watch, monitor = watched(arch, layers, T)
        num_params = sum(p.numel() for p in model.parameters())
        name = f"{arch}, {layers} layers"
        row = f"{name:24s} {num_params:8d} {8 * T:7d} {step * 1e3:8.2f} {watch * 1e3:11.3f} {watch / step:7.2%}"
        print(f"{row} {back_to_back(monitor) * 1e3:16.3f}")
        print(f"  groups: {', '.join(g.key for g in monitor.groups)}")


def sweep() -> None:
    print(f"{'model':24s} {'at once':>8s} {'step ms':>8s} {'monitor ms':>11s} {'ratio':>7s}")
    for layers in (2, 8):
        for at_once in SWEEP:
            _, step, watch, _ = watched("qwen3", layers, 32, evaluate_every=at_once)
            name = f"qwen3, {layers} layers"
            print(f"{name:24s} {at_once:8d} {step * 1e3:8.2f} {watch * 1e3:11.3f} {watch / step:7.2%}")


def watched(arch: str, layers: int, T: int, **options: object) -> tuple:
    """The model, and its mean training-step and ``monitor.step()`` seconds and monitor over 120 steps of SGD."""
    ids = torch.randint(0, 256, (8, T), generator=torch.Generator().manual_seed(0))
    model = tiny_model(arch, OPTIONS, num_hidden_layers=layers, max_position_embeddings=T).float()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    return model, *overhead(model, opt, lambda: model(input_ids=ids, labels=ids).loss, 120, **options)


def back_to_back(monitor: Monitor, records: int = 64) -> float:
    """The mean seconds of ``monitor.step()`` called ``records`` times in a row, nothing else between."""
    seconds = []
    for _ in range(records):
        t0 = time.perf_counter()
        monitor.step()
        seconds.append(time.perf_counter() - t0)
    return float(np.mean(seconds))


if __name__ == "__main__":
    main()
