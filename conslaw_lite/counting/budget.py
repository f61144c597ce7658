"""What a count will cost, known before anything large is allocated, and where the counter runs.

The rank of Lie(W)(θ) is found by orthonormalizing random brackets against the directions found
so far (:mod:`.lie_rank`): a basis of up to D rows of D float64 entries, ``8 D²`` bytes, and about
``ORTHO_PASSES · 2 D r²`` floating-point operations per θ to project each chunk on it (r ≤ D the
rank). Up to ``STACK_MAX_D`` parameters the stacked vectors are kept as well, for their
spectrum (the evidence): ``8 D²`` more, as much again for the SVD's workspace, and about
``SPECTRUM_FLOPS · D³`` operations. Beyond, the rank is found through its complement
(:mod:`.complement`): D gradients and their LU, ``16 D²`` bytes, or the LU alone where both would not fit (the
gradients recomputed at each use), and ``COMPLEMENT_FLOPS · D³`` operations (:func:`estimate_complement`).

:func:`estimate` gives those figures for a problem; :func:`available_memory` what the device has
free (``MemAvailable`` of ``/proc/meminfo`` via psutil on a CPU, ``torch.cuda.mem_get_info``
on a GPU). :func:`~conslaw_lite.counting.count_laws` refuses at once, with the estimate and what
to do, when the estimate does not fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from conslaw_lite.counting.lie_rank import VMAP_BATCH

BYTES = 8  # float64
# (V Qᵀ) Q is two products of 2·m·r·D flops, and some chunks are projected twice: 2 matches the time measured
# at D = 20,000 (MLP 50-200-50: 34 min for two θ on a loaded core, estimated 40 min)
ORTHO_PASSES = 2.0
SPECTRUM_FLOPS = 30.0  # svdvals of the stacked (≈ D × D) vectors, in units of D³ (D = 2000: 6.8 s a θ)
WORKSPACE = 32  # copies of a forward's tensors a nested jvp over vjp keeps alive per vector (peak 4.9 GB at D = 20,000)
# complement_rank: gradients, LU (⅔ D³) and solves, in D³ at the probed product rate (D = 20,000: 107–111 s for two θ
# on 2 cores, estimated 101 s)
COMPLEMENT_FLOPS = 0.9
HEADROOM = 0.9  # of the available memory the estimate may use: the allocator and Python need the rest
RATE_PROBE = 1024  # side of the matrices timed to measure a CPU's float64 matrix-product rate: at 384, with one of
# 2 cores busy elsewhere, the threads' waits on each other read 4.7 GFLOP/s where products of side 2,048 ran at 44
# (1024: 32), and a count's estimate came out ten times too long
GPU_RATE_PROBE = 4096  # a GPU's: at 384 a product takes less than its launch (an H200 measured 0.8 TFLOP/s, and
# estimated 38 min for a count that took 72 s)


class TooLarge(MemoryError, ValueError):
    """A count refused before it starts: its estimated memory exceeds what the device has (or ``max_memory``)."""


@dataclass(frozen=True)
class Estimate:
    """Peak memory (bytes) and seconds of linear algebra a count is expected to need, and what they are made of."""

    bytes: float
    seconds: float
    parts: dict[str, float]  # bytes of each part

    def describe(self) -> str:
        """``"20.1 GB (basis 20.0 GB, …) and about 35 min"``."""
        parts = ", ".join(f"{name} {_size(b)}" for name, b in self.parts.items() if b >= 1e6)
        return f"{_size(self.bytes)} ({parts}) and about {duration(self.seconds)} of linear algebra"

    def short(self) -> str:
        """``"20.1 GB, 35 min of linear algebra"``: the brackets' own time is not in it (the bar's rate shows it)."""
        return f"{_size(self.bytes)}, {duration(self.seconds)} of linear algebra"


def estimate(
    D: int, n_out: int, keep_stack: bool, device: torch.device, points: int = 2, rank: int | None = None
) -> Estimate:
    """Memory and time of a count over D parameters with ``n_out`` outputs per θ, before anything is allocated.

    ``points``: the θ ranked (``count.NUM_POINTS``); ``rank`` defaults to D (no law: the most work).
    Memory: the basis ``8 D²`` (its rows are written as they are found, but up to D of them), the
    stacked vectors and their SVD (``2 · 8 D²``, with ``keep_stack``), and one vmap batch of vectors
    with the forward's tensors (``WORKSPACE · VMAP_BATCH · (D + n_out)`` floats). Time: ``points`` θ
    of ``ORTHO_PASSES · 2 D r²`` flops (and the spectrum's, with ``keep_stack``) at the device's
    measured float64 rate. The brackets themselves are left out: beside the linear algebra they cost
    little at large D for a cheap forward, but a costly one takes longer (a one-block timm ViT of D = 938: 1 s of
    linear algebra, 88 s in all), which the progress bar's rate shows.

    Examples
    ========
    >>> e = estimate(1000, 1250, keep_stack=True, device=torch.device("cpu"))
    >>> round(e.parts["basis"] / 1e6), e.bytes > 3 * 8e6
    (8, True)
    """
    r = D if rank is None else rank
    parts = {
        "basis": BYTES * float(D) * D,
        "stacked vectors and their SVD": 2 * BYTES * float(D) * D if keep_stack else 0.0,
        "one batch of brackets": BYTES * WORKSPACE * VMAP_BATCH * float(D + n_out),
    }
    flops = points * (ORTHO_PASSES * 2 * float(D) * r * r + (SPECTRUM_FLOPS * float(D) ** 3 if keep_stack else 0))
    return Estimate(sum(parts.values()), flops / matmul_rate(device), parts)


def estimate_complement(D: int, n_out: int, device: torch.device, points: int = 2, replay: bool = False) -> Estimate:
    """Memory and time of a count by :func:`~conslaw_lite.counting.complement.complement_rank`.

    Memory: the D gradients and their LU (``2 · 8 D²``; the LU overwrites the matrix it factors, on a GPU too:
    MLP 100-250-100, D = 50,000, peaked at 43.3 GB on an H200, the two matrices' 40 GB and a batch), or the LU
    alone with ``replay`` (the gradients recomputed at each use), and one vmap batch of vectors; time: ``points`` θ
    of ``COMPLEMENT_FLOPS · D³`` at the device's measured float64 rate.

    Examples
    ========
    >>> e = estimate_complement(20_000, 25_000, torch.device("cpu"))
    >>> e.parts["gradients"] / 1e9, e.parts["their LU"] / 1e9
    (3.2, 3.2)
    >>> estimate_complement(20_000, 25_000, torch.device("cpu"), replay=True).parts["gradients"]
    0.0
    """
    parts = {
        "gradients": 0.0 if replay else BYTES * float(D) * D,
        "their LU": BYTES * float(D) * D,
        "one batch of brackets": BYTES * WORKSPACE * VMAP_BATCH * float(D + n_out),
    }
    return Estimate(sum(parts.values()), points * COMPLEMENT_FLOPS * float(D) ** 3 / matmul_rate(device), parts)


_RATES: dict[str, float] = {}


def matmul_rate(device: torch.device) -> float:
    """Float64 matrix-product rate (flop/s) of ``device``, timed once a process on products of side ``RATE_PROBE``
    (``GPU_RATE_PROBE`` on a GPU): the fastest of three, the rate a long factorization keeps up over a load that
    comes and goes."""
    key = str(device)
    if key not in _RATES:
        n = RATE_PROBE if device.type == "cpu" else GPU_RATE_PROBE
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen, dtype=torch.float64).to(device)
        (a @ a).sum().item()  # warm-up (and CUDA's lazy initialization)
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            (a @ a).sum().item()
            seconds.append(time.perf_counter() - start)
        _RATES[key] = 2 * n**3 / max(min(seconds), 1e-9)
    return _RATES[key]


def available_memory(device: torch.device) -> float | None:
    """Bytes ``device`` has free now: ``torch.cuda.mem_get_info`` on a GPU, the system's available memory on a CPU.

    ``None`` where it cannot be read (no psutil and no ``/proc/meminfo``).

    Examples
    ========
    >>> available_memory(torch.device("cpu")) > 0
    True
    """
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    try:
        import psutil

        return float(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The device to count on: ``None`` is the CPU; ``"cuda"`` must exist (``ValueError`` otherwise).

    Examples
    ========
    >>> resolve_device(None), resolve_device("cpu")
    (device(type='cpu'), device(type='cpu'))
    """
    try:
        resolved = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {device!r}") from err
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} was asked for, but torch sees no CUDA device here: use device='cpu'")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}: there are only {torch.cuda.device_count()} CUDA devices")
    elif resolved.type != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {device!r}")
    return resolved


def check_fits(need: Estimate, D: int, device: torch.device, max_memory: float | None) -> None:
    """:class:`TooLarge` naming the estimate and what to do, when it exceeds ``max_memory`` (default: free memory).

    Examples
    ========
    >>> check_fits(estimate(100, 200, True, torch.device("cpu")), 100, torch.device("cpu"), max_memory=1e9)
    >>> check_fits(estimate(50_000, 60_000, False, torch.device("cpu")), 50_000, torch.device("cpu"), 8e9)
    Traceback (most recent call last):
    ...
    conslaw_lite.counting.budget.TooLarge: count_laws would need about 23.6 GB ...
    """
    limit = max_memory
    source = "max_memory"
    if limit is None:
        free = available_memory(device)
        if free is None:
            return  # nothing to compare with: counted as asked
        limit, source = HEADROOM * free, f"{HEADROOM:.0%} of the memory free on {device.type}"
    if need.bytes <= limit:
        return
    side = int(D * (limit / need.bytes) ** 0.5)  # the memory grows as D²
    raise TooLarge(
        f"count_laws would need about {need.describe()} for D = {D:,} parameters, more than the {_size(limit)} "
        f"allowed ({source}). A narrower model of the same architecture has the same law structure (its count "
        f"per unit, head or layer is the same): count one with D ≲ {side:,}; or count on a GPU with "
        f"device='cuda'; or pass max_memory=<bytes> if more memory is in fact free"
    )


def _size(b: float) -> str:
    return f"{b / 1e9:.1f} GB" if b >= 1e9 else f"{b / 1e6:.0f} MB"


def duration(seconds: float) -> str:
    """Seconds as a reader counts them.

    Examples
    ========
    >>> duration(42.4), duration(2700), duration(9000)
    ('42 s', '45 min', '2.5 h')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
