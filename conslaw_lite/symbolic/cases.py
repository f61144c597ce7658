"""Blocks written for :func:`conslaw_lite.symbolic.derive`, held against their torch modules.

A family's ``symbolic.py`` writes its block as a :class:`SymbolicBlock`: the outputs ``f``, the
parameters, the inputs, the ``identities`` of its undefined functions and the ``through``
quantities (a head sees Q_i, K_i only through ``M_i = Q_i K_iᵀ``), plus where each parameter lives
in the torch module of the same block (:attr:`SymbolicBlock.torch_entries`), so
:func:`compare_with_closed_form` can hold the derived laws against :func:`conslaw_lite.laws.laws_of`.
A :class:`Case` is such a block at one size with the family's formula; :func:`case` finds it
in the registered families (:mod:`conslaw_lite.families`), :func:`case_names` lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp
import torch
from torch import nn

Entry = tuple[str, tuple[int, ...]]  # (torch parameter name, index)


@dataclass(frozen=True)
class SymbolicBlock:
    """A block ready for :func:`~conslaw_lite.symbolic.derive` (``derive(*block.args, **block.kwargs)``)."""

    f: list[sp.Expr]
    params: list[sp.Symbol]
    inputs: list[sp.Symbol]
    identities: dict = field(default_factory=dict)
    through: dict[sp.Symbol, sp.Expr] = field(default_factory=dict)
    torch_entries: dict[sp.Symbol, Entry] = field(default_factory=dict)
    note: str = ""

    def derive(self, seed: int = 0):
        """:func:`conslaw_lite.symbolic.derive` on this block.

        Examples
        ========
        >>> case("ffn-relu").block.derive().num_laws  # one law per hidden unit: r = 2
        2
        """
        from conslaw_lite.symbolic import derive

        return derive(
            self.f, self.params, self.inputs, self.identities or None, through=self.through or None, seed=seed
        )


def symbol_matrix(name: str, rows: int, cols: int, start: int = 1) -> sp.Matrix:
    """A rows×cols matrix of real symbols ``{name}{row}{col}``, indices counted from ``start``.

    Examples
    ========
    >>> symbol_matrix("Q1_", 1, 2), symbol_matrix("x_", 1, 1, start=0)
    (Matrix([[Q1_11, Q1_12]]), Matrix([[x_00]]))
    """
    return sp.Matrix(rows, cols, lambda r, c: sp.Symbol(f"{name}{r + start}{c + start}", real=True))




# ---------------------------------------------------------------- attention










# ---------------------------------------------------------------- mixture of experts






# ---------------------------------------------------------------- derived laws against the closed forms


@dataclass(frozen=True)
class Comparison:
    """Ranks, as functions of θ, of the derived laws, of the closed forms, and of each side and both
    together with the products P of the derived linear laws (laws too, that one side may list).

    The two lists describe the same laws iff ``[derived, P]``, ``[closed, P]`` and all together
    have one rank.
    """

    derived: int
    closed_form: int
    derived_and_products: int
    closed_and_products: int
    joint: int

    @property
    def same(self) -> bool:
        return self.derived_and_products == self.closed_and_products == self.joint


def compare_with_closed_form(laws: list[sp.Expr], block: SymbolicBlock, model: nn.Module, seed: int = 0) -> Comparison:
    """Evaluate the derived laws and :func:`~conslaw_lite.laws.laws_of` at the same random θ, many times.

    Each θ is drawn in float64, written into the module's parameters through
    :attr:`SymbolicBlock.torch_entries` and into the sympy laws; the ranks of the value
    matrices (points × laws) are compared. Enough points are taken to tell every quadratic
    polynomial apart (more than the number of monomials of degree ≤ 2). Products of linear
    laws (a key bias b_k is conserved, so is b_k b_kᵀ) join the derived side: the derived
    basis leaves them out, a closed form may include them.

    Examples
    ========
    >>> c = case("ffn-relu")
    >>> compare_with_closed_form(c.block.derive().laws, c.block, c.module).same
    True
    """
    from conslaw_lite.laws import laws_of

    params = block.params
    D = len(params)
    points = (D + 1) * (D + 2) // 2 + 16
    linear = [h for h in laws if sp.Poly(h, *params).total_degree() == 1]
    products = [sp.expand(u * v) for i, u in enumerate(linear) for v in linear[i:]]  # laws too, left out of the basis
    fn = sp.lambdify(params, laws + products, modules="numpy")
    gen = torch.Generator().manual_seed(seed)
    derived, closed, n_laws = [], [], len(laws)
    for _ in range(points):
        theta = torch.randn(D, dtype=torch.float64, generator=gen)
        with torch.no_grad():
            for value, p in zip(theta, params):
                name, index = block.torch_entries[p]
                model.get_parameter(name)[index] = value
        derived.append(np.asarray(fn(*theta.tolist()), dtype=float).reshape(-1))
        closed.append(
            np.concatenate([v.detach().reshape(-1).numpy() for v in laws_of(model).values()] or [np.zeros(0)])
        )
    values = np.array(derived).reshape(points, -1)
    A, P, B = values[:, :n_laws], values[:, n_laws:], np.array(closed).reshape(points, -1)
    rank = lambda *Ms: _rank(np.hstack(Ms))  # noqa: E731
    return Comparison(rank(A), rank(B), rank(A, P), rank(B, P), rank(A, B, P))


def _rank(M: np.ndarray) -> int:
    return int(np.linalg.matrix_rank(M, tol=1e-8 * max(1.0, np.abs(M).max()))) if M.size else 0


# ---------------------------------------------------------------- the cases of the book


@dataclass(frozen=True)
class Case:
    """A block at one size: its sympy form, its torch module, one input's shape, and the theory's N."""

    block: SymbolicBlock
    module: nn.Module
    input_shape: tuple[int, ...]
    formula: int
    formula_text: str
    sizes: dict[str, int] = field(default_factory=dict)


def case_names() -> tuple[str, ...]:
    """The derivation cases of every registered family, family by family.

    Examples
    ========
    >>> names = case_names()
    >>> "swiglu" in names, "mha-rope" in names, "moe-top1" in names
    (True, True, True)
    """
    from conslaw_lite.families import registered  # the families build on this module's types

    return tuple(name for family in registered() for name in family.cases)


def case(name: str, size: str = "small") -> Case:
    """The derivation case ``name`` (one of :func:`case_names`) at the ``"small"`` size (seconds) or ``"large"``.

    The family that lists ``name`` builds it, with its formula for N.

    Examples
    ========
    >>> c = case("swiglu")
    >>> c.formula_text, c.input_shape
    ('r = 2', (2,))
    >>> case("cnn")
    Traceback (most recent call last):
    ...
    ValueError: unknown case 'cnn'; valid: ...
    """
    from conslaw_lite.families import registered

    if size not in ("small", "large"):
        raise ValueError(f"size must be 'small' or 'large', got {size!r}")
    for family in registered():
        if name in family.cases:
            return family.case(name, size)
    raise ValueError(f"unknown case {name!r}; valid: {', '.join(case_names())}")
