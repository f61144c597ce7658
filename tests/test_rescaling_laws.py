"""The laws of rescaled units, proposed from the layers a forward calls and kept only where their check passes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite import Monitor, check_laws
from conslaw_lite import rescaling_laws as rescaling
from conslaw_lite.counting import check
from conslaw_lite.counting.check import gradient_rows, law_residuals
from conslaw_lite.counting.problem import problem_of
from conslaw_lite.drift import measure, model_setup
from conslaw_lite.rescaling_laws import called_layers, proposed_laws, rescaling_laws


class LeNet(nn.Module):
    """A LeNet as users write it: layers as attributes, the nonlinearities and pooling in ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 4, 3), nn.Conv2d(4, 8, 3)
        self.fc1, self.fc2 = nn.Linear(8 * 4 * 4, 32), nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.relu(self.conv2(x)).flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))


def test_a_lenet_too_large_to_search_keeps_the_laws_of_its_channels_and_units_and_they_drift_as_tau_squared() -> None:
    """D = 4,794, over a monitor's search: the 4 + 8 channels and 32 units rescale (channel c of conv2 is the columns
    16c:16c+16 of fc1 after flattening); the monitor watches them, and their drift goes as τ² (slope 2): conserved by
    gradient flow, which a law broken at first order would not be (slope 1)."""
    torch.manual_seed(0)
    model = LeNet().double()
    monitor = Monitor(model, input_shape=(1, 14, 14))
    (part,) = monitor.own.parts
    assert part.num_params == 4794 and part.outcome.startswith("44 laws of rescaled units checked; not counted")
    channels = "for i in 0..7: ‖conv2.weight[i, :, :, :]‖² + conv2.bias[i]² − ‖fc1.weight[:, 16i:16i+16]‖²"
    assert list(part.laws)[1] == channels
    report = measure(model_setup(LeNet, (1, 14, 14), samples=8), [1e-4, 2e-4], steps=3, laws=part.laws)
    assert abs(report.slope_lr - 2) < 0.01 and all(p.identity_error < 1e-12 for p in report.points)


@pytest.mark.parametrize(
    ("between", "kept"),
    [
        (nn.ReLU(), True),
        (nn.LeakyReLU(0.1), True),
        (nn.Sequential(nn.ReLU(), nn.Dropout(0.5)), True),  # checked in eval mode: dropout is the identity there
        (nn.GELU(), False),
        (nn.Tanh(), False),
        (nn.LayerNorm(5, elementwise_affine=False), False),  # reads every unit: none rescales alone
    ],
)
def test_a_unit_is_kept_only_where_what_lies_between_scales_with_it(between: nn.Module, kept: bool) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), between, nn.Linear(5, 2)).double()
    x = torch.randn(2, 3, dtype=torch.float64)
    assert len(proposed_laws(net, x)) == 1
    laws, outcome = rescaling_laws(net, (3,))
    assert any(key.startswith("for i") for key in laws) == kept
    # the LayerNorm ignores a shift of all of layer 0's units: Σ_e 0.weight[e, :] and Σ_e 0.bias[e], 4 linear laws
    shifts = " and 4 linear laws of shifts a softmax or a norm ignores" if isinstance(between, nn.LayerNorm) else ""
    assert outcome.startswith(
        "5 laws of rescaled units checked" if kept else f"0 laws of rescaled units{shifts} checked, 1"
    )


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x + self.fc2(torch.relu(self.fc1(x))))


def test_a_skip_connection_breaks_the_rescaling_it_bypasses_and_not_the_one_inside() -> None:
    """fc1's units are read by fc2 alone (kept); fc2's outputs are summed with x before the head (dropped)."""
    torch.manual_seed(0)
    model = Residual().double()
    laws, outcome = rescaling_laws(model, (4,))
    assert list(laws) == ["for i in 0..3: ‖fc1.weight[i, :]‖² + fc1.bias[i]² − ‖fc2.weight[:, i]‖²"]
    assert outcome == (
        "4 laws of rescaled units checked, 1 proposed pattern failed its check (a unit or block the layers between do "
        "not keep); not counted: other laws may exist"
    )


def test_norm_gains_and_embedding_columns_are_units_and_a_shared_or_frozen_layer_proposes_none() -> None:
    torch.manual_seed(0)
    bn = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 2, 3)).double()
    laws, _ = rescaling_laws(bn, (1, 6, 6))
    assert list(laws) == ["for i in 0..2: 1.weight[i]² + 1.bias[i]² − ‖3.weight[:, i, :, :]‖²"]
    tokens = nn.Sequential(nn.Embedding(7, 3), nn.Linear(3, 2)).double()
    ids = torch.arange(7).reshape(7, 1).repeat(1, 2)
    laws, _ = rescaling_laws(tokens, inputs=ids)
    assert list(laws) == ["for i in 0..2: ‖0.weight[:, i]‖² − ‖1.weight[:, i]‖²"]
    shared = nn.Linear(3, 3)
    twice = nn.Sequential(shared, nn.ReLU(), shared, nn.ReLU(), nn.Linear(3, 2))
    assert [name for name, _ in called_layers(twice, torch.randn(2, 3))] == ["4"] and not proposed_laws(
        twice, torch.randn(2, 3)
    )
    frozen = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    frozen[2].weight.requires_grad_(False)
    assert not proposed_laws(frozen, torch.randn(2, 3))


def test_gpt2_conv1d_layers_are_units_read_along_their_weight_rows() -> None:
    """transformers' ``Conv1D`` (y = x W + b, W of shape (inputs, outputs)): a LayerNorm's units are W's rows, its own
    units W's columns and bias; the laws kept are conserved, 4 + 6 independent ones among the count's."""
    Conv1D = pytest.importorskip("transformers.pytorch_utils").Conv1D
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(4), Conv1D(6, 4), nn.ReLU(), Conv1D(3, 6)).double()
    laws, outcome = rescaling_laws(model, (4,))
    assert list(laws) == [
        "for i in 0..3: 0.weight[i]² + 0.bias[i]² − ‖1.weight[i, :]‖²",
        "for i in 0..5: ‖1.weight[:, i]‖² + 1.bias[i]² − ‖3.weight[i, :]‖²",
    ]
    check = check_laws(model, laws, (4,))
    assert check.max_residual < 1e-9 and check.independent == 10 and check.num_laws >= 10


def test_a_language_model_given_many_windows_is_checked_on_a_few() -> None:
    """Token models come with the inputs a count needs (hundreds of windows, each T × vocabulary outputs): the check
    reads the first 2 to 8 of them, enough for 512 output entries, and 512 of their outputs, not all (a two-layer
    Mistral's 56 windows took 160 s, and all its outputs at once held more than 24 GB)."""
    torch.manual_seed(0)
    lm = nn.Sequential(nn.Embedding(64, 8), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 64)).double()
    ids = torch.randint(0, 64, (300, 8), generator=torch.Generator().manual_seed(0))
    seen = []

    def spied(problem, laws, input_shape, inputs, seed, samples, max_rows, rank, pieces):
        seen.append((len(inputs), max_rows, pieces))
        return law_residuals(problem, laws, input_shape, inputs, seed, samples, max_rows, rank, pieces)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rescaling, "law_residuals", spied)
        laws, _ = rescaling_laws(lm, inputs=ids)
    assert seen == [(2, 512, True)] and sum(law(dict(lm.named_parameters())).numel() for law in laws.values()) == 8 + 16


def test_gradient_rows_in_chunks_are_the_jacobian() -> None:
    """However small the memory allowed for one chunk of backward passes, the rows are ∇f_i, in order; ``most`` of
    them are as many distinct rows of it, in order."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4)).double()
    problem = problem_of(net, None)
    theta = problem.flatten(dict(net.named_parameters()))
    f = problem.outputs(torch.randn(6, 3, dtype=torch.float64))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check, "ROWS_BYTES", 1)  # one row at a time
        rows = list(gradient_rows(f, theta))
    jacobian = torch.func.jacrev(f)(theta)
    assert len(rows) == 24 and torch.allclose(torch.cat(rows), jacobian, atol=0, rtol=1e-13)
    drawn = torch.cat(list(gradient_rows(f, theta, 5, torch.Generator().manual_seed(0))))
    which = [int((jacobian - row).abs().sum(1).argmin()) for row in drawn]
    assert len(drawn) == 5 and which == sorted(set(which)) and torch.allclose(drawn, jacobian[which], rtol=1e-13)


def test_a_screen_past_whole_entries_never_holds_the_law_gradients_and_keeps_the_same_laws() -> None:
    """Past WHOLE_ENTRIES the screen takes ⟨∇h, ∇f_i⟩ as jvps and estimates ‖∇h‖ from 16 directions: the laws kept
    are the same, a broken one's residual within the estimate's factor of its exact value."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 3)).double()
    proposed = proposed_laws(net, torch.randn(2, 6, dtype=torch.float64))
    problem = problem_of(net, None)
    exact, independent = law_residuals(problem, proposed, (6,), None, rank=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check, "WHOLE_ENTRIES", 0)
        screened, none = law_residuals(problem, proposed, (6,), None, rank=False)
    relu, gelu = proposed
    assert independent == 16 and none is None
    assert exact[relu] < 1e-12 and screened[relu] < 1e-12 and 1 / 3 < screened[gelu] / exact[gelu] < 3
    assert exact[gelu] > 1e-3


def test_a_monitor_watches_an_mnist_mlp_of_two_million_parameters() -> None:
    """An MLP 784-1024-1024-10 as MNIST tutorials write it (float32, D = 1,863,690): its 2,048 rescaled units in
    seconds, where the check held all of ∇h (30 GB) and the kernel killed it."""
    torch.manual_seed(0)
    mlp = nn.Sequential(
        nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    monitor = Monitor(mlp, input_shape=(1, 28, 28))
    (part,) = monitor.own.parts
    assert part.outcome.startswith("2048 laws of rescaled units checked; not counted")


def test_a_batch_norm_in_train_mode_is_checked_on_batches_as_it_trains() -> None:
    """Conv, BatchNorm without affine map, ReLU, conv: at fresh running statistics the eval-mode norm is linear and
    the convolutions' rescaling passes there, but batch statistics divide the scale out, so in train mode the check
    drops it. A norm's own gain and shift are kept in either mode; the model's running statistics stay untouched."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4, affine=False), nn.ReLU(), nn.Conv2d(4, 2, 3)).double()
    laws, outcome = rescaling_laws(plain, (1, 6, 6))
    assert laws == {} and "checked on batches of 8 (its BatchNorms train with batch statistics)" in outcome
    assert len(rescaling_laws(plain.eval(), (1, 6, 6))[0]) == 1
    affine = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 2, 3)).double()
    laws, _ = rescaling_laws(affine, (1, 6, 6))
    assert list(laws) == ["for i in 0..2: 1.weight[i]² + 1.bias[i]² − ‖3.weight[:, i, :, :]‖²"]
    assert affine[1].training and affine[1].num_batches_tracked == 0 and not affine[1].running_mean.any()
    pooled = nn.Sequential(  # a ResNet's end: a BatchNorm on 1×1 maps, which one input alone cannot normalize
        nn.Conv2d(1, 3, 3), nn.AdaptiveAvgPool2d(1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(3, 2)
    ).double()
    laws, _ = rescaling_laws(pooled, (1, 5, 5))
    assert list(laws) == ["for i in 0..2: 2.weight[i]² + 2.bias[i]² − ‖5.weight[:, i]‖²"]


def test_a_depthwise_convolution_reads_each_channel_through_its_own_filters() -> None:
    """MobileNet's blocks: a norm's gains against the depthwise filters of their channel (two per channel at a
    multiplier of 2), the depthwise channels against the pointwise convolution's columns; all kept and conserved."""
    torch.manual_seed(0)
    block = (
        nn.Sequential(
            nn.Conv2d(2, 4, 1),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.Conv2d(4, 8, 3, groups=4),
            nn.ReLU(),
            nn.Conv2d(8, 3, 1),
        )
        .double()
        .eval()
    )
    laws, _ = rescaling_laws(block, (2, 5, 5))
    assert list(laws) == [
        "for i in 0..3: 1.weight[i]² + 1.bias[i]² − ‖3.weight[2i:2i+2, :, :, :]‖²",
        "for i in 0..7: ‖3.weight[i, :, :, :]‖² + 3.bias[i]² − ‖5.weight[:, i, :, :]‖²",
    ]
    check = check_laws(block, laws, (2, 5, 5))
    assert check.max_residual < 1e-9 and check.independent == 12


class FusedGLU(nn.Module):
    """A SwiGLU whose gate and linear branch are one ``Linear`` (Phi-3's ``gate_up_proj``), cut in halves or
    interleaved row by row."""

    def __init__(self, d: int, hidden: int, interleaved: bool) -> None:
        super().__init__()
        self.interleaved = interleaved
        self.gate_up, self.down = nn.Linear(d, 2 * hidden), nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        both = self.gate_up(x)
        gate, up = both.unflatten(-1, (-1, 2)).unbind(-1) if self.interleaved else both.chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


@pytest.mark.parametrize(
    ("interleaved", "key"),
    [
        (False, "for h in 0..4: gate_up.weight[5+h, :] gate_up.weight[5+h, :]ᵀ + gate_up.bias[5+h] "
         "gate_up.bias[5+h]ᵀ − down.weight[:, h]ᵀ down.weight[:, h]"),  # a segment of a fused projection (head_laws)
        (True, "for i in 0..4: ‖gate_up.weight[2i+1, :]‖² + gate_up.bias[2i+1]² − ‖down.weight[:, i]‖²"),
    ],
)  # fmt: skip
def test_a_glu_whose_gate_and_linear_branch_are_one_linear_gets_the_laws_of_its_units(interleaved, key: str) -> None:
    torch.manual_seed(0)
    model = FusedGLU(4, 5, interleaved).double()
    laws, outcome = rescaling_laws(model, (4,))
    assert list(laws) == [key]
    assert outcome.startswith("5 laws of rescaled units checked")  # the gate's half fails, and the other layout
    check = check_laws(model, laws, (4,))
    assert check.complete and check.independent == check.num_laws == 5


class TiedAttentionLM(nn.Module):
    """An embedding, one attention written with ``nn.Linear``, a head tied to the embedding (``head.weight``)."""

    def __init__(self, vocab: int = 16, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, d), nn.Linear(d, vocab, bias=False)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.head.weight, self.heads = self.emb.weight, heads

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        split = lambda t: t.unflatten(-1, (self.heads, -1)).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), is_causal=True)
        return self.head(x + self.o(a.transpose(1, 2).flatten(2)))


def test_a_head_tied_to_the_embedding_is_read_by_the_name_theta_holds_it_under() -> None:
    """The head's weight is ``emb.weight`` in ``named_parameters()``: a proposed law reading ``head.weight`` could not
    be evaluated, and the whole part was dropped (Monitor: "no conservation law to watch"). Read by its first name,
    the attention's laws are kept, and each drifts as τ² under SGD: 16 times less at a quarter of the step."""
    torch.manual_seed(0)
    model = TiedAttentionLM().double()
    ids = torch.randint(0, 16, (8, 6), generator=torch.Generator().manual_seed(1))
    laws, _ = rescaling_laws(model, inputs=ids)
    assert laws and "emb.weight" in {n for n, _ in model.named_parameters()}
    moved = []
    for lr in (0.004, 0.001):
        net = TiedAttentionLM().double()
        net.load_state_dict(model.state_dict())
        start = {key: law(dict(net.named_parameters())).detach().clone() for key, law in laws.items()}
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        for _ in range(20):
            opt.zero_grad()
            F.cross_entropy(net(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
            opt.step()
        theta = {n: p.detach() for n, p in net.named_parameters()}
        moved.append({key: float((law(theta) - start[key]).norm() / start[key].norm()) for key, law in laws.items()})
    assert all(moved[0][key] / moved[1][key] > 10 for key in laws), moved
