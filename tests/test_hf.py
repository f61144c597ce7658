"""transformers' Qwen3, Llama, Qwen3-MoE, Mistral and Qwen2: the adapters' laws against the counter, the float64
copies against transformers' own forward, options left out by name, and the Trainer and Lightning callbacks offline."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

INSTALL = "transformers is not installed: pip install 'conslaw_lite[hf]'"
transformers = pytest.importorskip("transformers", reason=INSTALL)

from conslaw_lite import Monitor, check_laws, count_laws, find_laws, law_functions, laws_of  # noqa: E402
from conslaw_lite.archs import ArchOptions, get_arch  # noqa: E402
from conslaw_lite.families.attention.laws import formula  # noqa: E402
from conslaw_lite.families.hf import attention, countable, moe  # noqa: E402
from conslaw_lite.families.hf.archs import tiny_model  # noqa: E402
from conslaw_lite.families.hf.callbacks import watch  # noqa: E402
from conslaw_lite.families.hf.exact import Float64Softmax  # noqa: E402
from conslaw_lite.laws import quantities  # noqa: E402

# The issue's size: d = 16, 4 query heads on 2 key/value heads of width 4.
ISSUE = ArchOptions(dim=16, heads=2, head_dim=4)
LINEAR_ROPE = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}  # positions divided by 2
LLAMA3_ROPE = {  # Llama 3.1's: low frequencies divided by 8, the middle ones smoothed (a short context, so both occur)
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,
    "rope_theta": 1e4,
}
YARN_ROPE = {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}  # cos and sin scaled by 1 + 0.1 ln 2
LAYER_TYPES = ["full_attention", "sliding_attention"]  # a model whose second layer has a sliding window


def _certified(module: torch.nn.Module, input_shape=None, inputs=None):
    """The count of ``module``'s countable copy, and check_laws of the adapters' laws on it (complete or not)."""
    probe = countable(module)
    count = count_laws(probe, input_shape, inputs=inputs)
    assert count.conclusive, count.reason
    check = check_laws(probe, law_functions(probe), input_shape, inputs=inputs, count=count)
    return count, check


def _perturb_gains(model: torch.nn.Module) -> None:
    """Norm gains away from their initial ones, so that no gain law starts at exactly 0."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch, config, qk_norm, eps",
    [
        ("qwen3", {}, True, 1e-6),  # GQA, RoPE, QK-norm with shared gains: k/2 + n_kv·k(k+1)/2 = 22
        ("qwen3", {"rms_norm_eps": 0.0}, True, 0.0),  # ε = 0: each query and key head's scale too: 28
        ("llama", {}, False, 1e-6),  # GQA, RoPE on rotate_half pairs: n_kv·k/2 + n_kv·k(k+1)/2 = 24
        ("llama", {"attention_bias": True}, False, 1e-6),  # biases extend the heads: the same count
        ("llama", {"rope_parameters": LINEAR_ROPE}, False, 1e-6),  # ω_j / factor: as distinct, the same blocks
        ("llama", {"rope_parameters": LLAMA3_ROPE}, False, 1e-6),  # other ω_j, as distinct: the same blocks
        ("llama", {"rope_parameters": YARN_ROPE}, False, 1e-6),  # a factor on cos and sin scales every score
        ("mistral", {"sliding_window": None}, False, 1e-6),  # Llama's attention under another name
        ("mistral", {"sliding_window": 2}, False, 1e-6),  # a window of 2 on 3 tokens masks scores: the same laws
        ("qwen2", {}, False, 1e-6),  # Llama's with biases on q, k and v (not on o)
    ],
)
def test_attention_count_agrees_with_the_closed_form_and_the_laws_are_complete(arch, config, qk_norm, eps) -> None:
    model = tiny_model(arch, ISSUE, **config)
    _perturb_gains(model)
    count, check = _certified(model.model.layers[0].self_attn, (3, ISSUE.dim))
    N, text = attention.formula(ISSUE.heads, ISSUE.head_dim, qk_norm=qk_norm, norm_eps=eps, n_heads=2 * ISSUE.heads)
    assert count.num_laws == N, text
    assert check.complete and check.independent == N, check


@pytest.mark.slow
def test_found_laws_of_a_biased_grouped_attention_print_as_its_matrix_law() -> None:
    # the null vectors of this block carry round-off of 5·10⁻⁹ (gap 2·10⁸): under 10⁻⁹ kept, it held two entries of
    # Ṽ Ṽᵀ − Σ O_iᵀ O_i mixed with the diagonal ones, whose terms no longer matched to be shortened away
    model = tiny_model("llama", ArchOptions(dim=8, heads=1, head_dim=4), attention_bias=True)
    found = find_laws(countable(model.model.layers[0].self_attn), (3, 8))
    assert found.complete and found.num_found == 12, found.message
    assert (
        "v_proj.weight v_proj.weightᵀ + v_proj.bias v_proj.biasᵀ − o_proj.weight[:, 0:4]ᵀ o_proj.weight[:, 0:4] − "
        "o_proj.weight[:, 4:8]ᵀ o_proj.weight[:, 4:8] (4×4)"
    ) in found.laws
    assert len(found.laws) == 2  # and the two RoPE block laws in one line


@pytest.mark.parametrize(
    "arch, config", [("qwen3", {}), ("llama", {}), ("llama", {"mlp_bias": True}), ("mistral", {}), ("qwen2", {})]
)
def test_mlp_is_swiglu_with_one_law_per_unit(arch, config) -> None:
    model = tiny_model(arch, ArchOptions(dim=6, hidden=4), **config)
    count, check = _certified(model.model.layers[0].mlp, (2, 6))
    assert count.num_laws == 4 and check.complete


@pytest.mark.parametrize(
    "act, kind, per_unit",
    [("gelu_pytorch_tanh", "glu-gelu_pytorch_tanh", 1), ("sigmoid", "glu-sigmoid", 1), ("relu", "reglu", 2),
     ("leaky_relu", "reglu", 2), ("relu6", "glu-relu6", 1)],
)  # fmt: skip
def test_an_mlp_on_another_gate_keeps_the_law_of_its_linear_branch(act, kind, per_unit) -> None:
    """Gemma's gelu_pytorch_tanh and every other gate had their MLP laws left out ("derived for SiLU"), though
    ‖down[:, i]‖² − ‖up[i, :]‖² needs nothing of the gate; a ReLU gate adds its own rescaling law per unit."""
    model = tiny_model("llama", ArchOptions(dim=6, hidden=4), hidden_act=act)
    mlp = model.model.layers[0].mlp
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out
        blocks = {q.block for q in quantities(model) if q.key.startswith("model.layers.0.mlp:")}
    count, check = _certified(mlp, (2, 6))
    assert blocks == {kind} and count.num_laws == 4 * per_unit and check.complete, (blocks, count.num_laws, check)


def test_moe_experts_keep_their_laws_on_a_gate_of_no_rescaling_and_a_relu_gate_is_left_out_by_name() -> None:
    options = ArchOptions(dim=4, hidden=2, experts=3, top_k=2)
    gelu = tiny_model("qwen3_moe", options, hidden_act="gelu_pytorch_tanh").model.layers[0].mlp
    with torch.no_grad():
        gelu.gate.weight.normal_()
    count, check = _certified(gelu, (2, 4))
    assert count.num_laws == moe.formula(3, 2, 4, 2, False)[0] and check.complete, check
    relu = tiny_model("qwen3_moe", options, hidden_act="relu")
    with pytest.warns(UserWarning, match="hidden_act='relu' \\(the experts' laws.*left out"):
        kinds = {q.block for q in quantities(relu)}
    assert "moe" not in kinds and "network" in kinds


@pytest.mark.parametrize("top_k, norm_topk_prob", [(2, False), (2, True), (1, False), (1, True)])
def test_moe_router_laws_follow_the_counter(top_k, norm_topk_prob) -> None:
    """Softmax, then top k, then the optional division: ΣW_e for every case but top-1 divided (all of W)."""
    options = ArchOptions(dim=4, hidden=2, experts=3, top_k=top_k)
    model = tiny_model("qwen3_moe", options, norm_topk_prob=norm_topk_prob)
    block = model.model.layers[0].mlp
    with torch.no_grad():
        block.gate.weight.normal_()  # transformers starts the router at 0.02: no ties at a random θ either way
    count, check = _certified(block, (2, 4))
    assert count.num_laws == moe.formula(3, 2, 4, top_k, norm_topk_prob)[0]
    assert check.complete, check


def test_an_attention_of_another_architecture_is_refused_by_name() -> None:
    """The float64 copy gave every transformers class named *Attention Llama's rotary table: GPT-2's ended in an
    AttributeError inside, and Cohere's (another rotary layout) was copied with the wrong one."""
    config = transformers.Cohere2Config(
        hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        vocab_size=16,
    )  # fmt: skip
    attn = transformers.Cohere2ForCausalLM(config).model.layers[0].self_attn
    with pytest.raises(ValueError, match="Cohere2Attention is counted only as the attention or decoder layer of Qwen3"):
        count_laws(attn, (3, 8))


def _train(model: nn.Module, ids: torch.Tensor, lr: float, watched: Monitor | None = None) -> None:
    """Five steps of SGD on the language-model loss of ``ids``, each recorded by ``watched`` if given."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    if watched is not None:
        watched.attach(opt)
    for _ in range(5):
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()


def _gpt2(**config: object) -> nn.Module:
    """A one-layer GPT2LMHeadModel, d = 8, 2 heads of k = 4, in eval mode (no dropout), weights of std 0.5: at GPT-2's
    0.02 the scores are nearly flat and the counter's gap closes to 10⁻¹¹."""
    sizes = dict(n_embd=8, n_head=2, n_layer=1, vocab_size=16, n_positions=8, initializer_range=0.5)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**(sizes | config))).eval()


def test_gpt2_attention_laws_are_complete_in_conv1d_layout() -> None:
    """Q, K, V in c_attn's column blocks, O in c_proj's row blocks, biases appended: n·k(k+1) + n·k."""
    count, check = _certified(_gpt2().transformer.h[0].attn, (3, 8))
    N, text = formula(2, 4, bias=True)
    assert count.num_laws == N == 48, text
    assert check.complete and check.independent == N, check


@pytest.mark.slow
def test_gpt2_block_laws_are_complete() -> None:
    """The attention's 48, each LayerNorm against the Conv1D that reads it (2d = 16), and the output biases' sum."""
    count, check = _certified(_gpt2().transformer.h[0], (3, 8))
    assert count.num_laws == 65 and check.complete and check.independent == 65, check


def test_gpt2_cross_attention_is_left_out_by_name_and_the_monitor_watches_the_rest() -> None:
    with pytest.warns(UserWarning, match="crossattention has is_cross_attention=True"):
        kinds = {q.block for q in quantities(_gpt2(add_cross_attention=True))}
    assert kinds == {"mha", "network"}
    model = _gpt2(n_layer=2)
    ids = torch.randint(0, 16, (4, 6), generator=torch.Generator().manual_seed(0))
    monitor = Monitor(model)  # the registered blocks' laws only (inputs= would search the rest: 30 s)
    assert {g.key for g in monitor.groups} == {"mha", "network", "mha:control", "network:control"}
    _train(model, ids, lr=1e-3, watched=monitor)
    for kind in ("mha", "network"):
        assert monitor.epsilon(kind)[-1] < monitor.epsilon(f"{kind}:control")[-1], kind


def test_a_call_that_adds_the_load_balancing_loss_to_a_watched_top1_router_is_refused() -> None:
    """Top-1 routing with the division keeps every entry of W under the language-model loss; transformers adds the
    load-balancing loss when a call asks for the router logits, which moves W: the monitor watched W's entries as
    laws of a training that broke them (a probe: ε 1.2·10⁻⁵ after 5 steps)."""
    options = ArchOptions(dim=4, hidden=2, experts=3, top_k=1)
    model = tiny_model("qwen3_moe", options, norm_topk_prob=True, router_aux_loss_coef=0.5)
    monitor = Monitor(model)
    ids = torch.randint(0, 6, (2, 4), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids)  # the language-model loss alone
    with pytest.raises(ValueError, match="output_router_logits=True, which adds the load-balancing loss"):
        model(input_ids=ids, labels=ids, output_router_logits=True)
    assert "moe-softmax-top1" in [g.key for g in monitor.groups]
    model.config.output_router_logits = True
    with pytest.warns(UserWarning, match="only ΣW_e is watched"):
        monitor = Monitor(model)  # the first one, and its refusal, are gone
    model(input_ids=ids, labels=ids, output_router_logits=True)  # watched as ΣW_e alone: no refusal


def test_the_monitors_own_refusal_hook_leaves_the_laws_of_a_top1_mixture_as_they_were() -> None:
    """The hook that refuses a call adding the load-balancing loss is the monitor's, and changes no output: it was read
    as a user's hook on the model, and the final norm's coupling with lm_head was left out."""
    model = tiny_model("qwen3_moe", ArchOptions(dim=4, hidden=2, experts=3, top_k=1), norm_topk_prob=True)
    before = set(law_functions(model))
    monitor = Monitor(model)
    assert set(law_functions(model)) == before and any("lm_head" in key for key in before)
    assert monitor.epsilon("network").shape == (1,)


def test_a_monitor_given_an_input_shape_runs_transformers_layers_as_the_counter_does() -> None:
    """An attention or a decoder layer takes positions beside its hidden states: the check of what is read outside a
    block runs its form of one tensor, as the counter does (it called the layer with the states alone: TypeError)."""
    model = tiny_model("llama", ArchOptions(dim=8, heads=2, head_dim=4, hidden=4, out=12))
    layer = model.model.layers[0]
    for module, kinds in ((layer.self_attn, {"gqa-rope"}), (layer, {"network", "gqa-rope", "swiglu"})):
        assert kinds <= {g.key for g in Monitor(module, input_shape=(5, 8)).groups}


def test_drift_trains_a_transformers_attention_as_the_counter_calls_it() -> None:
    """A transformers attention takes positions beside its hidden states: model_setup trains its form of one tensor
    (it called the attention with the states alone); the identity's error is scaled by the step's change where the
    laws are 0 (the QK-norm gains start at ones), where it read 10²⁹²."""
    from conslaw_lite.drift import measure, model_setup

    def build() -> nn.Module:
        return tiny_model("qwen3", ArchOptions(dim=8, heads=2, head_dim=4, hidden=4, out=12)).model.layers[0].self_attn

    report = measure(model_setup(build, (3, 8), samples=8), [0.01, 0.02], steps=3, laws=law_functions(build()))
    assert abs(report.slope_lr - 2) < 0.05 and max(p.identity_error for p in report.points) < 1e-9


def test_a_monitor_searches_a_tied_language_model_given_its_inputs() -> None:
    """With ``inputs=``, the parts outside the blocks are searched with the blocks held as buffers; the exact float64
    stand-ins of transformers' RMSNorm took a held gain as a parameter and failed (TypeError)."""
    model = tiny_model("qwen3", ArchOptions(dim=8, heads=2, head_dim=4, hidden=4, out=12), tie_word_embeddings=True)
    ids = torch.randint(0, 12, (8, 4), generator=torch.Generator().manual_seed(0))
    monitor = Monitor(model, inputs=ids)
    assert monitor.own is not None and monitor.own.searched
    assert {"network", "gqa-rope-qknorm-shared", "swiglu"} <= {g.key for g in monitor.groups}


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch, tied, N", [("qwen3", False, 39), ("qwen3", True, 31), ("qwen3_moe", False, 50), ("qwen2", False, 39)]
)
def test_whole_model_laws_are_complete(arch, tied, N) -> None:
    """Blocks plus 3d norm couplings (d = 8), the head's d only when untied: Qwen3 2 + 10 + 3 + 3·8 = 39; Qwen2's
    attention has no QK-norm but one key/value head, so n_kv·k/2 = 2 as well."""
    options = ArchOptions(dim=8, heads=1, head_dim=4, hidden=2 if arch == "qwen3_moe" else 3, out=6)
    model = tiny_model(arch, options, tie_word_embeddings=tied)
    _perturb_gains(model)
    if arch == "qwen3_moe":
        with torch.no_grad():
            model.model.layers[0].mlp.gate.weight.normal_()
    ids = torch.randint(0, 6, (32, 4), generator=torch.Generator().manual_seed(0))
    count, check = _certified(model, inputs=ids)
    assert count.num_laws == N
    assert check.complete and check.independent == N


def test_countable_copies_compute_what_transformers_computes() -> None:
    torch.manual_seed(0)
    for arch in ("qwen3", "llama", "qwen3_moe", "mistral", "qwen2"):
        extra = {"norm_topk_prob": True} if arch == "qwen3_moe" else {}  # the division of the top k, exercised
        model = tiny_model(arch, ArchOptions(dim=8, heads=2), num_hidden_layers=2, **extra).float()
        if arch == "qwen3_moe":
            with torch.no_grad():
                model.model.layers[0].mlp.gate.weight.normal_()
        ids = torch.randint(0, 16, (3, 5))
        assert torch.allclose(countable(model)(ids), model(input_ids=ids).logits.double(), atol=1e-5)
        X = torch.randn(3, 5, 8)
        layer = model.model.layers[1]
        cos_sin = model.model.rotary_emb(X, torch.arange(5)[None])
        assert torch.allclose(countable(layer)(X.double()), layer(X, position_embeddings=cos_sin).double(), atol=1e-5)


@pytest.mark.parametrize("rope", [LINEAR_ROPE, LLAMA3_ROPE, YARN_ROPE], ids=lambda rope: rope["rope_type"])
def test_a_static_rope_is_covered_and_computed_as_transformers_computes_it(rope) -> None:
    torch.manual_seed(0)
    model = tiny_model("llama", ArchOptions(dim=8, heads=2), rope_parameters=dict(rope)).float()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no block left out for its rotary embedding
        assert any(key.startswith("model.layers.0.self_attn:") for key in laws_of(model))
    ids = torch.randint(0, 16, (3, 5))
    assert torch.allclose(countable(model)(ids), model(input_ids=ids).logits.double(), atol=1e-5)


def test_a_dynamic_rope_is_counted_within_its_length_and_its_laws_left_out() -> None:
    """Its frequencies change past max_position_embeddings: no closed-form laws, but the count needs none, and up to
    that length its table is the default one (N = 24 at d = 16, as Llama's)."""
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}
    model = tiny_model("llama", ISSUE, rope_parameters=dynamic, max_position_embeddings=8).float()
    with pytest.warns(UserWarning, match="rope_type='dynamic'.*left out"):
        assert not any(key.startswith("model.layers.0.self_attn:") for key in laws_of(model))
    ids = torch.randint(0, 16, (3, 5))
    assert torch.allclose(countable(model)(ids), model(input_ids=ids).logits.double(), atol=1e-5)
    assert count_laws(countable(model.model.layers[0].self_attn), (3, ISSUE.dim)).num_laws == 24
    with pytest.raises(ValueError, match="changes its frequencies past 8 positions"):
        countable(model)(torch.randint(0, 16, (1, 9)))


@pytest.mark.parametrize(
    "arch, config",
    [
        ("qwen3", {"use_sliding_window": True, "sliding_window": 2, "layer_types": LAYER_TYPES}),
        ("mistral", {"sliding_window": 2}),  # every layer's window, read from the config: the attention holds none
    ],
)
def test_a_sliding_window_layer_is_counted_with_its_window(arch, config) -> None:
    """The countable copy of a sliding-window layer applies the window (transformers' sdpa path alone would not):
    on each layer's input inside the model's own forward, it gives that layer's output."""
    torch.manual_seed(0)
    model = tiny_model(arch, ArchOptions(dim=8, heads=2), num_hidden_layers=2, **config).double()
    seen = {}

    def record(layer, args, kwargs, output) -> None:
        seen[layer] = (args[0] if args else kwargs["hidden_states"], output[0] if isinstance(output, tuple) else output)

    hooks = [layer.register_forward_hook(record, with_kwargs=True) for layer in model.model.layers]
    model(input_ids=torch.randint(0, 16, (2, 6)))
    for hook in hooks:
        hook.remove()
    for layer, (X, Y) in seen.items():
        assert torch.allclose(countable(layer)(X), Y, atol=1e-8), (arch, layer.self_attn.layer_idx)


def test_with_the_load_balancing_loss_top1_keeps_only_the_sum_of_the_router_rows() -> None:
    """output_router_logits adds a loss of p = softmax(W x): top-1 with the division then moves W; ΣW_e stays."""
    options = ArchOptions(dim=4, hidden=2, experts=3, top_k=1)
    model = tiny_model("qwen3_moe", options, norm_topk_prob=True, output_router_logits=True, router_aux_loss_coef=0.5)
    with pytest.warns(UserWarning, match="output_router_logits=True"):
        keys = set(laws_of(model))
    assert "model.layers.0.mlp:sum_W_e" in keys and "model.layers.0.mlp:W" not in keys
    model = model.double()
    ids = torch.randint(0, 6, (8, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.model.layers[0].mlp.gate.weight.normal_()
    before = laws_of(model)
    _train(model, ids, lr=1e-3)
    drift = (laws_of(model)["model.layers.0.mlp:sum_W_e"] - before["model.layers.0.mlp:sum_W_e"]).norm()
    moved = (model.model.layers[0].mlp.gate.weight.grad).norm()  # the router moves: the aux loss reaches it
    assert moved > 1e-6 and drift < 1e-9 * before["model.layers.0.mlp:sum_W_e"].norm() + 1e-12


def test_laws_of_keys_use_huggingface_names() -> None:
    model = tiny_model("qwen3", ArchOptions(dim=8, heads=1))
    keys = set(laws_of(model))
    assert "model.layers.0.self_attn:|gamma_q^(j)|^2-|gamma_k^(j)|^2" in keys
    assert "model.layers.0:input_layernorm.gamma^2-|W[:,j]|^2_(q+k+v)" in keys
    assert "model.layers.0.mlp:|A_{:,i}|^2-|C_{i,:}|^2" in keys


@pytest.mark.parametrize(
    "config, option",
    [
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}}, "rope_type='dynamic'"),
        ({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.5}}, "partial_rotary_factor=0.5"),
        ({"hidden_act": "relu2"}, "hidden_act='relu2'"),
    ],
)
def test_an_option_the_laws_do_not_cover_is_left_out_by_name(config, option) -> None:
    model = tiny_model("qwen3", ArchOptions(dim=8, heads=1), **config)
    with pytest.warns(UserWarning, match=f"has {option}.*left out"):
        kinds = {q.block for q in quantities(model)}
    assert "network" in kinds  # the norm couplings do not depend on the option
    if option.startswith("partial"):  # the count's copy computes no partial table
        with pytest.raises(ValueError, match="partial_rotary_factor=0.5"):
            countable(model.model.layers[0].self_attn)


def test_an_attention_function_of_ones_own_is_left_out_and_counted_as_it_is() -> None:
    """``AttentionInterface.register("cosine", f)`` with ``config._attn_implementation = "cosine"`` (q and k normalized
    per head, then sdpa): the Q/K laws were watched (drift ratio 2.8 for a 4 times smaller step: not laws), and the
    count ran on an sdpa copy (N = 12, conclusive, "complete"). Now the attention's laws are left out by name, and
    the count runs the function itself: one law more than the plain attention's."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = []

    def cosine(module, query, key, value, attention_mask, **kwargs):
        calls.append(1)
        query, key = query / query.norm(dim=-1, keepdim=True), key / key.norm(dim=-1, keepdim=True)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("cosine", cosine)
    try:
        plain = tiny_model("llama", ArchOptions(dim=8, heads=1))
        model = tiny_model("llama", ArchOptions(dim=8, heads=1))
        model.config._attn_implementation = "cosine"
        with pytest.warns(UserWarning, match="has config._attn_implementation='cosine'.*left out"):
            kinds = {q.block for q in quantities(model)}
        assert "network" in kinds and not kinds & {q.block for q in quantities(plain)} - {"network", "swiglu"}
        ids = torch.arange(6).reshape(2, 3)
        count = count_laws(model.model.layers[0].self_attn, (3, 8))
        assert calls and count.conclusive  # the count ran the function of one's own
        assert count.num_laws == count_laws(plain.model.layers[0].self_attn, (3, 8)).num_laws + 1
        assert model(input_ids=ids).logits.isfinite().all()
    finally:
        AttentionInterface._global_mapping.pop("cosine")


def test_an_eager_attention_that_caps_its_scores_stays_eager_in_float64() -> None:
    """Gemma 2 caps its scores (``attn_logit_softcapping``), which sdpa cannot: the countable copy switched it to sdpa
    and its forward failed. It stays eager, its float32 softmax computed in float64."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(hidden_size=8, intermediate_size=4, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=4, vocab_size=16, attn_implementation="eager")
    lm = Gemma2ForCausalLM(config)
    copy, ids = countable(lm), torch.arange(6).reshape(2, 3)
    assert copy.config._attn_implementation == "eager" and copy(ids).dtype == torch.float64
    torch.testing.assert_close(copy(ids).float(), lm(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
    softmax = torch.softmax
    with Float64Softmax():  # the copy's own softmax: float64 where transformers asks for float32
        assert softmax(ids.double(), -1, dtype=torch.float32).dtype == torch.float64


def test_a_sliding_window_keeps_the_attention_laws() -> None:
    """Mistral's every layer reads ``config.sliding_window`` (4,096 by default), Qwen3's sliding layers their own: a
    window masks scores, which Q ↦ QM, K ↦ KM⁻ᵀ leave unchanged, so the monitor watches the same laws."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mistral = Monitor(tiny_model("mistral", ArchOptions(dim=8, heads=1)))
        sliding = {"use_sliding_window": True, "sliding_window": 2, "layer_types": ["sliding_attention"]}
        qwen3 = Monitor(tiny_model("qwen3", ArchOptions(dim=8, heads=1), **sliding))
    assert {"gqa-rope", "swiglu", "network"} <= {g.key for g in mistral.groups}
    assert "gqa-rope-qknorm-shared" in {g.key for g in qwen3.groups}


def test_laws_that_dropout_breaks_are_given_only_where_it_is_inactive() -> None:
    """A dropout between a projection and the LayerNorm that removes its mean turns c·1 into c·mask: GPT-2's output
    bias sum and BERT's mean laws hold in eval mode only. In train mode they are left out (BERT's by name); given in
    eval mode, the monitor warns when the dropout trains. Each left out by name, once per module."""
    gpt2 = _gpt2(n_layer=1).train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not any("c_proj.bias" in key for key in laws_of(gpt2))
        laws_of(gpt2)  # a second reading of the same model: nothing said again
    said = [str(w.message) for w in caught if "GPT2Block at transformer.h.0 has dropout p = 0.1" in str(w.message)]
    assert len(said) == 1 and "Σ(attn−mlp).c_proj.bias, which is left out" in said[0]
    with pytest.warns(UserWarning, match=r"BertSelfOutput at bert.encoder.layer.0.attention.output has dropout p = "):
        kinds = {q.block for q in quantities(_bert().train())}
    assert kinds == {"mha"}
    model = _gpt2(n_layer=1)  # eval mode
    assert "transformer.h.0:sum_(attn-mlp).c_proj.bias" in laws_of(model)
    monitor = Monitor(model)
    model.train()
    with pytest.warns(UserWarning, match=r"resid_dropout.*its random masks break laws of the network block"):
        _train(model, torch.randint(0, 16, (4, 6), generator=torch.Generator().manual_seed(0)), 1e-3, watched=monitor)


def _bert(**config: object) -> nn.Module:
    """A one-layer BertForMaskedLM, d = 8, 2 heads of k = 4, in eval mode, weights of std 0.5 (see :func:`_gpt2`)."""
    sizes = dict(
        hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=16, vocab_size=16,
        max_position_embeddings=8, initializer_range=0.5,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.BertForMaskedLM(transformers.BertConfig(**(sizes | config))).eval()


@pytest.mark.parametrize(
    "name, options, words",
    [
        ("qwen3-attention", ArchOptions(head_dim=3), "--head-dim must be even"),
        ("qwen3-moe", ArchOptions(experts=3, top_k=5), "--top-k must be between 1 and --experts (3), got 5"),
    ],
)
def test_named_architectures_at_sizes_they_cannot_have_are_refused_naming_the_size(name, options, words) -> None:
    """They failed inside transformers (a shape mismatch; 'selected index k out of range')."""
    with pytest.raises(ValueError, match=re.escape(words)):
        get_arch(name).build(options)


@pytest.mark.parametrize("name", ["gpt2-attention", "bert-attention"])
def test_named_attentions_without_positions_count_their_formula(name) -> None:
    """``certify gpt2-attention --dim 12 --heads 3``: 3 heads of width 4, the count is the formula and complete."""
    built = get_arch(name).build(ArchOptions(dim=12, heads=3))
    count = count_laws(built.model, built.input_shape)
    check = check_laws(built.model, law_functions(built.model), built.input_shape, count=count)
    assert count.num_laws == built.formula == 72 + 13 * (name == "bert-attention"), built.formula_text
    assert check.complete, check
    means = " + d + 1 = 3·4·5 + 3·4 + 12 + 1 = 85" if name == "bert-attention" else " = 3·4·5 + 3·4 = 72"
    assert built.formula_text == "n·k(k+1) + n·k" + means  # each side of the text: d + 1 was on the right only


def test_bert_attention_laws_are_complete() -> None:
    """The heads' 48 (biases appended, key bias conserved) and the 9 means the output LayerNorm removes from
    output.dense's columns and bias: 57."""
    count, check = _certified(_bert().bert.encoder.layer[0].attention, (3, 8))
    assert count.num_laws == formula(2, 4, bias=True)[0] + 9 == 57
    assert check.complete and check.independent == 57, check


def test_bert_post_norm_means_stay_exactly_under_sgd_and_cross_attention_is_left_out() -> None:
    """1ᵀW[:, j] and 1ᵀb of each dense before a LayerNorm get no gradient along 1: SGD keeps them to round-off, while
    W's first row moves."""
    with pytest.warns(UserWarning, match="crossattention has is_cross_attention=True"):
        kinds = {q.block for q in quantities(_bert(is_decoder=True, add_cross_attention=True))}
    assert kinds == {"mha", "network"}
    model = _bert().double()
    ids = torch.randint(0, 16, (4, 6), generator=torch.Generator().manual_seed(0))
    before = laws_of(model)
    _train(model, ids, lr=1e-2)
    after = laws_of(model)
    for module in ("attention.output", "output"):
        key = f"bert.encoder.layer.0.{module}:"
        for law in ("1^TW[:,j]", "1^Tb"):
            assert torch.allclose(after[key + law], before[key + law], rtol=0, atol=1e-12), key + law
        W = model.get_submodule(f"bert.encoder.layer.0.{module}.dense").weight
        assert W.grad[0].abs().max() > 1e-6  # the control's row moves


def test_a_subclass_that_computes_otherwise_or_a_hooked_layer_is_left_out_by_name() -> None:
    """A user's LlamaAttention with an RMSNorm over all of q and k (OLMo-2 style): Llama's laws moved at first order
    in it, so neither a redefined forward nor hooks on its projections may keep them; a subclass that only builds
    the layer differently keeps them."""
    from transformers.models.llama.modeling_llama import LlamaAttention

    class Normed(LlamaAttention):
        def __init__(self, config, layer_idx):
            super().__init__(config, layer_idx)
            self.qn, self.kn = nn.RMSNorm(self.q_proj.out_features), nn.RMSNorm(self.k_proj.out_features)

    class Redefined(Normed):
        def forward(self, hidden_states, *args, **kwargs):
            return super().forward(hidden_states, *args, **kwargs)

    def kinds(make) -> set[str]:
        model = tiny_model("llama", ArchOptions(dim=8, heads=2, head_dim=4))
        model.model.layers[0].self_attn = make(model.config)
        return {q.block for q in quantities(model)}

    assert "gqa-rope" in kinds(lambda config: Normed(config, 0))  # the same forward, no hook: Llama's attention

    def hooked(config):
        attn = Normed(config, 0)
        attn.q_proj.register_forward_hook(lambda m, i, o: attn.qn(o))
        return attn

    with pytest.warns(UserWarning, match=r"Normed at model.layers.0.self_attn has a forward hook on q_proj .*left out"):
        assert "gqa-rope" not in kinds(hooked)
    with pytest.warns(UserWarning, match="Redefined, derived from LlamaAttention, redefines forward"):
        assert "gqa-rope" not in kinds(lambda config: Redefined(config, 0))


@pytest.mark.slow
def test_import_conslaw_lite_does_not_import_transformers() -> None:
    code = (
        "import sys, conslaw_lite; from conslaw_lite.families.toy.block import ToyProduct; "
        "conslaw_lite.laws_of(ToyProduct(a=2.0, b=1.0)); import conslaw_lite.families.hf; "
        "sys.exit('transformers' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _random_ids(n: int, T: int, vocab: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, vocab, (n, T), generator=g)]


def _sgd_arguments(tmp_path, max_steps: int, **options) -> transformers.TrainingArguments:
    """A Trainer's arguments for ``max_steps`` steps of SGD on the CPU, batch 4, nothing saved or reported."""
    return transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to="none", max_steps=max_steps, per_device_train_batch_size=4, optim="sgd",
        use_cpu=True, save_strategy="no", disable_tqdm=True, **options,
    )  # fmt: skip


def _check_epsilon(values: dict[str, float], kinds: set[str]) -> None:
    """ε of every block kind finite, and below ε of the same kind's controls (look-alikes that move)."""
    eps = {k.removeprefix("epsilon/"): v for k, v in values.items() if k.startswith("epsilon/")}
    assert kinds <= set(eps), eps
    assert all(math.isfinite(v) for v in eps.values()), eps
    for kind in kinds:
        assert eps[kind] < eps[f"{kind}:control"], (kind, eps)


@pytest.mark.slow
def test_trainer_callback_logs_finite_epsilon_and_laws_drift_less_than_controls(tmp_path) -> None:
    model = tiny_model("qwen3", ArchOptions(dim=16, heads=2, out=32)).float()
    args = _sgd_arguments(tmp_path, 8, logging_steps=4, learning_rate=0.02, lr_scheduler_type="constant")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_random_ids(32, 8, 32))
    callback = watch(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logged] == [4, 8]
    _check_epsilon(logged[-1], {"gqa-rope-qknorm-shared", "swiglu", "network"})
    assert callback.monitor.steps.tolist() == list(range(9))
    # the gradient, clipped by its global norm (max_grad_norm=1), was checked at steps 2 and 3 and is the loss's; θ
    # was not written between the steps (accelerate's optimizer steps torch's inside it)
    assert not [w for w in caught if "gradient in .grad" in str(w.message) or "θ changed" in str(w.message)]

    class Penalized(transformers.Trainer):  # an L2 penalty written into the loss: the laws drift at first order
        def compute_loss(self, model, inputs, **kwargs):
            penalty = sum(p.square().sum() for p in model.parameters())
            return super().compute_loss(model, inputs, **kwargs) + 1e-2 * penalty

    trainer = Penalized(model=model, args=args, train_dataset=_random_ids(32, 8, 32))
    watch(trainer)
    with pytest.warns(UserWarning, match="gradient in .grad is not the loss's .* one of: a loss term that reads"):
        trainer.train()


def test_a_trainer_callback_that_decays_the_weights_by_hand_is_named(tmp_path) -> None:
    class Decay(transformers.TrainerCallback):  # weight decay written by hand, after each step
        def on_step_end(self, args, state, control, model=None, **kwargs) -> None:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1 - 0.02 * 1e-2)

    model = tiny_model("qwen3", ArchOptions(dim=16, heads=2, out=32)).float()
    args = _sgd_arguments(tmp_path, 4, learning_rate=0.02)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_random_ids(16, 8, 32), callbacks=[Decay()])
    watch(trainer)
    with pytest.warns(UserWarning, match="θ changed between two optimizer steps .* written after step 1"):
        trainer.train()


def test_trainer_callback_warns_once_when_a_scheduler_sets_param_groups_apart(tmp_path) -> None:
    """Attention and MLP in two groups, at one lr for two steps, then the MLP's decays: the laws coupling them (the
    RMSNorm gains with the layers they feed) drift at first order from there on, said once."""
    model = tiny_model("qwen3", ArchOptions(dim=16, heads=2, out=32)).float()
    mlp = [p for name, p in model.named_parameters() if ".mlp." in name]
    rest = [p for name, p in model.named_parameters() if ".mlp." not in name]
    optimizer = torch.optim.SGD([{"params": rest}, {"params": mlp}], lr=0.02)
    later = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda k: 1.0, lambda k: 1.0 if k < 2 else 0.5 / k])
    args = _sgd_arguments(tmp_path, 6)  # the optimizer given to the Trainer instead
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=_random_ids(24, 8, 32), optimizers=(optimizer, later)
    )
    watch(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    apart = [str(w.message) for w in caught if "step with different settings" in str(w.message)]
    assert len(apart) == 1 and "lr=0.02" in apart[0], apart


def test_a_trainer_in_bf16_keeps_every_law_and_its_gradient_is_not_flagged(tmp_path) -> None:
    """bf16=True: accelerate sets on the model a forward that wraps its own in autocast and a cast to float32 (the same
    function, in lower precision: no law left out), and the gradient, each entry a bf16 number, is not judged (its
    round-off reached 3 % of the laws' terms, three times the tolerance for float32)."""
    model = tiny_model("qwen3", ArchOptions(dim=16, heads=2, out=32)).float()
    laws = Monitor(model).relative_drift("network").shape[1]
    args = _sgd_arguments(tmp_path, 4, learning_rate=0.05, bf16=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_random_ids(16, 8, 32))
    callback = watch(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert "forward" in vars(model)  # accelerate's
    assert callback.monitor.relative_drift("network").shape[1] == laws
    said = [str(w.message) for w in caught if "replaced" in str(w.message) or "gradient in .grad" in str(w.message)]
    assert said == []


def _lightning_trainer(pl, tmp_path, callback, max_steps: int, **options):
    """A CPU Lightning Trainer logging to CSV in ``tmp_path``, with only ``callback`` and nothing else to print
    (``options``: the Trainer's others, e.g. its gradient clipping)."""
    return pl.Trainer(
        max_steps=max_steps, accelerator="cpu", logger=pl.loggers.CSVLogger(tmp_path), callbacks=[callback],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **options,
    )  # fmt: skip


def _regression(pl, child: str, forward: bool):
    """A ``Regression`` LightningModule holding a ReLU MLP 3-4-1 (float64) as ``child``, trained by SGD on ‖output‖²;
    with ``forward``, a forward of its own that calls the MLP."""

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            setattr(self, child, nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).double())

        def training_step(self, batch, _):
            return (getattr(self, child)(batch) ** 2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    if forward:

        class Regression(Regression):  # noqa: F811  (the same name: the monitor names the class)
            def forward(self, x):
                return getattr(self, child)(x)

    return Regression()


@pytest.mark.slow
def test_lightning_callback_logs_epsilon_per_block_kind(tmp_path) -> None:
    pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed")
    from conslaw_lite.families.hf.lightning import ConservationLightningCallback

    class LM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lm = tiny_model("llama", ArchOptions(dim=16, heads=2, out=32)).float()

        def training_step(self, batch, _):
            return self.lm(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.02)

    data = torch.utils.data.DataLoader(_random_ids(24, 8, 32), batch_size=4)
    callback = ConservationLightningCallback()
    trainer = _lightning_trainer(pl, tmp_path, callback, max_steps=6)
    trainer.fit(LM(), data)
    _check_epsilon({k: float(v) for k, v in trainer.logged_metrics.items()}, {"gqa-rope", "swiglu", "network"})
    assert callback.monitor.steps.tolist() == list(range(7))


@pytest.mark.slow
def test_the_lightning_callback_finds_the_laws_of_a_module_outside_the_registry(tmp_path) -> None:
    """``input_shape`` goes to the Monitor: a plain MLP's laws are found (without it: no registered block, an error)."""
    pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed")
    from conslaw_lite.families.hf.lightning import ConservationLightningCallback

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randn(16, 3, dtype=torch.float64), batch_size=4)
    callback = ConservationLightningCallback(input_shape=(3,))
    trainer = _lightning_trainer(pl, tmp_path, callback, max_steps=4)
    trainer.fit(_regression(pl, "net", forward=True), data)
    assert [g.key for g in callback.monitor.groups] == ["found"]
    assert 0 < float(trainer.logged_metrics["epsilon/found"]) < 1e-3


@pytest.mark.parametrize("algorithm", ["value", "norm"])
def test_the_lightning_callback_warns_of_gradients_clipped_by_value(tmp_path, algorithm) -> None:
    """Clipped by value, the laws drifted at first order (ε fell 4 times for a 4 times smaller step, as the controls')
    and nothing said so; clipped by norm the step keeps the gradient's direction (16 times), and nothing is said."""
    pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed")
    from conslaw_lite.families.hf.lightning import ConservationLightningCallback

    data = torch.utils.data.DataLoader(torch.randn(8, 3, dtype=torch.float64), batch_size=4)
    callback = ConservationLightningCallback(input_shape=(3,))
    trainer = _lightning_trainer(
        pl, tmp_path, callback, max_steps=2, gradient_clip_val=0.01, gradient_clip_algorithm=algorithm
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(_regression(pl, "net", forward=False), data)
    clipped = [str(w.message) for w in caught if "clips gradients by value" in str(w.message)]
    assert len(clipped) == (algorithm == "value"), clipped


def test_the_lightning_callback_warns_once_when_a_scheduler_sets_param_groups_apart(tmp_path) -> None:
    pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed")
    from conslaw_lite.families.hf.lightning import ConservationLightningCallback

    class Apart(pl.LightningModule):  # the MLP's layers in two groups: one lr, then the second's decays
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).double()

        def training_step(self, batch, _):
            return (self.net(batch) ** 2).mean()

        def configure_optimizers(self):
            groups = [{"params": self.net[0].parameters()}, {"params": self.net[2].parameters()}]
            optimizer = torch.optim.SGD(groups, lr=0.01)
            later = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda k: 1.0, lambda k: 1.0 if k < 2 else 0.5 / k])
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": later, "interval": "step"}}

    data = torch.utils.data.DataLoader(torch.randn(24, 3, dtype=torch.float64), batch_size=4)
    trainer = _lightning_trainer(pl, tmp_path, ConservationLightningCallback(input_shape=(3,)), max_steps=6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Apart(), data)
    apart = [str(w.message) for w in caught if "step with different settings" in str(w.message)]
    assert len(apart) == 1, apart


@pytest.mark.slow
def test_the_lightning_callback_searches_the_child_of_a_module_without_forward(tmp_path, capsys) -> None:
    """The common style: ``training_step`` calls ``self.model(x)`` and the module has no forward: the laws of
    ``self.model`` (the child that takes the input shape), said once; no child that takes it is a clear error."""
    pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed")
    from conslaw_lite.families.hf.lightning import ConservationLightningCallback

    def fit(callback):
        trainer = _lightning_trainer(pl, tmp_path, callback, max_steps=4)
        data = torch.utils.data.DataLoader(torch.randn(16, 3, dtype=torch.float64), batch_size=4)
        trainer.fit(_regression(pl, "model", forward=False), data)
        return trainer

    torch.manual_seed(0)
    callback = ConservationLightningCallback(input_shape=(3,))
    trainer = fit(callback)
    assert [g.key for g in callback.monitor.groups] == ["found"] and len(callback.monitor.own.laws) == 1
    assert 0 < float(trainer.logged_metrics["epsilon/found"]) < 1e-3
    said = "`Regression` has no forward of its own: searched its child `model`, which takes inputs of shape (3,)"
    assert capsys.readouterr().out.count(said) == 1
    with pytest.raises(ValueError, match=r"no child of it takes inputs of shape \(5,\).*`model`: it fails on inputs"):
        fit(ConservationLightningCallback(input_shape=(5,)))


def test_monitor_takes_a_transformers_model() -> None:
    model = tiny_model("qwen3_moe", ArchOptions(dim=8, heads=1))
    groups = [g.key for g in Monitor(model).groups]
    assert {"gqa-rope-qknorm-shared", "moe-softmax-top2", "network"} <= set(groups)


@pytest.mark.slow
def test_rope_laws_pair_j_with_j_plus_half_as_transformers_rotates() -> None:
    """The block laws on transformers' pairs (j, j + k/2) are conserved; on the interleaved (2j, 2j+1) they are not."""
    model = tiny_model("llama", ArchOptions(dim=8, heads=1))
    probe = countable(model.model.layers[0].self_attn)
    Q, K = "q_proj.weight", "k_proj.weight"  # the countable copy keeps the module's own names

    def blocks(p, name, pairs):  # ‖W^(j)‖_F² per 2×2 block j of the group's heads: (k/2,)
        col = p[name].view(-1, 4, 8).square().sum((0, 2))  # (k,) = 4
        return col[:2] + col[2:] if pairs == "half" else col.view(2, 2).sum(1)

    laws = {
        pairs: (lambda p, pairs=pairs: blocks(p, Q, pairs) - blocks(p, K, pairs)) for pairs in ("half", "interleaved")
    }
    check = check_laws(probe, laws, (3, 8))
    assert check.residuals["half"] < 1e-12 and check.residuals["interleaved"] > 1e-6, check.residuals


@pytest.mark.slow
def test_count_laws_takes_transformers_modules_as_they_are() -> None:
    """No countable() call: the counter evaluates the registered float64 form, under the module's own names."""
    model = tiny_model("qwen3", ArchOptions(dim=8)).float()  # as a user builds it: float32, norms in float32
    attn = model.model.layers[0].self_attn
    count = count_laws(attn, (3, 8))
    check = check_laws(attn, law_functions(attn), (3, 8), count=count)
    assert count.conclusive and check.complete and count.num_laws == check.independent, (count.reason, check)
    assert attn.q_proj.weight.dtype == torch.float32  # the user's module is not changed
    ids = torch.randint(0, 16, (64, 3), generator=torch.Generator().manual_seed(0))
    assert count_laws(model, inputs=ids).num_params == sum(p.numel() for p in model.parameters())


def test_transformers_tanh_gelu_is_counted_as_torch_s() -> None:
    """``GELUTanh`` (Gemma's ``gelu_pytorch_tanh``) holds ``functools.partial(F.gelu, approximate="tanh")``, taken
    before the count replaces ``F.gelu`` by its exact form: torch's own third derivative (NaN) made every count fail,
    naming the user's function. The partial is routed to the exact form too: the count of ``nn.GELU("tanh")``."""
    from transformers.activations import ACT2FN

    counts = []
    for act in (ACT2FN["gelu_pytorch_tanh"], nn.GELU(approximate="tanh")):
        torch.manual_seed(0)
        gated = nn.Sequential(nn.Linear(4, 6), act, nn.Linear(6, 3), nn.LayerNorm(3)).double()
        counts.append(count_laws(gated, (4,)))
    assert all(c.conclusive for c in counts) and counts[0].num_laws == counts[1].num_laws


def test_a_transformers_attention_narrower_than_its_heads_is_refused_as_mha_is() -> None:
    """At d = 2 < k = 8 certify printed the formula 40 beside a conclusive N = 37, "complete": the formula counts k × k
    laws per head, which are not independent under d ≥ k. Refused, as mha, gqa and linear attention refuse it."""
    with pytest.raises(ValueError, match=r"--dim \(2\) must be at least --head-dim \(8\): the counts assume d ≥ k"):
        get_arch("qwen3-attention").build(ArchOptions(dim=2, head_dim=8))


def _edited(edit) -> set[str]:
    """The block kinds of a two-layer Llama with ReLU gates after ``edit(model)``, and the warnings it gave."""
    model = tiny_model("llama", ArchOptions(dim=8, heads=2, head_dim=4, hidden=4), num_hidden_layers=2,
                       hidden_act="relu")  # fmt: skip
    edit(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keys = set(laws_of(model))  # evaluated: a law reading a weight the model lacks raised KeyError
    return keys, " ".join(str(w.message) for w in caught)


def test_a_model_changed_after_it_was_built_keeps_only_the_laws_that_still_hold() -> None:
    """Each change below kept laws that moved at first order (a probe's τ-ratio 4, not 16), or crashed laws_of: the
    adapters read the config and trusted the modules."""
    keys, _ = _edited(lambda model: None)
    assert any(":|A_{:,i}|^2" in k for k in keys) and any("input_layernorm" in k for k in keys)

    def gelu(model):  # the config still says ReLU, whose gate law the MLP lost
        model.model.layers[0].mlp.act_fn = nn.GELU()

    keys, said = _edited(gelu)
    assert not any(k.startswith("model.layers.0.mlp:") for k in keys) and any("layers.1.mlp:" in k for k in keys)
    assert "has act_fn = GELU(approximate='none'), not the config's hidden_act='relu'" in said

    def layer_norm(model):  # a bias and a mean: no coupling of the gain with q, k, v
        model.model.layers[0].input_layernorm = nn.LayerNorm(8)

    keys, said = _edited(layer_norm)
    assert not any(k.startswith("model.layers.0:input_layernorm") for k in keys)
    assert any(k.startswith("model.layers.0:post_attention_layernorm") for k in keys)
    assert "the coupling of input_layernorm is left out: input_layernorm is LayerNorm" in said

    def lora(model):  # W + BA
        class LoRA(nn.Module):
            def __init__(self, base: nn.Linear) -> None:
                super().__init__()
                self.base_layer, self.A, self.B = base, nn.Linear(8, 2, bias=False), nn.Linear(2, base.out_features)

            def forward(self, x):
                return self.base_layer(x) + self.B(self.A(x))

        model.model.layers[0].self_attn.q_proj = LoRA(model.model.layers[0].self_attn.q_proj)

    keys, said = _edited(lora)
    assert not any(k.startswith(("model.layers.0.self_attn:", "model.layers.0:input")) for k in keys)
    assert "has q_proj = LoRA, not nn.Linear" in said

    def gemma_norm(model):  # an instance's own forward: x/rms·(1 + γ)
        norm = model.model.norm
        norm.forward = lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + norm.weight)

    keys, said = _edited(gemma_norm)
    assert not any(k.startswith("model.norm") for k in keys) and "its forward replaced on model.norm" in said

    def shared(model):
        model.model.layers[1].self_attn.q_proj.weight = model.model.layers[0].self_attn.q_proj.weight

    keys, said = _edited(shared)
    assert not any(k.startswith(("model.layers.0.self_attn:", "model.layers.1.self_attn:")) for k in keys)
    assert "a weight shared outside it (`model.layers.0.self_attn.q_proj.weight` is also `model.layers.1" in said


def test_a_global_forward_hook_leaves_every_block_out() -> None:
    model = tiny_model("llama", ArchOptions(dim=8, heads=2, head_dim=4))
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        with pytest.warns(UserWarning, match="a global forward hook"):
            with pytest.raises(ValueError, match="no block with known conservation laws in LlamaForCausalLM"):
                laws_of(model)
    finally:
        handle.remove()
    assert laws_of(model)


def test_a_rotary_buffer_edited_after_it_was_built_is_counted_as_the_model_turns() -> None:
    """A frequency zeroed (p-RoPE's unturned pairs): the count took the config's table and said N = 39, conclusive; the
    unturned pair's whole 2×2 Gram law is conserved, two laws more than its block law."""
    model = tiny_model("llama", ArchOptions(dim=8, heads=1, head_dim=4, hidden=3, out=16))
    ids = torch.arange(16).reshape(4, 4)
    before = count_laws(countable(model), inputs=ids, progress=False)
    with torch.no_grad():
        model.model.rotary_emb.inv_freq[-1] = 0.0
    after = count_laws(countable(model), inputs=ids, progress=False)
    assert before.conclusive and after.conclusive and after.num_laws == before.num_laws + 2
