"""Run the language-model experiment once at ``gpu`` scale and time it with and without the monitor.

Usage, on a machine with a CUDA GPU (from the repository root)::

    python benchmarks/gpu_lm.py            # writes book/results/lm-gpu.json and lm-gpu-timing.json

``--scale ci`` (files ``lm-ci*.json``) runs the same code small, on a CPU too.

1. The full experiment (10 seeds, the default step sizes, full batch, monitor on)
   goes to ``book/results/lm-gpu.json``; the language-model chapter plots it.
2. Then, in the same process, seed 0 at the larger step size trains twice more,
   with and without the monitor, and ``book/results/lm-gpu-timing.json`` records
   the wall time and tokens/s of each and the monitor's cost.

Both files record how they were made (command, commit, device, data source).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from conslaw_lite.config import SCALES
from conslaw_lite.experiments import ExperimentConfig, run_experiment

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=None, help="default: the gpu scale's")
    parser.add_argument("--out", default=str(ROOT / "book" / "results"))
    parser.add_argument("--scale", choices=SCALES, default="gpu", help="default gpu; ci or cpu to try it small")
    args = parser.parse_args(argv)
    if args.scale == "gpu" and not torch.cuda.is_available():
        print("no CUDA device: this benchmark is for a GPU", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    results = run_experiment(ExperimentConfig("lm", args.scale, seeds=args.seeds, steps=args.steps))
    results["environment"]["command"] = "python benchmarks/gpu_lm.py " + " ".join(argv or sys.argv[1:])
    results["environment"]["total_wall_s"] = time.perf_counter() - start
    (out / f"lm-{args.scale}.json").write_text(json.dumps(results, indent=1))

    lr = max(results["config"]["lrs"])
    timing = {"environment": results["environment"], "lr": lr, "runs": {}}
    for monitor in (False, True):
        one = run_experiment(ExperimentConfig("lm", args.scale, lrs=(lr,), seeds=1, steps=args.steps, monitor=monitor))
        run = one["runs"][0]
        timing["runs"]["with monitor" if monitor else "without monitor"] = {
            "wall_s": run["wall_s"],
            "tokens_per_s": run["tokens_per_s"],
            "final_loss": run["loss"][-1],
        }
    with_m, without = timing["runs"]["with monitor"], timing["runs"]["without monitor"]
    timing["monitor_overhead"] = without["tokens_per_s"] / with_m["tokens_per_s"] - 1
    (out / f"lm-{args.scale}-timing.json").write_text(json.dumps(timing, indent=1))
    print(json.dumps({"ratios": results["ratios"], **timing["runs"], "overhead": timing["monitor_overhead"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
