"""This process's place among the data-parallel processes of a ``torchrun`` launch (one without it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from conslaw_lite.config import device as default_device


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
