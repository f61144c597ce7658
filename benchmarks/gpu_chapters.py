"""Chapters 03–07 at ``gpu`` scale and the language model's monitor cost, in one call, for a machine with a GPU.

Usage, from the repository root of a machine with a CUDA GPU::

    python benchmarks/gpu_chapters.py       # writes book/results/chapters-gpu-<device>.json, lm-gpu*.json

1. Each chapter notebook (03–07) executes top to bottom at ``CONSLAW_SCALE=gpu``; its
   wall time and every line it printed (each ``train_block`` line names the device,
   the dtype and the wall time of that block's training) go to
   ``chapters-gpu-<device>.json``, rewritten after each chapter so that a run cut short
   keeps what it finished. The target: each chapter in at most 10 minutes.
2. Then :mod:`benchmarks.gpu_lm` (``gpu_lm.py``) runs the language-model experiment and
   times it with and without the monitor (target: the monitor costs at most 5 % of tokens/s).
3. Then ``count_laws.py --mlp 20000 50000 100000 --device cuda`` counts ReLU MLPs of those sizes on the
   GPU, in float64 (the target: D = 10⁵ conclusive), into ``count-laws-<scale>-<device>.json``:
   D, N, seconds, peak memory and the evidence, or the refusal with its estimate.

At the end the script prints each chapter's wall time and the tokens/s with and without the monitor.
``--scale ci --chapters 03_ffn --lm-seeds 1 --lm-steps 2 --count-mlp 2000 --out DIR`` runs the same code on a
CPU, small.

On a lent GPU with a per-call limit, write under the machine's output folder (``--out $OUT``) and
split the work if one call cannot hold it all, e.g. ``--chapters 03_ffn 04_attention 05_rope --lm-seeds 0``
then ``--chapters 06_moe 07_discrete --lm-seeds 2``; each chapter's numbers are saved as soon as it ends.
``book/results/`` is git-ignored: commit the files with ``git add -f``.

A bare GPU image with torch, sympy, matplotlib, pandas, timm and scikit-learn runs ``--chapters`` with none (the
counts) as it is; the chapters also need nbformat, nbclient, ipykernel (and what they pull in), ipywidgets and
bokeh, the language model ``CONSLAW_DATA_DIR`` pointing at a copy of WikiText-2 where the hub is out of reach. At
gpu scale on an H200 (2026-12-04) the language model's 10 seeds × 2 step sizes × 200 steps ran at about 15 steps/s
(~5 min) and ``experiment vit`` at about 16: give each its own call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_lm.py, next to this file

import count_laws  # noqa: E402
import gpu_lm  # noqa: E402

from conslaw_lite.config import SCALES  # noqa: E402
from conslaw_lite.experiments.runner import git_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ("03_ffn", "04_attention", "05_rope", "06_moe", "07_discrete")
CHAPTER_LIMIT_S = 600  # the target for one chapter at gpu scale


def device_name() -> str:
    """The GPU's name, or ``cpu``: part of the result file's name."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def printed_lines(nb: dict) -> list[str]:
    """Every line the executed notebook printed (stream outputs), in order."""
    return [
        line
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
        for line in out.get("text", "").splitlines()
    ]


def run_chapter(name: str, scale: str, timeout: int) -> dict:
    """Execute ``book/<name>.ipynb`` at ``scale``; its wall time, outcome and printed lines."""
    import nbformat  # here: a count-only run (``--chapters`` with none) needs no Jupyter
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = ROOT / "book" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    os.environ["CONSLAW_SCALE"] = scale  # the kernel inherits it
    resources = {"metadata": {"path": str(path.parent)}}  # chapters run from book/, as in the book's build
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources=resources)
    start = time.perf_counter()
    error = None
    try:
        client.execute()
    except CellExecutionError as err:
        error = str(err).splitlines()[-1] if str(err) else repr(err)
    except TimeoutError as err:  # nbclient's per-cell limit
        error = f"a cell ran past {timeout} s: {err}"
    wall = time.perf_counter() - start
    lines = printed_lines(nb)
    return {
        "wall_s": wall,
        "within_limit": wall <= CHAPTER_LIMIT_S,
        "error": error,
        "block_runs": [line for line in lines if re.search(r" on \S+ in float(32|64)", line)],
        "printed": lines,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=SCALES, default="gpu")
    parser.add_argument("--chapters", nargs="*", default=list(CHAPTERS), help="notebook names (default 03–07)")
    parser.add_argument("--timeout", type=int, default=CHAPTER_LIMIT_S, help="seconds per cell (default 600)")
    parser.add_argument("--lm-seeds", type=int, default=10, help="gpu_lm.py --seeds (0: skip the LM)")
    parser.add_argument("--lm-steps", type=int, default=None, help="gpu_lm.py --steps (default: the scale's)")
    sizes = sorted(count_laws.MLPS)
    parser.add_argument("--count-mlp", type=int, nargs="*", default=[20000, 50000, 100000], choices=sizes,
                        help="count_laws on ReLU MLPs of these sizes (none: skip)")  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "book" / "results"))
    args = parser.parse_args(argv)
    if args.scale == "gpu" and not torch.cuda.is_available():
        print("no CUDA device: gpu scale needs a GPU (use --scale ci to try the script on a CPU)", file=sys.stderr)
        return 2
    unknown = sorted(set(args.chapters) - set(CHAPTERS))
    if unknown:
        raise SystemExit(f"unknown chapters {unknown}; choose from {list(CHAPTERS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device_name()).strip("-")
    result_file = out / f"chapters-{args.scale}-{slug}.json"
    record = {
        "environment": {
            "torch": torch.__version__,
            "device": device_name(),
            "scale": args.scale,
            "git_commit": git_commit(),
            "command": "python benchmarks/gpu_chapters.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        },
        "chapters": {},
    }
    for name in args.chapters:
        print(f"{name}: executing at {args.scale} scale ...", flush=True)
        record["chapters"][name] = chapter = run_chapter(name, args.scale, args.timeout)
        result_file.write_text(json.dumps(record, indent=1))
        for line in chapter["block_runs"]:
            print(f"  {line}", flush=True)
        print(f"{name}: {chapter['wall_s']:.1f} s" + (f", FAILED: {chapter['error']}" if chapter["error"] else ""))

    result_file.write_text(json.dumps(record, indent=1))
    lm = None
    if args.lm_seeds > 0:
        lm_args = ["--seeds", str(args.lm_seeds), "--out", str(out), "--scale", args.scale]
        lm_args += ["--steps", str(args.lm_steps)] if args.lm_steps else []
        if gpu_lm.main(lm_args) == 0:
            lm = json.loads((out / f"lm-{args.scale}-timing.json").read_text())

    if args.count_mlp:
        where = "cuda" if torch.cuda.is_available() else "cpu"
        rows = count_laws.mlp_rows(args.count_mlp, where, torch.get_num_threads())
        counts = {"environment": record["environment"], "device": where, "rows": rows}
        (out / f"count-laws-{args.scale}-{slug}.json").write_text(json.dumps(counts, indent=1))

    print(f"\nresults: {result_file}")
    for name, chapter in record["chapters"].items():
        status = "ok" if chapter["error"] is None else f"FAILED ({chapter['error']})"
        print(f"{name:<14} {chapter['wall_s']:>8.1f} s  {status}")
    if lm is not None:
        for label, run in lm["runs"].items():
            print(f"LM {label:<16} {run['tokens_per_s']:>12.0f} tokens/s  ({run['wall_s']:.1f} s)")
        with_m, without = lm["runs"]["with monitor"], lm["runs"]["without monitor"]
        print(f"LM monitor cost: {1 - with_m['tokens_per_s'] / without['tokens_per_s']:.1%} of tokens/s")
    failed = [name for name, chapter in record["chapters"].items() if chapter["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
