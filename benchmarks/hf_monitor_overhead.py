"""What monitoring every step costs on transformers' models: ``Monitor.step()`` over one training step.

A tiny ``Qwen3ForCausalLM`` and ``Qwen3MoeForCausalLM`` (d = 64, 2 layers, 4 query heads on 2 K/V heads of
width 16, vocabulary 256; random weights, no download) trained with SGD in float32 on random token ids,
batch 8 × 32, the laws of :mod:`conslaw_lite.families.hf` watched after every step; then the same Qwen3 with
8 layers, whose repeated layers the monitor evaluates in one call each (:mod:`conslaw_lite.law_stacks`).
Medians as in ``monitor_overhead.py``; the target is ≤ 5 %.

    python benchmarks/hf_monitor_overhead.py
"""

from __future__ import annotations

import torch
from monitor_overhead import overhead  # this folder's script: the same timing

from conslaw_lite.archs import ArchOptions
from conslaw_lite.families.hf.archs import tiny_model


def main() -> None:
    torch.set_num_threads(1)
    options = ArchOptions(dim=64, heads=2, head_dim=16, hidden=128, out=256, experts=4, top_k=2)
    ids = torch.randint(0, 256, (8, 32), generator=torch.Generator().manual_seed(0))
    print(f"{'model':24s} {'params':>8s} {'step ms':>8s} {'monitor ms':>11s} {'ratio':>7s}")
    for arch, layers in (("qwen3", 2), ("qwen3_moe", 2), ("qwen3", 8)):
        model = tiny_model(arch, options, num_hidden_layers=layers).float()
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        step, watch, groups = overhead(model, opt, lambda m=model: m(input_ids=ids, labels=ids).loss, 60)
        num_params = sum(p.numel() for p in model.parameters())
        name = f"{arch}, {layers} layers"
        print(f"{name:24s} {num_params:8d} {step * 1e3:8.2f} {watch * 1e3:11.3f} {watch / step:7.2%}")
        print(f"  groups: {', '.join(groups)}")


if __name__ == "__main__":
    main()
