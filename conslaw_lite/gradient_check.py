"""Whether training steps along the loss's gradient: ⟨∇h(θ), g⟩ = 0 for each watched law h and g in ``.grad``.

Every law of gradient flow has ``⟨∇h(θ), ∇L(θ)⟩ = 0``, whatever the loss and the batch. A gradient edited between
``backward()`` and the optimizer is not ∇L, and the laws drift at first order in τ: ``clip_grad_value_``, a clip of
some layers only, a hook on a gradient registered after the monitor started, a penalty such as L2 written into the
loss (``2λθ`` in g: ``⟨∇h, 2λθ⟩ = 4λh`` for a quadratic law), a parameter frozen after the start (no ``.grad``: a zero
in its place). The monitor cannot see these in the optimizer, so it checks the gradient itself, at calls 2 and 3,
then every :data:`CHECKS` calls (1,003, 2,003, ...), until one fails: θ is kept at one call of
:meth:`GradientCheck.step`, and at the next ``.grad`` holds the g that was computed there. Each entry of each law gives

    ⟨∇h, g⟩ = Σᵢ aᵢ,   aᵢ = ∂h/∂θᵢ · gᵢ,

as ``(h(θ + v) − h(θ − v)) / 2`` with ``v = s g``, ``‖v‖ = ‖θ‖``: exact for a law of degree ≤ 2 (every block's law
and every law found) whatever s, so the differences are large and their round-off small. Its terms' size ‖a‖ is the
root mean square of the same sum with random signs, ``Σᵢ ±aᵢ``, over :data:`SIGNS` draws. The sum along 2v must be
twice the sum along v: an entry where it is not, to :data:`CONSISTENT` of its terms' size (a law of higher degree, or
round-off), is not judged. For the loss's gradient the sum is round-off of its terms (10⁻¹⁶ of them in float64,
10⁻⁷ in float32); an edit gives a sum of the order of its terms. Where the monitor is called before the optimizer
steps, g was computed at θ now, and with a second backward between two optimizers' steps (GAN-style) at θ before
the second: so the sum is also taken there (θ is kept before each step after the first, :data:`BETWEEN` at most),
and the smallest is judged. Where .grad passes, the step is judged too: a parameter with a gradient that stood still
while others moved (one that no optimizer steps, its .grad still the loss's after ``model.zero_grad()``) took g with
its part taken out, and the laws are judged along that; it is named if it still has not moved :data:`STILL` calls
later (one stepped every other step moves).
A check that finds .grad empty though θ moved (``zero_grad()`` before the call) says so once. A gradient computed in
16 bits (fp16 or bf16 tensors, or float32 ones under autocast, every entry a 16-bit number) is not judged: its
round-off reaches the tolerance (3·10⁻² of the terms under bf16 autocast). A check evaluates the laws at 2 (2 + SIGNS)
points, two at a time, as the monitor's records (:mod:`conslaw_lite.snapshots`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from conslaw_lite.law_stacks import Plan
from conslaw_lite.snapshots import Snapshots
from conslaw_lite.step_hooks import Holders, listen
from conslaw_lite.watch_conditions import listed

SIGNS = 4  # random-sign draws for the terms' size: below 10⁻⁴ of it with probability ~10⁻⁸ an entry (χ², 4 dof)
TOL = 1e-2  # a sum above this share of its terms' size: the gradient is not the loss's (float32 round-off: 10⁻⁶;
# clip_grad_value_, an L2 penalty of 10⁻³, a layer's gradient doubled: 0.3 to 1)
CONSISTENT = 1e-5  # the sums along v and 2v agree to this share of the terms' size where an entry is judged
FLOOR = 1e-4  # of the largest terms' size: below it, an entry's terms are a gradient that is round-off of zero (a
# key bias, whose law is each of its entries: the sum is one term, as large as itself)
CAUSES = (
    "a loss term that reads inside the model (an L2 penalty, an auxiliary loss on hidden units), an edit between "
    "backward() and the optimizer (clip_grad_value_, a clip of some layers only, a hook registered after the Monitor "
    "started), a parameter that no optimizer zeroes (its .grad adds up), or monitor.step() not called once after each "
    "optimizer step (Monitor(every=n) records less often)"
)
ROUNDED = 0.1  # a share up to this may be the round-off of a gradient computed under bf16 autocast (0.01 to 0.03)
ROUNDED_CAUSE = (
    "; at this share, also the round-off of a gradient computed under 16-bit autocast and then scaled (clipped) or "
    "accumulated (monitor.gradients_in_16_bits() turns this check off)"
)
SEEN, LOW_BITS = 16, 0x1FFF  # a float32 gradient whose SEEN non-zero entries all have these bits zero is 16-bit: by
# chance with probability 2⁻²⁰⁸
EMPTY = (
    "the check of the gradient found .grad empty at step {step} though θ moved: monitor.step() comes after "
    "zero_grad(); call it after optimizer.step() and before zero_grad() for edits of the gradient to be named"
)
STILL = 20  # calls after a checked step at which the parameters that stood still over it are looked at again: one
# stepped every other step (GAN-style, up to STILL steps apart) moves again, and keeps its laws at second order
BETWEEN = 3  # θ kept before at most this many steps after the first between two calls (one optimizer per layer)
FIRST, CHECKS = 2, 1000  # checks at calls 2 and 3 (θ kept at 1 and 2), then every CHECKS calls: an edit that starts
# late is named within CHECKS steps, for 12–43 ms a check on transformers' tiny Qwen3 (0.2 % of their steps)


class GradientCheck:
    """Judges ``.grad`` of ``theta`` (the parameters ``read``, in order) against the laws of ``plan``, as the monitor
    evaluates them: ``per_law`` takes a value per entry of a record to each law's largest, ``names`` and ``judged``
    name each law and say whether it is one (not a control).

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.law_stacks import stack_sources
    >>> net = nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU(), nn.Linear(3, 1, bias=False))
    >>> units = lambda p: p["0.weight"].square().sum(1) - p["2.weight"].square().sum(0)
    >>> theta = dict(net.named_parameters())
    >>> plan = stack_sources([(units, [0])], {n: p.detach().double() for n, p in theta.items()})
    >>> check = GradientCheck(plan, sorted(theta), list(theta.values()), lambda e: e.max(keepdims=True), ["unit"])
    >>> def step(scale: float) -> str | None:
    ...     net.zero_grad()
    ...     net(torch.randn(8, 2)).square().mean().backward()
    ...     net[2].weight.grad *= scale  # 1: the loss's gradient
    ...     return check.step()
    >>> step(1.0), step(1.0)  # θ kept at the first call, g judged at the second
    (None, None)
    >>> step(2.0)  # the next check, at call 3: one layer's gradient doubled  # doctest: +ELLIPSIS
    "the gradient in .grad is not the loss's for the laws `unit`: ⟨∇h, g⟩ reaches ... at step 3; it comes from ..."
    """

    def __init__(
        self,
        plan: Plan,
        read: list[str],
        theta: list[torch.Tensor],
        per_law: Callable[[np.ndarray], np.ndarray],
        names: list[str],
        judged: np.ndarray | None = None,
        given: bool = False,
        seed: int = 0,
    ) -> None:
        self.plan, self.read, self.theta, self.per_law, self.names = plan, read, theta, per_law, names
        self.judged = np.ones(len(names), dtype=bool) if judged is None else judged
        self.given = given  # the laws are the user's own, unchecked: one may be no law at all
        self.calls, self.next = 0, FIRST
        self.rounded = False  # the gradient is computed in 16 bits (mixed precision): its round-off is not judged
        self.kept: list[torch.Tensor] | None = None
        self.between: list[list[torch.Tensor]] = []  # θ before each step since θ was kept (a gradient computed there)
        self.stepping = 0  # steps begun since θ was kept
        self._held = Holders(theta)
        listen(self)
        self.generator = torch.Generator().manual_seed(seed)
        self.edited = False  # the last message says .grad is not the loss's gradient (not that θ or .grad stood still)
        self.empty_said = False  # the note on a .grad emptied before the call, said once
        self.still: tuple[int, list[int], list[str], torch.Tensor] | None = None  # parameters that stood still over a
        # checked step while the laws moved for it: since which call, their indices, the laws, θ's fingerprints then

    def step(self) -> str | None:
        """Count a call; at a check, why ``.grad`` is not the loss's gradient for the laws, or why the step is not
        (None where they are, or where there is no ``.grad`` to judge)."""
        self.calls += 1
        why = None
        if self.still is not None and self.calls == self.still[0] + STILL:
            why, self.still = self._still_since(*self.still), None
        if self.calls == self.next:
            kept, self.kept = self.kept, None
            why = why or (self._judged(kept) if kept is not None else None)
            self.between = []
            self.next = -1 if why and why != EMPTY else self.calls + (1 if self.calls == FIRST else CHECKS)
            if why == EMPTY:
                why, self.empty_said = (None if self.empty_said else EMPTY.format(step=self.calls)), True
        if self.calls == self.next - 1:
            self.kept, self.stepping = [p.detach().clone() for p in self.theta], 0
        return why

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        """Before a step, while θ is kept for a check: keep θ there too, where ``.grad`` may have been computed (a
        second backward after another optimizer's step, GAN-style). Not before the first: θ is still the one kept."""
        if self.kept is None or not self._held(optimizer):
            return
        self.stepping += 1
        if 1 < self.stepping <= BETWEEN + 1:
            self.between.append([p.detach().clone() for p in self.theta])

    def after(self, optimizer: torch.optim.Optimizer) -> None:
        """Nothing to keep after a step."""

    def _judged(self, kept: list[torch.Tensor]) -> str | None:
        grads = [p.grad if p.grad is None or not p.grad.is_sparse else p.grad.to_dense() for p in self.theta]
        self.edited = False
        if self.rounded:
            return None
        stood = [torch.equal(p.detach(), k) for p, k in zip(self.theta, kept, strict=True)]
        nonzero = [d is not None and bool(d.ne(0).any()) for d in grads]
        if not any(nonzero):  # zeroed after the step
            return None if all(stood) else EMPTY  # θ still: no training step between the calls (a skipped step)
        still = [] if all(stood) else [i for i, (s, n) in enumerate(zip(stood, nonzero, strict=True)) if s and n]
        if any(g is not None and (g.dtype in (torch.float16, torch.bfloat16) or _in_16_bits(g)) for g in grads):
            return None  # its round-off, 10⁻³ (fp16) to 3·10⁻² (bf16 autocast) of its terms, is the tolerance or more
        g = [torch.zeros_like(t, dtype=torch.float64) if d is None else d.double() for t, d in zip(kept, grads)]
        if not all(bool(v.isfinite().all()) for v in g):  # a step a GradScaler skips
            return None
        ring = Snapshots(self.plan, self.read, slots=2)  # two float64 copies of θ, for the check's time only
        g = [d.to(ring.slot[0][self.read[0]].device) for d in g]  # the monitor's device (device="cpu", a GPU model)
        shares = self._least_shares(ring, kept, g)
        moved = [f"`{name}`" for name, share in zip(self.names, shares, strict=True) if share > TOL]
        if not moved:
            self._unstepped(ring, kept, g, still)  # a parameter that stood still is looked at again STILL calls later
            return None
        self.edited = True
        frozen = [name for name, p in zip(self.read, self.theta, strict=True) if not p.requires_grad]
        measured = f"⟨∇h, g⟩ reaches {shares.max():.1g} of its terms' size ({TOL:.0e} allowed) at step {self.calls}"
        if frozen:
            why = f"{listed(frozen, 3)} {'was' if len(frozen) == 1 else 'were'} frozen (requires_grad=False)"
            return (
                f"the laws {listed(moved, 3)} read parameters .grad leaves out: {measured}; {why} after the start, "
                "and these laws drift at first order in τ"
            )
        causes = CAUSES + (ROUNDED_CAUSE if shares.max() <= ROUNDED else "")
        if self.given:
            return (
                f"the laws given {listed(moved, 3)} are not kept by the gradient in .grad: {measured}; either they "
                f"are not laws of this model (laws= are watched as given) or .grad is not the loss's gradient, from "
                f"one of: {causes}; ε measures how far they drift"
            )
        return (
            f"the gradient in .grad is not the loss's for the laws {listed(moved, 3)}: {measured}; it comes from one "
            f"of: {causes}; these laws drift at first order in τ, and ε measures how far"
        )

    def _unstepped(self, ring: Snapshots, kept: list[torch.Tensor], g: list[torch.Tensor], still: list[int]) -> None:
        """Note the parameters ``still``, which stood still over the step, their gradient not zero, while others
        moved, where the laws moved at first order for it (the step was ``g`` with their part taken out):
        :meth:`_still_since` looks again :data:`STILL` calls later."""
        if self.still is not None or not still:  # already noted: looked at again from the first
            return
        shares = self._least_shares(ring, kept, [torch.zeros_like(d) if i in still else d for i, d in enumerate(g)])
        moved = [f"`{name}`" for name, share in zip(self.names, shares, strict=True) if share > TOL]
        if moved:
            self.still = (self.calls - 1, still, moved, _fingerprints(kept))

    def _still_since(self, since: int, still: list[int], moved: list[str], then: torch.Tensor) -> str | None:
        """Why the laws ``moved`` drift, where the parameters ``still`` have not moved since call ``since`` while the
        others have (a layer stepped every other step, GAN-style, moves again: its laws are kept)."""
        now = _fingerprints(self.theta)
        same = (now == then).all(dim=1)
        if not bool(same[still].all()) or bool(same.all()):
            return None
        names = [self.read[i] for i in still]
        rounded = any(self.theta[i].dtype != torch.float64 for i in still)  # a step below half an ulp leaves θ as is
        return (
            f"the laws {listed(moved, 3)} read {listed(names, 3)}, which {'has' if len(names) == 1 else 'have'} not "
            f"moved from step {since} to step {self.calls} though {'its' if len(names) == 1 else 'their'} gradient is "
            "not zero, while the other parameters moved: no optimizer steps them (left out of its parameters, or a "
            "learning rate of 0)" + (", or their steps are below float32's resolution" if rounded else "")
            + "; these laws drift at first order in τ"
        )

    def _least_shares(self, ring: Snapshots, kept: list[torch.Tensor], g: list[torch.Tensor]) -> np.ndarray:
        """:meth:`_shares` at θ kept, and where one is above the tolerance the smallest of it and those at θ now and
        before each step since: g may have been computed at any of them (the monitor called before the optimizer, a
        second backward between two optimizers' steps)."""
        shares = self._shares(ring, kept, g)
        for theta in (self.theta, *self.between):
            if not (shares > TOL).any():
                break
            shares = np.minimum(shares, self._shares(ring, theta, g))
        return shares

    def _shares(self, ring: Snapshots, theta: list[torch.Tensor], g: list[torch.Tensor]) -> np.ndarray:
        """Each watched law's largest |⟨∇h, g⟩| over its terms' size at ``theta`` (0: not judged), evaluated in
        ``ring``, on whose device ``g`` lies."""
        at = [t.detach().to(g[0].device, torch.float64) for t in theta]
        scale = _norm(at) / max(_norm(g), torch.finfo(torch.float64).tiny)
        v = [scale * d for d in g]
        dot, twice = _sum(ring, at, v), _sum(ring, at, [2 * d for d in v])
        signed = [_sum(ring, at, [d * _signs(d, self.generator) for d in v]) for _ in range(SIGNS)]
        size = np.sqrt(np.mean(np.square(signed), axis=0))
        size = np.maximum(size, FLOOR * size.max(initial=0.0))  # a law of one term: its own gradient, round-off
        consistent = np.abs(twice - 2 * dot) <= CONSISTENT * size
        share = np.where(consistent & (size > 0), np.abs(dot) / np.where(size > 0, size, 1.0), 0.0)
        return np.where(self.judged, self.per_law(share), 0.0)


def _sum(ring: Snapshots, at: list[torch.Tensor], v: list[torch.Tensor]) -> np.ndarray:
    """``(h(at + v) − h(at − v)) / 2`` for every entry of every law."""
    with torch.inference_mode():
        ring.take([t + d for t, d in zip(at, v, strict=True)])
        ring.take([t - d for t, d in zip(at, v, strict=True)])
        h = ring.evaluate().cpu().numpy()
    return (h[0] - h[1]) / 2


def _in_16_bits(g: torch.Tensor) -> bool:
    """Whether a float32 gradient was computed under 16-bit autocast: at least :data:`SEEN` non-zero entries, each a
    float16 or bfloat16 number (its 13 lowest mantissa bits zero), as the matrix products of a layer give there.

    Examples
    ========
    >>> layer, x = torch.nn.Linear(4, 8), torch.randn(16, 4)
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     layer(x).square().mean().backward()
    >>> _in_16_bits(layer.weight.grad), _in_16_bits(torch.randn(32))
    (True, False)
    """
    if g.dtype != torch.float32:
        return False
    entries = g[g != 0]
    return len(entries) >= SEEN and bool((entries.view(torch.int32) & LOW_BITS).eq(0).all())


def _fingerprints(theta: list[torch.Tensor]) -> torch.Tensor:
    """Each tensor's sum and sum of squares, in float64 on the CPU: a step that moves it changes them."""
    return torch.stack([torch.stack([t.sum(), t.square().sum()]).cpu() for t in (p.detach().double() for p in theta)])


def _norm(tensors: list[torch.Tensor]) -> float:
    return float(torch.stack([t.square().sum() for t in tensors]).sum().sqrt())


def _signs(v: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return (torch.randint(0, 2, v.shape, generator=generator) * 2 - 1).to(v)
