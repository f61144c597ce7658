"""What monitoring every step costs on transformers' models: ``Monitor.step()`` over one training step.

A tiny ``Qwen3ForCausalLM`` and ``Qwen3MoeForCausalLM`` (d = 64, 2 layers, 4 query heads on 2 K/V heads of
width 16, vocabulary 256; random weights, no download) trained with SGD in float32 on random token ids,
batch 8 × 32, the laws of :mod:`conslaw_lite.families.hf` watched after every step; then the same Qwen3 with
8 layers, whose repeated layers the monitor evaluates in one call each (:mod:`conslaw_lite.law_stacks`), and the
two-layer Qwen3 on longer windows (8 × 64, 8 × 128): a record costs the same whatever the batch, so these rows
show from which step size on it stays under the target. "back to back" is the median of 50 records taken one
after the other, no training between them: what a record costs when θ and the monitor's code are in the caches.
Medians as in ``monitor_overhead.py``; the target is ≤ 5 %.

    python benchmarks/hf_monitor_overhead.py
"""

from __future__ import annotations

import time

import numpy as np
import torch
from monitor_overhead import overhead  # this folder's script: the same timing

from conslaw_lite.archs import ArchOptions
from conslaw_lite.families.hf.archs import tiny_model
from conslaw_lite.monitor import Monitor

# (architecture, layers, window): 8 windows a step
RUNS = (("qwen3", 2, 32), ("qwen3_moe", 2, 32), ("qwen3", 8, 32), ("qwen3", 2, 64), ("qwen3", 2, 128))


def main() -> None:
    torch.set_num_threads(1)
    options = ArchOptions(dim=64, heads=2, head_dim=16, hidden=128, out=256, experts=4, top_k=2)
    header = f"{'model':24s} {'params':>8s} {'tokens':>7s} {'step ms':>8s} {'monitor ms':>11s} {'ratio':>7s}"
    print(f"{header} {'back to back ms':>16s}")
    for arch, layers, T in RUNS:
        ids = torch.randint(0, 256, (8, T), generator=torch.Generator().manual_seed(0))
        model = tiny_model(arch, options, num_hidden_layers=layers, max_position_embeddings=T).float()
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        step, watch, monitor = overhead(model, opt, lambda m=model: m(input_ids=ids, labels=ids).loss, 60)
        num_params = sum(p.numel() for p in model.parameters())
        name = f"{arch}, {layers} layers"
        row = f"{name:24s} {num_params:8d} {ids.numel():7d} {step * 1e3:8.2f} {watch * 1e3:11.3f} {watch / step:7.2%}"
        print(f"{row} {back_to_back(monitor) * 1e3:16.3f}")
        print(f"  groups: {', '.join(g.key for g in monitor.groups)}")


def back_to_back(monitor: Monitor, records: int = 50) -> float:
    """The median seconds of ``monitor.step()`` called ``records`` times in a row, nothing else between."""
    seconds = []
    for _ in range(records):
        t0 = time.perf_counter()
        monitor.step()
        seconds.append(time.perf_counter() - t0)
    return float(np.median(seconds))


if __name__ == "__main__":
    main()
