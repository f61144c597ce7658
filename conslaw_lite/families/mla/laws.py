"""Laws of multi-head latent attention: a latent Gram law each, two per head, one per RoPE block.

The symmetries (every one found by the counter, nothing else: chapter 15). Without latent norms:

* the KV latent: ``c_KV → G c_KV`` (G ∈ GL(d_c)) with ``DKV → G DKV``, ``UK → UK G⁻¹``, ``UV → UV G⁻¹``;
  law ``DKV DKVᵀ − UKᵀUK − UVᵀUV`` (d_c×d_c);
* the query latent likewise (GL(d_cq)): ``DQ DQᵀ − UQᵀUQ − QRᵀQR`` (d_cq×d_cq);
* per head h, ``q_h^C → A q_h^C``, ``k_h^C → A^(−ᵀ) k_h^C``: ``UQ_h UQ_hᵀ − UK_h UK_hᵀ`` (k×k);
* per head h, ``v_h → B v_h``, ``O_h → O_h B⁻¹``: ``UV_h UV_hᵀ − O_hᵀO_h`` (k_v×k_v);
* the RoPE key is shared, so a scale commuting with the rotations must move every head's RoPE
  query at once: ``Σ_h ‖QR_h^(j)‖_F² − ‖KR^(j)‖_F²`` per 2×2 block j (d_r/2 laws).

With ``latent_norm`` (RMSNorm with gains γ_Q, γ_KV on the latents) only the diagonal of each GL
survives, as a scale moving between a gain and the columns it feeds:
``γ_Q,j² − ‖UQ[:, j]‖² − ‖QR[:, j]‖²`` and ``γ_KV,j² − ‖UK[:, j]‖² − ‖UV[:, j]‖²``; with ε = 0
the norm also forgets the scale of DQ and DKV, so ``‖DQ‖_F²`` and ``‖DKV‖_F²`` are laws too.

Controls (look-alikes that move): one half of each Gram law (``DKV DKVᵀ``, ``UQ_h UQ_hᵀ``, ...),
and under the norm the latent laws the block would have without it.
"""

from __future__ import annotations

import torch

from conslaw_lite.families.mla.block import LatentAttention
from conslaw_lite.laws import BlockLaws, Law, Params, register_laws


def gram_laws(r: int, s: int) -> int:
    """Independent entries of an r×r symmetric law ``AAᵀ − BᵀB`` whose neighbours have s columns/rows in all.

    ``r(r+1)/2`` when ``r ≤ s``; past that the law has rank ≤ s, which frees only
    ``r(r+1)/2 − (r−s)(r−s+1)/2`` entries (the bottleneck of linear nets, chapter 02).

    Examples
    ========
    >>> gram_laws(3, 4), gram_laws(3, 2)
    (6, 5)
    """
    extra = max(r - s, 0)
    return r * (r + 1) // 2 - extra * (extra + 1) // 2


def check_norm(rank: int, name: str, latent_norm: bool, norm_eps: float) -> None:
    """Refuse a latent of width 1 under an RMSNorm with ε = 0: it is its own sign, DQ (DKV) gets no gradient.

    Examples
    ========
    >>> check_norm(1, "q_rank", True, 0.0)
    Traceback (most recent call last):
    ...
    ValueError: q_rank = 1 under RMSNorm with ε = 0: the normalized latent is ±γ, ...
    """
    if latent_norm and norm_eps == 0 and rank < 2:
        raise ValueError(
            f"{name} = 1 under RMSNorm with ε = 0: the normalized latent is ±γ, its down-projection gets no "
            f"gradient and every entry of it is conserved; the laws here assume {name} ≥ 2"
        )


def formula(
    d: int, n: int, k: int, k_v: int, d_r: int, d_c: int, d_cq: int, *, latent_norm: bool = False, norm_eps: float = 0.0
) -> tuple[int, str]:
    """The number of laws of multi-head latent attention, and how it is counted (module docstring).

    ``N = S(d_cq, d + n(k+d_r)) + S(d_c, d + n(k+k_v)) + n·S(k, d_cq+d_c) + n·S(k_v, d_c+d) + d_r/2``
    with ``S(r, s)`` = :func:`gram_laws`; with ``latent_norm`` the two latent terms become
    ``d_cq + d_c`` (``+ 2`` when ε = 0). In the usual regime (every width at most the sum of its
    neighbours', as in DeepSeek-V2/V3) each S(r, ·) is r(r+1)/2.

    Examples
    ========
    >>> formula(6, 2, 2, 2, 2, 3, 3)
    (25, 'd_cq(d_cq+1)/2 + d_c(d_c+1)/2 + n·k(k+1)/2 + n·k_v(k_v+1)/2 + d_r/2 = 6 + 6 + 2·3 + 2·3 + 1 = 25')
    >>> formula(6, 2, 2, 2, 2, 3, 3, latent_norm=True, norm_eps=1e-6)[1]
    'd_cq + d_c + n·k(k+1)/2 + n·k_v(k_v+1)/2 + d_r/2 = 3 + 3 + 2·3 + 2·3 + 1 = 19'
    """
    for name, size in dict(d=d, n=n, k=k, k_v=k_v, d_c=d_c, d_cq=d_cq).items():
        if size < 1:
            raise ValueError(f"{name} must be a positive integer, got {size}")
    if d_r < 2 or d_r % 2:
        raise ValueError(f"d_r must be even and ≥ 2, got {d_r}")
    check_norm(d_cq, "q_rank", latent_norm, norm_eps)
    check_norm(d_c, "kv_rank", latent_norm, norm_eps)
    qk, vo = gram_laws(k, d_cq + d_c), gram_laws(k_v, d_c + d)
    capped = (qk, vo) != (k * (k + 1) // 2, k_v * (k_v + 1) // 2)
    if latent_norm:
        scale = 1 if norm_eps == 0 else 0
        latent, latent_text = d_cq + d_c + 2 * scale, f"{d_cq} + {d_c}" + (" + 2" if scale else "")
        names = "d_cq + d_c" + (" + 2" if scale else "")
    else:
        q, kv = gram_laws(d_cq, d + n * (k + d_r)), gram_laws(d_c, d + n * (k + k_v))
        latent, latent_text, names = q + kv, f"{q} + {kv}", "d_cq(d_cq+1)/2 + d_c(d_c+1)/2"
        capped = capped or (q, kv) != (d_cq * (d_cq + 1) // 2, d_c * (d_c + 1) // 2)
    N = latent + n * (qk + vo) + d_r // 2
    cap = " (capped by S: a width past its neighbours')" if capped else ""
    text = f"{names} + n·k(k+1)/2 + n·k_v(k_v+1)/2 + d_r/2{cap} = {latent_text} + {n}·{qk} + {n}·{vo} + {d_r // 2}"
    return N, f"{text} = {N}"


def _head_rows(W: torch.Tensor, n: int, width: int) -> torch.Tensor:
    """Row blocks h·width:(h+1)·width of W, stacked: (n, width, cols)."""
    return W.view(n, width, W.shape[-1])


def _block_sq(W: torch.Tensor) -> torch.Tensor:
    """``‖W^(j)‖_F²`` for the 2×2 blocks j = rows (2j, 2j+1) of W (d_r, cols): (d_r/2,)."""
    return (W * W).sum(-1).view(-1, 2).sum(-1)


def mla_laws(module: LatentAttention, prefix: str = "") -> tuple[dict[str, Law], dict[str, Law]]:
    """``(laws, controls)`` of one latent-attention block, keyed as in the module docstring.

    Examples
    ========
    >>> mla = LatentAttention(6, n_heads=2, head_dim=2, v_dim=2, rope_dim=2, kv_rank=3, q_rank=3).double()
    >>> laws, controls = mla_laws(mla)
    >>> list(laws)[:3], len(laws), len(controls)
    (['latentQ:DQDQᵀ−UQᵀUQ−QRᵀQR', 'latentKV:DKVDKVᵀ−UKᵀUK−UVᵀUV', 'head0:UQUQᵀ−UKUKᵀ'], 7, 7)
    >>> laws["rope:Σ‖QR⁽ʲ⁾‖²−‖KR⁽ʲ⁾‖²"](dict(mla.named_parameters())).shape  # one per 2×2 block
    torch.Size([1])
    """
    n, k, k_v, d_r = module.n_heads, module.head_dim, module.v_dim, module.rope_dim
    check_norm(module.q_rank, "q_rank", module.latent_norm, module.norm_eps)
    check_norm(module.kv_rank, "kv_rank", module.latent_norm, module.norm_eps)
    W = {m: prefix + f"{m}.weight" for m in ("DQ", "UQ", "QR", "DKV", "UK", "UV", "KR", "O")}
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}

    def latent(p: Params, down: str, ups: tuple[str, ...]) -> torch.Tensor:  # (rank, rank)
        return p[W[down]] @ p[W[down]].T - sum(p[W[u]].T @ p[W[u]] for u in ups)

    q_gram = lambda p: latent(p, "DQ", ("UQ", "QR"))  # noqa: E731
    kv_gram = lambda p: latent(p, "DKV", ("UK", "UV"))  # noqa: E731
    if module.latent_norm:
        gq, gkv = prefix + "gamma_q", prefix + "gamma_kv"
        laws["latentQ:γ_Q²−‖UQ‖²−‖QR‖²"] = lambda p: p[gq] ** 2 - (p[W["UQ"]] ** 2).sum(0) - (p[W["QR"]] ** 2).sum(0)
        laws["latentKV:γ_KV²−‖UK‖²−‖UV‖²"] = lambda p: p[gkv] ** 2 - (p[W["UK"]] ** 2).sum(0) - (p[W["UV"]] ** 2).sum(0)
        if module.norm_eps == 0:  # the norm forgets the scale of c: DQ → λDQ changes nothing
            laws["latentQ:‖DQ‖²"] = lambda p: (p[W["DQ"]] ** 2).sum()
            laws["latentKV:‖DKV‖²"] = lambda p: (p[W["DKV"]] ** 2).sum()
        controls["latentQ:DQDQᵀ−UQᵀUQ−QRᵀQR"], controls["latentKV:DKVDKVᵀ−UKᵀUK−UVᵀUV"] = q_gram, kv_gram
    else:
        laws["latentQ:DQDQᵀ−UQᵀUQ−QRᵀQR"], laws["latentKV:DKVDKVᵀ−UKᵀUK−UVᵀUV"] = q_gram, kv_gram
        controls["latentQ:DQDQᵀ"] = lambda p: p[W["DQ"]] @ p[W["DQ"]].T
        controls["latentKV:DKVDKVᵀ"] = lambda p: p[W["DKV"]] @ p[W["DKV"]].T
    for h in range(n):
        UQ = lambda p, h=h: _head_rows(p[W["UQ"]], n, k)[h]  # noqa: E731  (k, d_cq)
        UK = lambda p, h=h: _head_rows(p[W["UK"]], n, k)[h]  # noqa: E731  (k, d_c)
        UV = lambda p, h=h: _head_rows(p[W["UV"]], n, k_v)[h]  # noqa: E731  (k_v, d_c)
        O = lambda p, h=h: p[W["O"]][:, h * k_v : (h + 1) * k_v]  # noqa: E731  (d, k_v)
        laws[f"head{h}:UQUQᵀ−UKUKᵀ"] = lambda p, UQ=UQ, UK=UK: UQ(p) @ UQ(p).T - UK(p) @ UK(p).T
        laws[f"head{h}:UVUVᵀ−OᵀO"] = lambda p, UV=UV, O=O: UV(p) @ UV(p).T - O(p).T @ O(p)
        controls[f"head{h}:UQUQᵀ"] = lambda p, UQ=UQ: UQ(p) @ UQ(p).T
        controls[f"head{h}:UVUVᵀ"] = lambda p, UV=UV: UV(p) @ UV(p).T
    # QR (n·d_r, d_cq) -> (n, d_r, d_cq) -> block norms summed over heads: (d_r/2,)
    qr_blocks = lambda p: _block_sq(_head_rows(p[W["QR"]], n, d_r).transpose(0, 1).reshape(d_r, -1))  # noqa: E731
    laws["rope:Σ‖QR⁽ʲ⁾‖²−‖KR⁽ʲ⁾‖²"] = lambda p: qr_blocks(p) - _block_sq(p[W["KR"]])
    controls["rope:Σ‖QR⁽ʲ⁾‖²"] = qr_blocks
    return laws, controls


@register_laws(LatentAttention)
def _mla_block(module: LatentAttention, prefix: str) -> BlockLaws:
    kind = "mla" if not module.latent_norm else ("mla-norm" if module.norm_eps > 0 else "mla-norm-eps0")
    return BlockLaws(kind, *mla_laws(module, prefix))
