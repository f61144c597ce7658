"""Whole-network laws of a timm ``VisionTransformer``: its norms, its stream and its embeddings.

The blocks' own laws (attention, MLP) come from their finders. What ties the network
together, for timm's pre-norm ``Block`` without LayerScale:

* **Norm gains** (:func:`~conslaw_lite.families.network.laws.gain_law`): ``norm1`` feeds the
  attention's input projections, ``norm2`` the MLP's first layer(s), the final ``norm``
  (or ``fc_norm``) the head: ``γ_j² + β_j² − Σ_i ‖W_i[:, j]‖²``.
* **Stream shifts.** Every reader of the residual stream is a LayerNorm of one token,
  which subtracts that token's mean, so each writer may add ``1aᵀ``: the column sums of
  the patch projection (and ``1ᵀ`` of its bias), of the attention output and of the MLP's
  last layer are conserved, and so is the sum over channels of each class token and of each
  row of the position table (each token is shifted on its own).
* **Embeddings that only enter as a sum.** The class token and its row of the position
  table are added, so ``cls − pos[0]`` is conserved; the patch bias is added to every
  patch's row, so ``Σ_t pos[t] − b`` (over the patches) is conserved.

Their number, for one block with d channels, n heads of width k, an MLP of width r, P patches
and a class token: the blocks' ``n k(k+1) + r``, ``3d`` gains, ``C p² + 1 + 1 + (P + 1) + nk + r``
shifts and ``2d − 2`` new embedding laws (two of the 2d are sums of shifts). The law counter
certifies the list on a one-block ViT (chapter 11).

The finder checks each condition it relies on and leaves out the laws whose condition fails
(a post-norm block, LayerScale, an RMSNorm, a resampled position table, attention pooling, a norm of the patch
embedding, which the patch bias passes through before the position table is added):
then :func:`~conslaw_lite.counting.check_laws` reports the list as incomplete rather than wrong.
"""

from __future__ import annotations

from torch import nn

from conslaw_lite.dropout_masks import inactive_dropouts
from conslaw_lite.families.network.couplings import NormCoupling
from conslaw_lite.families.network.laws import add_gain_law, column_sum_law
from conslaw_lite.laws import BlockLaws, Law, Params, qualified_name, register_laws, say_once

TIMM_BLOCK = "timm.models.vision_transformer.Block"  # pre-norm: x + ls1(attn(norm1(x))), x + ls2(mlp(norm2(x)))
INPUT_PROJECTIONS = ("Q", "K", "V", "qkv", "fc1", "fc1_g", "fc1_x")  # the book's attention, timm's, timm's MLPs
OUTPUT_PROJECTIONS = ("O", "proj", "fc2")
CHANNELWISE_POOLS = ("", "token", "avg", "max", "avgmax")  # timm's global_pool that treat each channel on its own


def channel_sum_law(name: str) -> Law:
    """``Σ_c E[..., c]``: the sum over the last (channel) axis of a token table, one law per token.

    Examples
    ========
    >>> import torch
    >>> channel_sum_law("pos")({"pos": torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])}).tolist()
    [[3.0, 7.0]]
    """
    return lambda p: p[name].sum(dim=-1)


def embedding_sum_law(token: str, table: str, rows: slice, *, summed: bool = False) -> Law:
    """``token − table[0, rows]`` (or ``token − Σ_t table[0, t]`` over ``rows`` when ``summed``): one law per channel.

    Examples
    ========
    >>> import torch
    >>> p = {"cls": torch.tensor([[[1.0, 1.0]]]), "pos": torch.tensor([[[0.5, 0.0], [1.0, 2.0], [3.0, 4.0]]])}
    >>> embedding_sum_law("cls", "pos", slice(0, 1))(p).tolist()
    [[[0.5, 1.0]]]
    >>> p["b"] = torch.tensor([4.0, 6.0])   # b − (pos[1] + pos[2])
    >>> embedding_sum_law("b", "pos", slice(1, 3), summed=True)(p).tolist()
    [0.0, 0.0]
    """

    def law(p: Params):  # negative axes: the monitor evaluates several records at once on a leading axis
        if summed:  # a bias (d,) against the sum of the rows (1, T, d)[0, rows]
            return p[token] - p[table][..., 0, rows, :].sum(-2)
        return p[token] - p[table][..., 0:1, rows, :]  # a token (1, 1, d) against rows (1, 1, d)

    return law


def _is_layer_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) and module.weight is not None


def _children(module: nn.Module, names: tuple[str, ...]) -> list[str]:
    return [n for n in names if isinstance(getattr(module, n, None), nn.Linear)]


def _pre_norm_blocks(vit: nn.Module) -> bool:
    return all(qualified_name(type(b)) == TIMM_BLOCK for b in vit.blocks)


def _stream_is_normalized(vit: nn.Module) -> bool:
    """Each reader of the stream is a per-token LayerNorm, each writer adds unscaled (no LayerScale): 1 stays 1."""
    final = _final_norm(vit)
    return (
        _pre_norm_blocks(vit)
        and all(isinstance(b.ls1, nn.Identity) and isinstance(b.ls2, nn.Identity) for b in vit.blocks)
        and all(_is_layer_norm(b.norm1) and _is_layer_norm(b.norm2) for b in vit.blocks)
        and isinstance(vit.norm_pre, nn.Identity)
        and final is not None
        and getattr(vit, "attn_pool", None) is None
        and vit.global_pool in ("token", "avg")
    )


def _norm_laws(vit: nn.Module, prefix: str, laws: dict[str, Law], controls: dict[str, Law]) -> None:
    if _pre_norm_blocks(vit):
        for i, block in enumerate(vit.blocks):
            for norm, sub in (("norm1", "attn"), ("norm2", "mlp")):
                readers = tuple(f"blocks.{i}.{sub}.{r}" for r in _children(getattr(block, sub), INPUT_PROJECTIONS))
                if _is_layer_norm(getattr(block, norm)) and readers:
                    coupling = NormCoupling(f"blocks.{i}.{norm}", readers)
                    add_gain_law(laws, controls, prefix, coupling, getattr(block, norm))
    final = _final_norm(vit)
    if final is not None and isinstance(vit.head, nn.Linear):
        add_gain_law(laws, controls, prefix, NormCoupling(final, ("head",)), getattr(vit, final))


def _final_norm(vit: nn.Module) -> str | None:
    """The LayerNorm the head reads: ``fc_norm`` after pooling, else ``norm`` before a pooling that keeps each
    channel apart (a token, a mean, a maximum: not attention pooling, whose keys and values mix the channels);
    None if neither is one."""
    final = "fc_norm" if _is_layer_norm(vit.fc_norm) else "norm" if isinstance(vit.fc_norm, nn.Identity) else None
    if final == "norm" and (getattr(vit, "attn_pool", None) is not None or vit.global_pool not in CHANNELWISE_POOLS):
        return None  # global_pool="map": the norm feeds the pooling's attention, not the head (γ² − ‖W‖² drifted)
    return final if final is not None and _is_layer_norm(getattr(vit, final)) else None


def _tensors(layer: nn.Module, path: str) -> list[str]:
    return [f"{path}.{w}" for w in ("weight", "bias") if getattr(layer, w, None) is not None]


def _shift_laws(vit: nn.Module, prefix: str, laws: dict[str, Law]) -> None:
    writers = _tensors(vit.patch_embed.proj, "patch_embed.proj")
    for i, block in enumerate(vit.blocks):
        for sub in ("attn", "mlp"):
            for name in _children(getattr(block, sub), OUTPUT_PROJECTIONS):
                writers += _tensors(getattr(getattr(block, sub), name), f"blocks.{i}.{sub}.{name}")
    for name in writers:
        laws[f"1ᵀ{name}"] = column_sum_law(prefix + name, vit.get_parameter(name).ndim)
    for table in ("cls_token", "reg_token", "pos_embed"):
        if getattr(vit, table, None) is not None:
            laws[f"Σ_c {table}"] = channel_sum_law(prefix + table)


def _embedding_laws(vit: nn.Module, prefix: str, laws: dict[str, Law]) -> None:
    if vit.pos_embed is None or vit.dynamic_img_size:
        return
    start = 0 if vit.no_embed_class else vit.num_prefix_tokens  # the table's first patch row
    table = prefix + "pos_embed"
    row = 0
    for token in ("cls_token", "reg_token") if not vit.no_embed_class else ():
        if getattr(vit, token, None) is not None:
            rows = slice(row, row + getattr(vit, token).shape[1])
            laws[f"{token} − pos_embed[{rows.start}:{rows.stop}]"] = embedding_sum_law(prefix + token, table, rows)
            row = rows.stop
    patch_norm = getattr(vit.patch_embed, "norm", None)
    if getattr(vit.patch_embed.proj, "bias", None) is not None and isinstance(patch_norm, (nn.Identity, type(None))):
        bias = prefix + "patch_embed.proj.bias"  # added to each patch's row before any norm: against the table's
        laws["patch bias − Σ_t pos_embed[patches]"] = embedding_sum_law(bias, table, slice(start, None), summed=True)


def _stream_dropouts(vit: nn.Module) -> tuple[str, ...]:
    """The dropouts on the stream, after each of its writers: the position table's, and each block's after its
    attention's and its MLP's output projection. Their masks turn a writer's shift 1aᵀ into m ∘ 1aᵀ, which no
    LayerNorm removes; the others (on attention weights, inside the MLP, before the head, DropPath's one scalar a
    sample) keep the shifts."""
    return ("pos_drop", *(f"blocks.{i}.{d}" for i in range(len(vit.blocks)) for d in ("attn.proj_drop", "mlp.drop2")))


@register_laws("timm.models.vision_transformer.VisionTransformer")
def _timm_vit(vit: nn.Module, prefix: str) -> BlockLaws | None:
    laws: dict[str, Law] = {}
    controls: dict[str, Law] = {}
    _norm_laws(vit, prefix, laws, controls)
    dropouts = inactive_dropouts(vit, _stream_dropouts(vit))
    if _stream_is_normalized(vit) and dropouts is None:
        where = prefix.rstrip(".") or "the model"
        shifts = "the shifts a LayerNorm removes (1ᵀW of each writer, Σ_c of the tokens), left out"
        say_once(vit, f"VisionTransformer at {where} has stream dropouts in train mode: their masks break {shifts}")
    elif _stream_is_normalized(vit):
        _shift_laws(vit, prefix, laws)
    _embedding_laws(vit, prefix, laws)
    return BlockLaws("network", laws, controls, train_breaks=dropouts or ()) if laws else None
