"""The group that keeps multi-head latent attention's output, acting on its parameters (chapter 15).

Each factor is the symmetry behind one family of laws (:mod:`.laws`); :func:`move` applies any of them:

* ``G_Q`` ∈ GL(d_cq): ``DQ → G DQ``, ``UQ → UQ G⁻¹``, ``QR → QR G⁻¹`` (under the latent norm only a
  diagonal G, acting on the gain γ_Q instead of DQ); ``G_KV`` ∈ GL(d_c) likewise on DKV, UK, UV;
* ``A_h`` ∈ GL(k) per head: ``UQ_h → A_h UQ_h``, ``UK_h → A_h^(−ᵀ) UK_h`` (keeps ``UQ_hᵀ UK_h``);
* ``B_h`` ∈ GL(k_v) per head: ``UV_h → B_h UV_h``, ``O_h → O_h B_h⁻¹``;
* ``s`` ∈ (R_{>0})^(d_r/2): block j of every head's RoPE query times s_j, of the shared RoPE key over s_j
  (a scale commutes with the rotations; a different scale per head would not keep the shared key).
"""

from __future__ import annotations

import torch

from conslaw_lite.families.mla.block import LatentAttention
from conslaw_lite.laws import Params


def _latent(
    p: dict[str, torch.Tensor], G: torch.Tensor, down: str, ups: tuple[str, ...], gain: str | None
) -> None:
    G_inv = torch.linalg.inv(G)
    if gain is None:
        p[down] = G @ p[down]
    else:
        if not torch.equal(G, torch.diag(torch.diagonal(G))):
            raise ValueError(f"under the latent RMSNorm only a diagonal G keeps the output (it moves {gain})")
        p[gain] = torch.diagonal(G) * p[gain]
    for up in ups:
        p[up] = p[up] @ G_inv


def move(
    module: LatentAttention,
    params: Params,
    *,
    G_Q: torch.Tensor | None = None,
    G_KV: torch.Tensor | None = None,
    A: torch.Tensor | None = None,
    B: torch.Tensor | None = None,
    s: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The parameters moved by the group element (G_Q, G_KV, A (n, k, k), B (n, k_v, k_v), s (d_r/2,)).

    Examples
    ========
    >>> mla = LatentAttention(4, n_heads=2, head_dim=1, v_dim=1, rope_dim=2, kv_rank=2, q_rank=2).double()
    >>> p = dict(mla.named_parameters())
    >>> X = torch.randn(1, 3, 4, dtype=torch.float64)
    >>> G = torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    >>> moved = move(mla, p, G_KV=G, s=torch.tensor([3.0], dtype=torch.float64))
    >>> y, y_moved = torch.func.functional_call(mla, p, X), torch.func.functional_call(mla, moved, X)
    >>> bool(torch.allclose(y, y_moved))
    True
    """
    n, k, k_v, d_r = module.n_heads, module.head_dim, module.v_dim, module.rope_dim
    p = {name: t.detach().clone() for name, t in params.items()}
    norm = module.latent_norm
    if G_Q is not None:
        _latent(p, G_Q, "DQ.weight", ("UQ.weight", "QR.weight"), "gamma_q" if norm else None)
    if G_KV is not None:
        _latent(p, G_KV, "DKV.weight", ("UK.weight", "UV.weight"), "gamma_kv" if norm else None)
    if A is not None:  # UQ (n·k, d_cq) -> (n, k, d_cq)
        UQ, UK = p["UQ.weight"].view(n, k, -1), p["UK.weight"].view(n, k, -1)
        p["UQ.weight"] = (A @ UQ).reshape(n * k, -1)
        p["UK.weight"] = (torch.linalg.inv(A).mT @ UK).reshape(n * k, -1)
    if B is not None:  # UV (n·k_v, d_c) -> (n, k_v, d_c); O (d, n·k_v) -> (n, d, k_v)
        UV, O = p["UV.weight"].view(n, k_v, -1), p["O.weight"].view(-1, n, k_v).transpose(0, 1)
        p["UV.weight"] = (B @ UV).reshape(n * k_v, -1)
        p["O.weight"] = (O @ torch.linalg.inv(B)).transpose(0, 1).reshape(-1, n * k_v)
    if s is not None:
        per_row = s.repeat_interleave(2)  # (d_r,): block j is rows 2j, 2j+1
        p["QR.weight"] = (p["QR.weight"].view(n, d_r, -1) * per_row[:, None]).reshape(n * d_r, -1)
        p["KR.weight"] = p["KR.weight"] / per_row[:, None]
    return p
