"""The experiments' figures, from a results dictionary (fresh from :func:`run_experiment` or read from a file).

ε_block against k for one block kind: the conserved laws in blue, their controls
in red (the book's colours), one line per step size τ (darker = larger), the
mean over seeds with the band from the smallest to the largest seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes

from conslaw_lite.laws import Group
from conslaw_lite.plots import plot_band


def load_results(path: str | Path) -> dict | None:
    """The results file at ``path``, or ``None`` when nobody has made it yet.

    Examples
    ========
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     file = Path(tmp) / "lm.json"
    ...     missing = load_results(file)
    ...     _ = file.write_text('{"runs": []}')
    ...     missing, load_results(file)
    (None, {'runs': []})
    """
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else None


def seed_epsilon(results: dict, group: str, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """``(k, ε)`` of ``group`` at step size ``lr``: ε has one row per seed, (seeds, records).

    Examples
    ========
    >>> runs = [{"lr": 0.1, "steps": [0, 1], "epsilon": {"g": [0.0, s]}} for s in (1.0, 3.0)]
    >>> [a.tolist() for a in seed_epsilon({"runs": runs}, "g", 0.1)]
    [[0, 1], [[0.0, 1.0], [0.0, 3.0]]]
    """
    runs = [r for r in results["runs"] if r["lr"] == lr and group in r["epsilon"]]
    if not runs:
        raise ValueError(f"no run with group {group!r} at lr={lr}; groups: {sorted(results['runs'][0]['epsilon'])}")
    return np.array(runs[0]["steps"]), np.array([r["epsilon"][group] for r in runs])


def seed_band(results: dict, group: str, lr: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(k, mean, low, high)`` of ε for ``group`` at step size ``lr`` over the seeds.

    Examples
    ========
    >>> runs = [{"lr": 0.1, "steps": [0, 1], "epsilon": {"g": [0.0, s]}} for s in (1.0, 3.0)]
    >>> [a.tolist() for a in seed_band({"runs": runs}, "g", 0.1)]
    [[0, 1], [0.0, 2.0], [0.0, 1.0], [0.0, 3.0]]
    """
    k, eps = seed_epsilon(results, group, lr)
    return k, eps.mean(0), eps.min(0), eps.max(0)


def plot_epsilon(
    ax: Axes, results: dict, kind: str, *, law: bool = True, control: bool = True, label: str = ""
) -> None:
    """ε_block(k) of block ``kind`` (blue) and its controls (red, dashed), one line per τ, band over seeds.

    Examples
    ========
    >>> from matplotlib.figure import Figure
    >>> eps = {"swiglu": [0.0, 1e-6, 4e-6], "swiglu:control": [0.0, 1e-3, 2e-3]}
    >>> results = {"runs": [{"lr": 0.1, "steps": [0, 1, 2], "epsilon": eps}]}
    >>> ax = Figure().add_subplot()
    >>> plot_epsilon(ax, results, "swiglu")
    >>> [line.get_label() for line in ax.lines]  # k ≥ 1 on log axes
    ['laws, τ=0.1', 'controls, τ=0.1']
    """
    lrs = sorted({r["lr"] for r in results["runs"]})
    groups = [Group(kind, "law")] if law else []
    if control:
        groups.append(Group(kind, "control"))
    for j, lr in enumerate(lrs):
        alpha = 0.45 + 0.55 * (j + 1) / len(lrs)
        for group in groups:
            k, eps = seed_epsilon(results, group.key, lr)
            what = "laws" if group.kind == "law" else "controls"
            plot_band(ax, k[1:], eps[:, 1:], f"{label}{what}, τ={lr:g}", conserved=group.kind == "law", alpha=alpha)
    ax.set_ylabel("ε_block(k)")
    ax.set_title(kind)


def final_epsilon(results: dict, group: str) -> tuple[np.ndarray, np.ndarray]:
    """``(τ, ε at the last step)`` per step size, averaged over seeds: the drift-against-τ picture.

    Examples
    ========
    >>> runs = [{"lr": lr, "steps": [0, 1], "epsilon": {"g": [0.0, lr**2]}} for lr in (0.1, 0.2)]
    >>> [a.round(3).tolist() for a in final_epsilon({"runs": runs}, "g")]
    [[0.1, 0.2], [0.01, 0.04]]
    """
    lrs = np.array(sorted({r["lr"] for r in results["runs"]}))
    return lrs, np.array([seed_band(results, group, lr)[1][-1] for lr in lrs])


def describe(results: dict) -> str:
    """One paragraph saying how a results file was made (data, device, scale, seeds, command, commit).

    Examples
    ========
    >>> config = {"task": "lm", "scale": "ci", "seeds": 2, "lrs": [0.002], "steps": 30, "batch": None,
    ...           "schedule": "constant"}
    >>> env = {"data_source": "package:x", "device": "cpu", "dtype": "float64", "processes": 1,
    ...        "torch": "2.5", "git_commit": None, "date": "2026-01-01", "command": None}
    >>> describe({"config": config, "environment": env})[:62]
    'lm at scale ci: 2 seeds, τ ∈ [0.002], 30 steps, full batch, co'
    """
    c, env = results["config"], results["environment"]
    batch = "full batch" if c["batch"] is None else f"mini-batches of {c['batch']}"
    return (
        f"{c['task']} at scale {c['scale']}: {c['seeds']} seeds, τ ∈ {c['lrs']}, {c['steps']} steps, {batch}, "
        f"{c['schedule']} step; data {env['data_source']}; {env['device']} ({env['dtype']}, "
        f"{env['processes']} process(es)), torch {env['torch']}, commit {env['git_commit']}, {env['date']}; "
        f"command: {env['command']}"
    )
