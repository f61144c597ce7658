"""Helpers for graders: is a student's proposed law conserved, and how many laws are there?

Both are thin, readable wrappers around the law counter
(:func:`conslaw_lite.counting.check_laws`, :func:`conslaw_lite.counting.count_laws`):
the criterion ``⟨∇h(θ), ∇_θ f_i(x; θ)⟩ = 0`` at random θ and inputs, and the
number of independent laws ``N = D − dim Lie(W)(θ)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from conslaw_lite.counting import RESIDUAL_TOL, LawCheck, check_laws, count_laws
from conslaw_lite.laws import Law


@dataclass(frozen=True)
class Verdict:
    """A graded law: ``conserved`` (criterion holds to round-off, and h is not constant), with the evidence."""

    name: str
    conserved: bool
    residual: float  # largest relative |⟨∇h, ∇f_i(x)⟩| over random θ and inputs
    independent: int  # how many of the law's entries are functionally independent (0: a constant)
    num_laws: int | None  # the model's number of laws N (None if the count was inconclusive)
    message: str

    def __str__(self) -> str:
        return self.message


def _message(name: str, check: LawCheck) -> tuple[bool, str]:
    total = "N unknown (inconclusive count)" if check.num_laws is None else f"the model has N = {check.num_laws}"
    if check.independent == 0:
        return False, f"{name}: CONSTANT — its gradient is zero, so it is conserved trivially and is not a law; {total}"
    if check.max_residual > RESIDUAL_TOL:
        return False, (
            f"{name}: NOT CONSERVED — ⟨∇h, ∇f⟩ reaches {check.max_residual:.2g} of ‖∇h‖‖∇f‖ "
            f"(round-off would be ≤ {RESIDUAL_TOL:g}); {total}"
        )
    return True, (
        f"{name}: CONSERVED — ⟨∇h, ∇f⟩ ≤ {check.max_residual:.1e} of ‖∇h‖‖∇f‖ (round-off); "
        f"{check.independent} independent entr{'y' if check.independent == 1 else 'ies'}; {total}"
    )


def grade_law(model: nn.Module, law: Law, input_shape: tuple[int, ...], *, name: str = "h") -> Verdict:
    """Grade one proposed law ``h(θ)`` (a function of ``{param_name: tensor}``) of ``model``.

    Conserved means: the criterion holds to round-off at random θ and inputs, and h
    is not a constant. The verdict also says how many laws the model has in all.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> toy = ToyProduct(a=1.0, b=2.0)
    >>> print(grade_law(toy, lambda p: p["a"] ** 2 - p["b"] ** 2, (1,), name="a²−b²"))  # doctest: +ELLIPSIS
    a²−b²: CONSERVED — ⟨∇h, ∇f⟩ ≤ ... of ‖∇h‖‖∇f‖ (round-off); 1 independent entry; the model has N = 1
    >>> grade_law(toy, lambda p: p["a"] * p["b"], (1,)).conserved
    False
    """
    if not callable(law):
        raise TypeError(f"law must be a function of the parameter dict, got {type(law).__name__}")
    check = check_laws(model, {name: law}, input_shape)
    conserved, message = _message(name, check)
    return Verdict(name, conserved, check.max_residual, check.independent, check.num_laws, message)


def how_many_laws(model: nn.Module, input_shape: tuple[int, ...], *, seed: int = 0) -> int:
    """The number of independent conservation laws of ``model``, ``N = D − dim Lie(W)(θ)``.

    Raises ``RuntimeError`` with the counter's reason when the rank has no clear gap.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> how_many_laws(ToyProduct(a=1.0, b=2.0, c=3.0), (1,))  # a² − b², a² − c²
    2
    """
    count = count_laws(model, input_shape, seed=seed)
    if not count.conclusive:
        raise RuntimeError(f"the count is inconclusive: {count.reason}")
    return count.num_laws
