"""Symmetry orbits: the group action behind each family of laws, and moving θ along it.

Every law of the book comes from a group acting on a block's parameters without changing
its output. Each family writes its action down in its folder (``families/<name>/orbits.py``), keyed by the
block's type (:func:`register_orbit`), with
coordinates ξ of the group near the identity (ξ = 0 leaves θ as it is):

* toy ``a·b·x``: ``a → e^{ξ}a, b → e^{−ξ}b`` (``a → e^{Σ_j ξ_j}a, θ_j → e^{−ξ_j}θ_j`` with more factors);
* ReLU FFN and SwiGLU, per hidden unit i: ``A_{:,i} → e^{ξ_i}A_{:,i}``, ``B_{i,:} → e^{−ξ_i}B_{i,:}``
  (C for SwiGLU; the bias of the rescaled row goes with it);
* linear FFN: ``A → A Eᵀ``, ``[B, b] → E^{−ᵀ}[B, b]`` with ``E ∈ GL(r)``;
* attention, per head: ``Q_i → Q_i Eᵀ, K_i → K_i E^{−1}`` and ``V_i → V_i Fᵀ, O_i → O_i F^{−1}``
  (``G = Eᵀ`` is the book's ``Q → QG, K → KG^{−ᵀ}``); with RoPE one scale per 2×2 block of Q/K;
* softmax MoE gate: ``W_e → W_e + v`` for every expert e.

An :class:`Orbit` is one block's action, made of independent :class:`Piece` s. Each piece knows
its laws ``h`` (the registry's, entry for entry) and how to reach a level ``h = t`` along the
orbit: in closed form for rescalings and the shift, by Newton's method for ``GL(k)`` (each step
a k×k eigendecomposition) and for products of three or more factors (:func:`newton`).
:func:`orbits_of` refuses any block whose laws are known but whose action
is not written: a guessed action would move θ off the orbit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from conslaw_lite import find_blocks
from conslaw_lite.families import registered

Params = Mapping[str, torch.Tensor]  # θ by the model's own parameter names, float64


def balance_root(up: torch.Tensor, down: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The ``u = λ² > 0`` with ``up·u − down/u = target``: the rescaling that moves a unit to its level.

    ``u = (t + √(t² + 4·up·down)) / (2·up)``, computed as ``2·down / (√(…) − t)`` when t < 0
    (no cancellation). A unit with ``up = 0`` or ``down = 0`` has no such orbit: it gets u = 1.

    Examples
    ========
    ``a² = 4, b² = 1``: reaching ``a²u − b²/u = 0`` takes ``u = 1/2`` (a → a/√2, b → √2 b: both 2).

    >>> balance_root(torch.tensor([4.0]), torch.tensor([1.0]), torch.tensor([0.0])).tolist()
    [0.5]
    """
    s = torch.sqrt(target * target + 4 * up * down)
    u = torch.where(target >= 0, (target + s) / (2 * up), 2 * down / (s - target))
    return torch.where((up > 0) & (down > 0), u, torch.ones_like(u))


def newton(
    residual: Callable[..., torch.Tensor],
    xi: torch.Tensor,
    *args: torch.Tensor,
    tol: float,
    iterations: int = 30,
) -> torch.Tensor:
    """Solve ``residual(ξ_i, *args_i) = 0`` by Newton's method for each row i of ξ (m, n) and of each arg.

    ``residual`` maps one row to its residual vector; the rows are independent systems (one per
    attention head) solved together. Each step is the least-norm one, ``Δ = −J⁺ r``, halved
    until ``‖r‖`` falls; it stops once every row has ``‖r‖ ≤ tol``. Raises ``RuntimeError``
    saying how far it got if it does not.

    Examples
    ========
    >>> root = newton(lambda x, c: x * x - c, torch.ones(2, 1, dtype=torch.float64),
    ...               torch.tensor([[2.0], [9.0]], dtype=torch.float64), tol=1e-14)
    >>> root.flatten().tolist()[1], round(float(root[0]), 12)
    (3.0, 1.414213562373)
    """
    value = torch.func.vmap(residual)
    jacobian = torch.func.vmap(torch.func.jacrev(residual))
    r = value(xi, *args)
    norm = torch.linalg.vector_norm(r, dim=1)
    for _ in range(iterations):
        if bool((norm <= tol).all()):
            return xi
        step = -(torch.linalg.pinv(jacobian(xi, *args)) @ r[..., None])[..., 0]  # (m, n)
        alpha = torch.ones_like(norm)
        for _ in range(40):  # backtracking, row by row: a full Newton step may overshoot far from the level
            trial = xi + alpha[:, None] * step
            r_trial = value(trial, *args)
            norm_trial = torch.linalg.vector_norm(r_trial, dim=1)
            better = (norm_trial < norm) | (norm <= tol)
            if bool(better.all()):
                break
            alpha = torch.where(better, alpha, alpha / 2)
        xi, r, norm = trial, r_trial, norm_trial
    if bool((norm <= tol).all()):
        return xi
    raise RuntimeError(
        f"Newton's method left a residual {float(norm.max()):.2e} > {tol:.1e} after {iterations} steps "
        "(is the level on this orbit?)"
    )


# ---------------------------------------------------------------- pieces of an orbit


@dataclass(frozen=True)
class Slot:
    """Where a piece reads units in a parameter: its name, the axis that runs over units, and entries per unit."""

    name: str
    axis: int = 0
    width: int = 1

    def units(self, p: torch.Tensor, n: int) -> torch.Tensor:
        """The parameter as (n units, entries of each)."""
        return p.reshape(1, -1) if p.dim() == 0 else p.movedim(self.axis, 0).reshape(n, -1)

    def scale(self, p: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        """``p`` with unit i multiplied by ``factor[i]``."""
        if p.dim() == 0:
            return p * factor.reshape(())
        shape = [1] * p.dim()
        shape[self.axis] = -1
        return p * factor.repeat_interleave(self.width).reshape(shape)


@dataclass(frozen=True)
class Rescaling:
    """Per unit i: ``up → e^{ξ_i} up``, ``down → e^{−ξ_i} down``; law ``‖up_i‖² − ‖down_i‖²`` (n laws)."""

    up: tuple[Slot, ...]
    down: tuple[Slot, ...]
    n: int
    description: str

    @property
    def size(self) -> int:
        return self.n

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.up + self.down)

    def _squares(self, p: Params, slots: tuple[Slot, ...]) -> torch.Tensor:
        return sum((s.units(p[s.name], self.n) ** 2).sum(1) for s in slots)

    def laws(self, p: Params) -> torch.Tensor:
        return self._squares(p, self.up) - self._squares(p, self.down)

    def act(self, p: Params, xi: torch.Tensor) -> dict[str, torch.Tensor]:
        up, down = torch.exp(xi), torch.exp(-xi)
        moved = {s.name: s.scale(p[s.name], up) for s in self.up}
        return moved | {s.name: s.scale(p[s.name], down) for s in self.down}

    def level(self, p: Params, target: torch.Tensor) -> torch.Tensor:
        return 0.5 * torch.log(balance_root(self._squares(p, self.up), self._squares(p, self.down), target))

    def dilated(self, s: float) -> torch.Tensor:
        return torch.full((self.n,), s, dtype=torch.float64)


@dataclass(frozen=True)
class GramPair:
    """Per head i: ``P_i → P_i Eᵀ``, ``R_i → R_i E^{−1}``, ``E = I + X_i ∈ GL(k)``; law ``P_iᵀP_i − R_iᵀR_i`` (k×k).

    ``get`` reads the stacked (m, rows, k) matrices P and R from θ, ``put`` writes them back in the
    parameters' own layout. The coordinates are ``X = E − I`` (k² per head): any element a level
    solve composes is written exactly, without a matrix logarithm.
    """

    get: Callable[[Params], tuple[torch.Tensor, torch.Tensor]]
    put: Callable[[Params, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]
    m: int
    k: int
    names: tuple[str, ...]
    description: str

    @property
    def size(self) -> int:
        return self.m * self.k * self.k

    def laws(self, p: Params) -> torch.Tensor:
        P, R = self.get(p)
        return (P.mT @ P - R.mT @ R).reshape(-1)

    def act(self, p: Params, xi: torch.Tensor) -> dict[str, torch.Tensor]:
        E = torch.eye(self.k, dtype=xi.dtype, device=xi.device) + xi.reshape(self.m, self.k, self.k)
        P, R = self.get(p)
        return self.put(p, P @ E.mT, R @ torch.linalg.inv(E))

    def level(self, p: Params, target: torch.Tensor, *, iterations: int = 30) -> torch.Tensor:
        """Newton's method in the symmetric directions ``E = I + X``, ``X = Xᵀ``: each step solves the
        linearised ``X S + S X = H − (M − N)``, ``S = M + N``, in S's eigenbasis (a k×k eigendecomposition),
        halving X until the residual falls, and composes the steps."""
        P, R = self.get(p)
        M, N = P.mT @ P, R.mT @ R  # (m, k, k): the Gram matrices are all the solve needs
        H = target.reshape(self.m, self.k, self.k)
        # each head to 1e-14 of its own level, or to round-off (a few ulps of its Gram matrices) if that is larger
        roundoff = 8 * torch.finfo(M.dtype).eps * (torch.linalg.matrix_norm(M) + torch.linalg.matrix_norm(N))
        tol = torch.maximum(1e-14 * torch.linalg.matrix_norm(H), roundoff)
        eye = torch.eye(self.k, dtype=M.dtype, device=M.device)
        total = eye.expand(self.m, -1, -1)
        norm = torch.linalg.matrix_norm(H - (M - N))
        for _ in range(iterations):
            if bool((norm <= tol).all()):
                return self._coordinates(total)
            s, U = torch.linalg.eigh(M + N)
            X = U @ ((U.mT @ (H - (M - N)) @ U) / (s[:, :, None] + s[:, None, :])) @ U.mT
            alpha = torch.ones_like(norm)
            for _ in range(40):  # far from the level a full step may overshoot: halve it, head by head
                E = eye + alpha[:, None, None] * X  # symmetric, and the identity to first order: a Newton step
                E_inv = torch.linalg.inv(E)
                M_new, N_new = E @ M @ E, E_inv @ N @ E_inv
                norm_new = torch.linalg.matrix_norm(H - (M_new - N_new))
                better = ((norm_new < norm) & torch.isfinite(norm_new)) | (norm <= tol)
                if bool(better.all()):
                    break
                alpha = torch.where(better, alpha, alpha / 2)
            M, N, norm, total = M_new, N_new, norm_new, E @ total
        if bool((norm <= tol).all()):
            return self._coordinates(total)
        raise RuntimeError(
            f"the level solve left a residual {float((norm / tol).max()):.1e} times its tolerance after {iterations} "
            "Newton steps "
            "(is the level on this orbit?)"
        )

    def _coordinates(self, E: torch.Tensor) -> torch.Tensor:
        """``X = E − I``, refusing an E so ill-conditioned that the level is only reached as E → ∞."""
        cond = float(torch.linalg.cond(E).amax())
        if not cond < 1e10:
            raise RuntimeError(
                f"the level solve ran off to an element of condition number {cond:.1e}: the level is only "
                "reached in the limit (is the level on this orbit?)"
            )
        return (E - torch.eye(self.k, dtype=E.dtype, device=E.device)).reshape(-1)

    def dilated(self, s: float) -> torch.Tensor:
        return ((math.exp(s) - 1) * torch.eye(self.k, dtype=torch.float64)).expand(self.m, -1, -1).reshape(-1)


@dataclass(frozen=True)
class Shift:
    """Every row of the weight ``name`` (n_E, d) moves by the same ``v``: ``W_e → W_e + v``; law ``Σ_e W_e``."""

    name: str
    rows: int
    d: int
    description: str

    @property
    def size(self) -> int:
        return self.d

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def laws(self, p: Params) -> torch.Tensor:
        return p[self.name].sum(0)

    def act(self, p: Params, xi: torch.Tensor) -> dict[str, torch.Tensor]:
        return {self.name: p[self.name] + xi[None]}

    def level(self, p: Params, target: torch.Tensor) -> torch.Tensor:
        return (target - self.laws(p)) / self.rows

    def dilated(self, s: float) -> torch.Tensor:
        return torch.zeros(self.d, dtype=torch.float64)  # a translation scales nothing


@dataclass(frozen=True)
class ProductScales:
    """``f = θ_0·θ_1···θ_J·x``: ``θ_0 → e^{Σ_j ξ_j}θ_0``, ``θ_j → e^{−ξ_j}θ_j``; laws ``θ_0² − θ_j²`` (Newton)."""

    factors: tuple[str, ...]
    n: int  # models in the ensemble (1 for scalars)
    description: str

    @property
    def size(self) -> int:
        return (len(self.factors) - 1) * self.n

    @property
    def names(self) -> tuple[str, ...]:
        return self.factors

    def laws(self, p: Params) -> torch.Tensor:
        first, *rest = (p[f].reshape(-1) for f in self.factors)
        return torch.cat([first**2 - t**2 for t in rest])

    def act(self, p: Params, xi: torch.Tensor) -> dict[str, torch.Tensor]:
        s = xi.reshape(len(self.factors) - 1, self.n)
        first, *rest = self.factors
        moved = {first: p[first] * torch.exp(s.sum(0)).reshape(p[first].shape)}
        return moved | {f: p[f] * torch.exp(-s[j]).reshape(p[f].shape) for j, f in enumerate(rest)}

    def level(self, p: Params, target: torch.Tensor) -> torch.Tensor:
        scale = float(sum((p[f] ** 2).sum() for f in self.factors))

        def residual(xi: torch.Tensor) -> torch.Tensor:  # one system: every factor's law at once
            return self.laws({**p, **self.act(p, xi)}) - target

        return newton(residual, torch.zeros(1, self.size, dtype=torch.float64), tol=1e-13 * scale)[0]

    def dilated(self, s: float) -> torch.Tensor:
        return torch.full((self.size,), s, dtype=torch.float64)


Piece = Rescaling | GramPair | Shift | ProductScales


@dataclass(frozen=True)
class Orbit:
    """The symmetry group of one block: its path in the model, its family and its independent pieces."""

    path: str
    kind: str
    pieces: tuple[Piece, ...]

    @property
    def description(self) -> str:
        """The group in words, piece by piece."""
        return "; ".join(piece.description for piece in self.pieces)


# ---------------------------------------------------------------- one action per known block type

Builder = Callable[[nn.Module, str], "tuple[Piece, ...]"]
_BUILDERS: dict[type, Builder] = {}


def register_orbit(t: type) -> Callable[[Builder], Builder]:
    """Register ``builder(module, prefix) -> pieces`` as the group action of modules of exactly type ``t``.

    Exact type, not subclasses: a subclass may compute something else with the same weights. Each family
    registers its own, in its folder's ``orbits.py``.
    """

    def decorate(builder: Builder) -> Builder:
        _BUILDERS[t] = builder
        return builder

    return decorate


def supported_types() -> list[str]:
    """The block types whose group action is written here.

    Examples
    ========
    >>> "SwiGLU" in supported_types(), "MultiHeadAttention" in supported_types()
    (True, True)
    """
    registered()  # the families register their actions when they are loaded
    return sorted(t.__name__ for t in _BUILDERS)


def orbits_of(model: nn.Module) -> list[Orbit]:
    """The symmetry orbit of every block of ``model`` with laws, in :func:`~conslaw_lite.laws.find_blocks` order.

    Raises ``ValueError`` for a model without known laws, and for a block whose laws are known but
    whose action is not written here (never a guessed action). Blocks without laws (GELU, SiLU,
    sigmoid gating) have no symmetry and are left out.

    Examples
    ========
    >>> from conslaw_lite.families.ffn.block import FFN
    >>> [(o.path, o.kind, o.description) for o in orbits_of(nn.Sequential(FFN(3, 4, 2, activation="relu")))]
    [('0', 'ffn-relu', "per-unit rescaling of A's columns against B's rows")]
    >>> orbits_of(nn.Linear(2, 2))
    Traceback (most recent call last):
    ...
    ValueError: no block with known conservation laws in Linear; supported module types: ...
    """
    registered()  # the families register their actions when they are loaded
    orbits = []
    for block in find_blocks(model, required=True):
        module = model.get_submodule(block.path)
        builder = _BUILDERS.get(type(module))
        if builder is None:
            if block.laws:
                raise ValueError(
                    f"block {block.path or '(the model)'} ({type(module).__name__}, laws of kind {block.kind!r}): no "
                    f"group action is written for it; known: {', '.join(supported_types())}. Refusing rather than "
                    "guessing one"
                )
            continue
        pieces = builder(module, f"{block.path}." if block.path else "")
        if pieces:
            orbits.append(Orbit(block.path, block.kind, pieces))
    if not orbits:
        raise ValueError(f"{type(model).__name__} has no block with a symmetry to move along (no laws)")
    moved = [name for o in orbits for piece in o.pieces for name in piece.names]
    if len(set(moved)) < len(moved):
        raise ValueError(f"two orbits of {type(model).__name__} move the same parameter: {sorted(moved)}")
    return orbits


def pieces_of(orbits: list[Orbit]) -> list[Piece]:
    """Every piece of every orbit, in order: the coordinates ξ of the whole group are theirs, concatenated."""
    return [piece for orbit in orbits for piece in orbit.pieces]


def act(pieces: list[Piece], p: Params, xi: torch.Tensor) -> dict[str, torch.Tensor]:
    """θ moved by the group element of coordinates ξ (all pieces' coordinates, concatenated): the moved parameters.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> toy = ToyProduct(a=2.0, b=1.0)
    >>> p = {n: t.detach() for n, t in toy.named_parameters()}
    >>> moved = act(pieces_of(orbits_of(toy)), p, torch.tensor([0.5], dtype=torch.float64))
    >>> round(float(moved["a"] * moved["b"]), 12), round(float(moved["a"]), 4)  # a·b kept, a → e^0.5 a
    (2.0, 3.2974)
    """
    out, start = {}, 0
    for piece in pieces:
        out |= piece.act(p, xi[start : start + piece.size])
        start += piece.size
    if start != xi.numel():
        raise ValueError(f"ξ has {xi.numel()} coordinates, the group {start}")
    return out


def laws(pieces: list[Piece], p: Params) -> list[torch.Tensor]:
    """Each piece's laws at θ, flat: the quantities the orbit moves (and the projection keeps)."""
    return [piece.laws(p) for piece in pieces]


def level_coordinates(pieces: list[Piece], p: Params, targets: list[torch.Tensor]) -> torch.Tensor:
    """The ξ that moves θ to the level ``h = targets`` along the orbit (closed form or Newton, piece by piece)."""
    return torch.cat([piece.level(p, t) for piece, t in zip(pieces, targets)])


def dilation(pieces: list[Piece], s: float) -> torch.Tensor:
    """The ξ that scales each piece's first side up by e^s and the other down by e^s: it unbalances θ."""
    return torch.cat([piece.dilated(s) for piece in pieces])


def parameters64(model: nn.Module, names: set[str] | None = None) -> dict[str, torch.Tensor]:
    """θ (or its parameters in ``names``) as ``{name: float64 copy}``: the orbit's arithmetic is done in double."""
    return {
        n: p.detach().to(torch.float64, copy=True)
        for n, p in model.named_parameters()
        if names is None or n in names
    }


def write(model: nn.Module, moved: Mapping[str, torch.Tensor]) -> None:
    """Copy the moved parameters into ``model``, in place, each in its own dtype."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in moved.items():
            params[name].copy_(value)


def move_to_level(model: nn.Module, targets: list[torch.Tensor] | None = None) -> None:
    """Move ``model`` in place along its orbit to the level ``h = targets`` (``None``: h = 0, the balanced point).

    ``targets`` are the pieces' laws, as :func:`laws` returns them at the point to come back to.
    The output is unchanged for every input; only the split of it among the factors moves.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> toy = ToyProduct(a=2.0, b=0.5)
    >>> move_to_level(toy)  # a² − b² = 0 at the same product a·b = 1
    >>> round(toy.a.item(), 12), round(toy.b.item(), 12)
    (1.0, 1.0)
    """
    pieces = pieces_of(orbits_of(model))
    p = parameters64(model)
    if targets is None:
        targets = [torch.zeros_like(h) for h in laws(pieces, p)]
    write(model, act(pieces, p, level_coordinates(pieces, p, targets)))
