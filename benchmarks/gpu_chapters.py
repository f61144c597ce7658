"""Chapters 03–07 at ``gpu`` scale, the language model and the ViT the book plots, and the law counter, in one call.

Usage, from the repository root of a machine with a CUDA GPU::

    python benchmarks/gpu_chapters.py                  # one part after the other, into book/results/
    python benchmarks/gpu_chapters.py --jobs 6 --limit 480 --out DIR   # every part at once, within 8 minutes

1. Each chapter notebook (03–07) executes top to bottom at ``CONSLAW_SCALE=gpu``; its
   wall time and every line it printed (each ``train_block`` line names the device,
   the dtype and the wall time of that block's training) go to
   ``chapters-gpu-<device>.json``, rewritten after each chapter so that a run cut short
   keeps what it finished. The target: each chapter in at most 10 minutes.
2. :mod:`benchmarks.gpu_lm` (``gpu_lm.py``) runs the language-model experiment and
   times it with and without the monitor (target: the monitor costs at most 5 % of tokens/s):
   ``lm-gpu.json`` and ``lm-gpu-timing.json``, which chapter 08 plots.
3. ``python -m conslaw_lite experiment vit`` writes ``vit-gpu.json``, which chapter 09 plots.
4. ``count_laws.py --mlp 20000 50000 100000 --device cuda`` counts ReLU MLPs of those sizes on the
   GPU, in float64 (the target: D = 10⁵ conclusive), into ``count-laws-<scale>-<device>.json``:
   D, N, seconds, peak memory and the evidence, or the refusal with its estimate.

``--jobs N`` runs these parts (each chapter its own) N at a time, each in its own process with its output in
``parts/<part>.log`` beside the results, and stops what still runs after ``--limit`` seconds: a lent GPU with a
limit per call gets every file the chapters read from one call. The parts are small models, whose steps wait on
kernel launches more than on the GPU, so they share it well; the timings in the files (the monitor's cost among
them) are then taken beside the other parts, which the files' ``parallel_parts`` field says.
At the end the script prints each chapter's wall time and the tokens/s with and without the monitor.
``--scale ci --count-mlp 2000 --out DIR`` runs the same code on a CPU, small.
``book/results/`` is git-ignored: commit the files with ``git add -f``.

A bare GPU image with torch, sympy, matplotlib, pandas, timm and scikit-learn runs the counts, the language model
and the ViT as it is; the chapters also need nbformat, nbclient, ipykernel (and what they pull in), ipywidgets and
bokeh, the language model ``CONSLAW_DATA_DIR`` pointing at a copy of WikiText-2 where the hub is out of reach. At
gpu scale on an H200 (2026-12-04) the language model's 10 seeds × 2 step sizes × 200 steps ran at about 15 steps/s
(~5 min) and ``experiment vit`` at about 16: with ``--jobs`` they run side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
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


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=SCALES, default="gpu")
    parser.add_argument("--chapters", nargs="*", default=list(CHAPTERS), help="notebook names (default 03–07)")
    parser.add_argument("--timeout", type=int, default=CHAPTER_LIMIT_S, help="seconds per cell (default 600)")
    parser.add_argument("--lm-seeds", type=int, default=10, help="gpu_lm.py --seeds (0: skip the LM)")
    parser.add_argument("--lm-steps", type=int, default=None, help="gpu_lm.py --steps (default: the scale's)")
    parser.add_argument("--vit-seeds", type=int, default=10, help="experiment vit --seeds (0: skip the ViT)")
    sizes = sorted(count_laws.MLPS)
    parser.add_argument("--count-mlp", type=int, nargs="*", default=[20000, 50000, 100000], choices=sizes,
                        help="count_laws on ReLU MLPs of these sizes (none: skip)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="parts run at once, each in its own process")
    parser.add_argument("--limit", type=float, default=None, help="seconds after which parts still running stop")
    parser.add_argument("--out", default=str(ROOT / "book" / "results"))
    args = parser.parse_args(argv)
    unknown = sorted(set(args.chapters) - set(CHAPTERS))
    if unknown:
        parser.error(f"unknown chapters {unknown}; choose from {list(CHAPTERS)}")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    return args


def parts(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each part of the run as this script's arguments that run it alone: the language model, the ViT, the counts,
    each chapter; the longest first."""
    alone = ["--scale", args.scale, "--timeout", str(args.timeout)]
    alone += ["--chapters", "--lm-seeds", "0", "--vit-seeds", "0", "--count-mlp"]  # nothing, then one part each
    lm_steps = ["--lm-steps", str(args.lm_steps)] if args.lm_steps else []
    found = {
        "lm": [*alone, "--lm-seeds", str(args.lm_seeds), *lm_steps] if args.lm_seeds else None,
        "vit": [*alone, "--vit-seeds", str(args.vit_seeds)] if args.vit_seeds else None,
        "count": [*alone, "--count-mlp", *map(str, args.count_mlp)] if args.count_mlp else None,
    } | {name: [*alone, "--chapters", name] for name in args.chapters}
    return {name: part for name, part in found.items() if part is not None}


def run_parts(parts: dict[str, list[str]], jobs: int, limit: float | None, folder: Path) -> dict[str, int | None]:
    """Run each part as its own process of this script, ``jobs`` at a time, into ``folder/<part>`` with its output
    in ``folder/<part>.log``; a part still running ``limit`` seconds after the start is stopped with what it started
    (a notebook's kernel too). Each part's exit code, ``None`` where it was stopped."""
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + (limit if limit is not None else float("inf"))
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // jobs))
    env = os.environ | {"OMP_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1"}

    def one(name: str) -> int | None:
        command = [sys.executable, __file__, *parts[name], "--out", str(folder / name)]
        with (folder / f"{name}.log").open("w") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                wait = None if limit is None else max(0.0, deadline - time.monotonic())
                return process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return None

    with ThreadPoolExecutor(jobs) as pool:
        return dict(zip(parts, pool.map(one, parts), strict=True))


def gather(codes: dict[str, int | None], folder: Path, out: Path, record: dict) -> None:
    """The parts' results into ``out``: each chapter's into ``record``, the other files copied up, each file's
    environment naming the parts that ran beside it."""
    for name, code in codes.items():
        files = sorted((folder / name).glob("*.json"))
        if name in CHAPTERS:
            ran = [json.loads(f.read_text())["chapters"] for f in files if f.name.startswith("chapters-")]
            stopped = "stopped at the limit" if code is None else f"exit code {code}, see parts/{name}.log"
            record["chapters"][name] = ran[0][name] if ran and name in ran[0] else {"error": stopped}
            continue
        for file in (f for f in files if not f.name.startswith("chapters-")):  # a part's own, empty, record
            data = json.loads(file.read_text())
            data.setdefault("environment", {})["parallel_parts"] = sorted(codes)
            (out / file.name).write_text(json.dumps(data, indent=1))


def run_vit(args: argparse.Namespace, out: Path) -> int:
    """``experiment vit`` at the run's scale, as the CLI runs it, into ``vit-<scale>.json``."""
    from conslaw_lite.cli import main as cli

    file = out / f"vit-{args.scale}.json"
    command = ["experiment", "vit", "--scale", args.scale, "--seeds", str(args.vit_seeds), "--fresh"]
    command += ["--out", str(file)]
    code = cli(command)
    if code == 0:  # the CLI names the command it ran only when run as ``python -m conslaw_lite``
        results = json.loads(file.read_text())
        results["environment"]["command"] = " ".join(["python -m conslaw_lite", *command])
        file.write_text(json.dumps(results, indent=1))
    return code


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.scale == "gpu" and not torch.cuda.is_available():
        print("no CUDA device: gpu scale needs a GPU (use --scale ci to try the script on a CPU)", file=sys.stderr)
        return 2
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
    if args.jobs > 1 or args.limit is not None:
        todo = parts(args)
        record["environment"]["parallel_parts"] = sorted(todo)
        print(f"{len(todo)} parts, {args.jobs} at a time: {', '.join(todo)}; output in {out / 'parts'}", flush=True)
        codes = run_parts(todo, args.jobs, args.limit, out / "parts")
        gather(codes, out / "parts", out, record)
        result_file.write_text(json.dumps(record, indent=1))
        failed = {name: code for name, code in codes.items() if code != 0}
        print(f"\nresults: {out}" + (f"; parts that failed or stopped (exit code): {failed}" if failed else ""))
        summarize(record, out / f"lm-{args.scale}-timing.json" if "lm" in codes else None)
        return 1 if failed else 0

    for name in args.chapters:
        print(f"{name}: executing at {args.scale} scale ...", flush=True)
        record["chapters"][name] = chapter = run_chapter(name, args.scale, args.timeout)
        result_file.write_text(json.dumps(record, indent=1))
        for line in chapter["block_runs"]:
            print(f"  {line}", flush=True)
        print(f"{name}: {chapter['wall_s']:.1f} s" + (f", FAILED: {chapter['error']}" if chapter["error"] else ""))
    result_file.write_text(json.dumps(record, indent=1))

    failed = [name for name, chapter in record["chapters"].items() if chapter["error"]]
    if args.lm_seeds > 0:
        lm_args = ["--seeds", str(args.lm_seeds), "--out", str(out), "--scale", args.scale]
        lm_args += ["--steps", str(args.lm_steps)] if args.lm_steps else []
        failed += ["lm"] if gpu_lm.main(lm_args) != 0 else []
    if args.vit_seeds > 0:
        failed += ["vit"] if run_vit(args, out) != 0 else []
    if args.count_mlp:
        where = "cuda" if torch.cuda.is_available() else "cpu"
        rows = count_laws.mlp_rows(args.count_mlp, where, torch.get_num_threads())
        counts = {"environment": record["environment"], "device": where, "rows": rows}
        (out / f"count-laws-{args.scale}-{slug}.json").write_text(json.dumps(counts, indent=1))
    print(f"\nresults: {result_file}")
    summarize(record, out / f"lm-{args.scale}-timing.json" if args.lm_seeds > 0 else None)
    return 1 if failed else 0


def summarize(record: dict, timing: Path | None) -> None:
    """Each chapter's wall time; the language model's tokens/s with and without the monitor (``timing``: the file
    this run wrote, if it ran the language model)."""
    for name, chapter in record["chapters"].items():
        status = "ok" if chapter.get("error") is None else f"FAILED ({chapter['error']})"
        print(f"{name:<14} {chapter.get('wall_s', float('nan')):>8.1f} s  {status}")
    if timing is not None and timing.exists():
        runs = json.loads(timing.read_text())["runs"]
        for label, run in runs.items():
            print(f"LM {label:<16} {run['tokens_per_s']:>12.0f} tokens/s  ({run['wall_s']:.1f} s)")
        with_m, without = runs["with monitor"], runs["without monitor"]
        print(f"LM monitor cost: {1 - with_m['tokens_per_s'] / without['tokens_per_s']:.1%} of tokens/s")


if __name__ == "__main__":
    sys.exit(main())
