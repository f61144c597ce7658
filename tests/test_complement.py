"""The rank through its complement (above 8,192 parameters): same counts as the basis, bounds that hold."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conslaw_lite.counting import count, count_laws
from conslaw_lite.counting.budget import TooLarge, estimate_complement
from conslaw_lite.counting.complement import _LU, MARGIN, Buffers, Gradients, _Depth1, complement_rank, first_width
from conslaw_lite.counting.sample_sizes import MIN_OUTPUTS
from conslaw_lite.families.toy.block import ToyProduct


@pytest.fixture
def complement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every count through the complement, as above ``STACK_MAX_D`` parameters."""
    monkeypatch.setattr(count, "COMPLEMENT_MIN_D", 0)


def net(d: int, r: int, m: int, act: type[nn.Module] | None = nn.ReLU, bias: bool = False) -> nn.Sequential:
    torch.manual_seed(0)
    middle = [act()] if act is not None else []
    return nn.Sequential(nn.Linear(d, r, bias=bias), *middle, nn.Linear(r, m, bias=bias))


@pytest.mark.parametrize(
    ("model", "shape", "laws"),
    [
        (ToyProduct(a=1.0, b=2.0), (1,), 1),
        (net(4, 6, 3), (4,), 6),  # one law per ReLU unit
        (net(8, 16, 4, bias=True), (8,), 16),
        (net(3, 5, 2, nn.GELU), (3,), 0),  # rank D: nothing dropped
    ],
    ids=["toy", "relu", "relu-bias", "gelu"],
)
def test_the_complement_counts_what_the_basis_counts(complement, model, shape, laws) -> None:
    result = count_laws(model, shape)
    assert result.conclusive and result.num_laws == laws and result.evidence == "complement"
    assert result.sigma_kept > 1e4 * result.sigma_dropped


def test_brackets_shrink_the_complement_of_the_gradients(complement) -> None:
    """A linear net 12 → 12 → 12: the gradients leave GL(12) free (144 directions, over the first width 64, so the
    LU is redone wider); the brackets cut that to the r(r+1)/2 = 78 laws."""
    model = net(12, 12, 12, act=None)
    D = sum(p.numel() for p in model.parameters())
    assert first_width(D) < 12 * 12
    result = count_laws(model, (12,))
    assert result.conclusive and result.num_laws == 78
    assert result.ranks_by_depth[0] == D - 144 and result.ranks_by_depth[1] == D - 78


def test_the_bounds_hold_on_a_known_spectrum() -> None:
    """A = X diag(σ) Yᵀ of rank D − 5, σ from 1 down to 10⁻³: Z is its null space, the dropped bound is round-off,
    the kept bound lies between σ_{D−5} / MARGIN and σ_{D−5} itself."""
    gen = torch.Generator().manual_seed(0)
    D, n = 300, 5
    X, _ = torch.linalg.qr(torch.randn(D, D, generator=gen, dtype=torch.float64))
    Y, _ = torch.linalg.qr(torch.randn(D, D, generator=gen, dtype=torch.float64))
    sigma = torch.cat([torch.logspace(0, -3, D - n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)])
    first = _Depth1(Gradients.of((X * sigma) @ Y.T), gen)
    null = Y[:, D - n :]
    assert first.N == n and torch.linalg.matrix_norm(null.T @ first.Z, ord=-2) > 1 - 1e-9  # the same subspace
    assert torch.linalg.matrix_norm(first.A @ first.Z, ord=2) < 1e-11  # 10⁸ below σ_{D−5}
    kept = first.kept(gen)
    assert sigma[D - n - 1] / MARGIN <= kept <= sigma[D - n - 1]



def test_an_exactly_singular_lu_is_redone_wider(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero pivot (p below N₁) would make every solve inf: the LU is redone with p four times wider."""
    gen = torch.Generator().manual_seed(0)
    D, n = 300, 5
    X, Y = (torch.randn(D, D - n, generator=gen, dtype=torch.float64) for _ in range(2))
    A = X @ Y.T  # rank D − n
    widths, factor = [], _LU.__init__

    def first_singular(lu: _LU, M: torch.Tensor) -> None:
        factor(lu, M)
        widths.append(None)
        lu.singular = lu.singular or len(widths) == 1

    monkeypatch.setattr(_LU, "__init__", first_singular)
    first = _Depth1(Gradients.of(A / D), gen)
    assert len(widths) == 2 and first.N == n and first.solved_B.shape[1] == 4 * first_width(D)


def test_the_lu_factors_in_place_and_solves_both_ways() -> None:
    """No copy of M (its memory holds the factors) and the solves of M and Mᵀ against torch's plain solve."""
    gen = torch.Generator().manual_seed(0)
    M = torch.randn(50, 50, generator=gen, dtype=torch.float64)
    b = torch.randn(50, 3, generator=gen, dtype=torch.float64)
    factored = M.clone()
    lu = _LU(factored)
    assert lu.lu.data_ptr() == factored.data_ptr() and not torch.equal(factored, M)
    for transposed in (False, True):
        x = lu.solve(b, transposed)
        assert torch.allclose(x, torch.linalg.solve(M.T if transposed else M, b), atol=1e-10)


def test_every_theta_reuses_the_buffers_and_reports_its_stages() -> None:
    """A linear net 3 → 2 → 3 (D = 12, N = 3) twice in the same buffers: the same rank; the bar hears of the
    gradients and the LU before the first rank."""
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    f = lambda t: (x @ t[:6].reshape(2, 3).T @ t[6:].reshape(3, 2).T).reshape(-1)  # noqa: E731
    buffers, calls = Buffers(12, torch.device("cpu")), []
    for seed in (1, 2):
        theta = torch.randn(12, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        gen = torch.Generator().manual_seed(seed)
        r = complement_rank(f, theta, 48, gen, [6, 6], lambda *a: calls.append(a), buffers)
        assert r.rank == 9 and r.sigma_kept > 1e4 * r.sigma_dropped
    assert calls[:3] == [(1, 0, "gradients 0/12"), (1, 0, "LU of the 12 gradients"), (1, 8)]  # depth 2 adds 1
    calls.clear()  # the gradients not stored: drawn into the LU's memory, and the LU named after them
    complement_rank(f, theta, 48, gen, [6, 6], lambda *a: calls.append(a), Buffers(12, torch.device("cpu"), True))
    assert calls[:3] == [(1, 0, "gradients 0/12"), (1, 0, "LU of the 12 gradients"), (1, 8)]


def test_where_the_gradients_and_their_lu_do_not_fit_the_lu_alone_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the LU alone and the gradients with it, the gradients are replayed at each use: the same count;
    below the LU alone, a refusal naming its size."""
    monkeypatch.setattr(count, "COMPLEMENT_MIN_D", 0)
    model, cpu, replays = net(4, 6, 3), torch.device("cpu"), []
    both = estimate_complement(42, MIN_OUTPUTS, cpu, count.NUM_POINTS).bytes
    alone = estimate_complement(42, MIN_OUTPUTS, cpu, count.NUM_POINTS, replay=True).bytes
    assert both == alone + 8 * 42**2
    spy = lambda D, device, replay: replays.append(replay) or Buffers(D, device, replay)  # noqa: E731
    monkeypatch.setattr(count, "Buffers", spy)
    result = count_laws(model, (4,), max_memory=(alone + both) / 2)
    assert result.conclusive and result.num_laws == 6 and result.evidence == "complement" and replays == [True]
    with pytest.raises(TooLarge, match=r"would need about .* for D = 42 parameters"):
        count_laws(model, (4,), max_memory=alone * 0.99)
