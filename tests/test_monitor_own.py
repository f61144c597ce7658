"""Monitor on a model of one's own: the laws found for the parts outside the registered blocks (own_laws.py)."""

from __future__ import annotations

import copy
import re
import time
import warnings

import pytest
import torch
from torch import nn

from conslaw_lite.counting import check_laws
from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.ffn.block import SwiGLU
from conslaw_lite.find_laws import find_laws
from conslaw_lite.monitor import Monitor
from conslaw_lite.own_laws import SPENT, own_laws, uncovered

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def mlp(bias: bool, activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6, bias=bias), activation(), nn.Linear(6, 3, bias=bias)).double()


def train(model: nn.Module, monitor: Monitor, steps: int = 20, lr: float = 1e-3) -> None:
    """``steps`` of SGD on a random regression, the monitor attached."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(32, 3, generator=gen, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    monitor.attach(opt)
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()


@pytest.mark.parametrize("bias", [False, True])
def test_a_plain_mlp_gets_its_unit_laws_found_and_watched(bias: bool, capsys: pytest.CaptureFixture) -> None:
    """‖W1[i, :]‖² (+ b1[i]²) − ‖W2[:, i]‖² per hidden unit: found, checked, printed once, and conserved up to τ²."""
    model = mlp(bias)
    monitor = Monitor(model, input_shape=(4,))
    printed = capsys.readouterr().out
    assert [g.key for g in monitor.groups] == ["found"]
    assert "N = 6: the list is complete" in printed and re.search(r"in \d+\.\d s", printed)
    assert printed.count("Monitor:") == 1
    (law,) = monitor.own.laws.values()  # one pattern over the 6 hidden units
    p = dict(model.named_parameters())
    by_hand = (p["0.weight"] ** 2).sum(1) - (p["2.weight"] ** 2).sum(0) + (p["0.bias"] ** 2 if bias else 0)
    assert torch.allclose(law(p).abs(), by_hand.abs(), rtol=1e-12)  # the echelon form may flip the sign
    w1 = (p["0.weight"] ** 2).sum().item()
    train(model, monitor)
    moved = abs((p["0.weight"] ** 2).sum().item() - w1) / w1  # a quantity that is not conserved, for scale
    assert monitor.epsilon("found")[-1] < 1e-2 * moved


def test_a_known_block_keeps_its_laws_and_the_rest_gets_found_laws(capsys: pytest.CaptureFixture) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(SwiGLU(4, 3, 4), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    monitor = Monitor(model, input_shape=(4,))
    assert [g.key for g in monitor.groups] == ["swiglu", "swiglu:control", "found"]
    (part,) = monitor.own.parts
    assert (part.path, part.layers, part.num_params) == ("1-3", "Linear-ReLU-Linear", 4 * 5 + 5 + 5 * 3 + 3)
    assert "N = 5: the list is complete" in part.outcome and all(k.startswith("1-3:") for k in part.laws)
    assert "`1-3` (Linear-ReLU-Linear, 43 parameters)" in capsys.readouterr().out
    w = model[1].weight.detach().clone()
    train(model, monitor)
    moved = abs((model[1].weight ** 2).sum().item() - (w**2).sum().item()) / (w**2).sum().item()  # not conserved
    assert monitor.epsilon("found")[-1] < 1e-2 * moved


@pytest.mark.slow
def test_a_gelu_ffn_has_no_laws_and_says_so() -> None:
    with pytest.raises(ValueError, match=r"(?s)no conservation law to watch.*N = 0: none exist"):
        Monitor(mlp(True, nn.GELU), input_shape=(4,))
    torch.manual_seed(0)
    model = nn.Sequential(SwiGLU(4, 3, 4), nn.Linear(4, 5), nn.GELU(), nn.Linear(5, 3)).double()
    monitor = Monitor(model, input_shape=(4,))  # the SwiGLU's laws are watched, the GELU part has none
    assert [g.key for g in monitor.groups] == ["swiglu", "swiglu:control"]
    # the laws CCᵀ − AᵀA between the SwiGLU's output layer and the Linear after it couple the part to the block
    assert monitor.own.parts[0].outcome == "no laws of its own (N = 0 as a function of its input)"


def test_without_an_input_it_names_what_is_missing() -> None:
    with pytest.raises(ValueError, match=r"`\(the model\)` \(Linear-ReLU-Linear\).*input_shape=.*inputs=.*laws="):
        Monitor(mlp(False))
    torch.manual_seed(0)
    model = nn.Sequential(SwiGLU(4, 3, 4), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    monitor = Monitor(model)  # the registered block alone, as before; the rest listed, not searched
    assert [g.key for g in monitor.groups] == ["swiglu", "swiglu:control"]
    assert not monitor.own.searched and "no input_shape or inputs given" in monitor.own.parts[0].outcome


def test_laws_given_override_the_search(capsys: pytest.CaptureFixture) -> None:
    model = mlp(False)
    laws = {"unit 0": lambda p: (p["0.weight"][0] ** 2).sum() - (p["2.weight"][:, 0] ** 2).sum()}
    monitor = Monitor(model, laws=laws, input_shape=(4,))
    assert monitor.own is None and capsys.readouterr().out == ""
    assert monitor.relative_drift("found").shape == (1, 1)


class HomeMadeBlock(nn.Module):
    """A pre-norm transformer block: the package's attention, torch's LayerNorms and a GELU FFN of one's own."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(4), nn.LayerNorm(4)
        self.attn = MultiHeadAttention(4, 2, 2)
        self.ffn = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


@pytest.mark.slow
def test_a_home_made_transformer_block_mixing_known_and_unknown_parts() -> None:
    """Pre-norm: norm2's output is read by the FFN alone, so (γ_j, β_j) ↦ c(γ_j, β_j), W[:, j] ↦ W[:, j] / c (W the
    FFN's first weight) keeps the block: γ_j² + β_j² − ‖W[:, j]‖², 4 laws, found with the attention held fixed. Searched
    child by child (as before), the norms and the GELU FFN each had none."""
    torch.manual_seed(0)
    block = HomeMadeBlock().double()
    monitor = Monitor(block, input_shape=(3, 4))
    assert [g.key for g in monitor.groups] == ["mha", "mha:control", "found"]
    (part,) = monitor.own.parts
    assert part.path == "" and part.outcome == "4 quadratic laws found; N = 4: the list is complete"
    (law,) = part.laws.values()
    p = dict(block.named_parameters())
    by_hand = p["norm2.weight"] ** 2 + p["norm2.bias"] ** 2 - (p["ffn.0.weight"] ** 2).sum(0)
    assert torch.allclose(law(p).abs(), by_hand.abs(), rtol=1e-10)


def test_seconds_spent_searching_a_module_whole_are_said_of_that_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search of the block whole (its attention held fixed) that runs out of seconds: each child then said the
    seconds "were spent on the parts before it", though none was listed before it; the block's own line now says
    where they went (the search stopped here at once: the seconds are the machine's)."""
    import conslaw_lite.own_laws as own

    def out_of_time(*args: object) -> None:
        raise own.OutOfTime

    monkeypatch.setattr(own, "_find", out_of_time)
    parts = own_laws(HomeMadeBlock().double(), input_shape=(3, 4)).parts
    assert parts[0].path == "" and parts[0].outcome == f"{own.STOPPED} (searched whole, its blocks held fixed)"
    assert [part.path for part in parts[1:]] == ["norm1", "norm2", "ffn"]


def test_a_torch_transformer_layer_gets_the_laws_between_its_children() -> None:
    """nn.TransformerEncoderLayer (post-norm, ReLU): self_attn is registered; linear1, linear2 and the norms are one
    part with it held fixed. Its ReLU units give ‖linear1.weight[i, :]‖² + linear1.bias[i]² − ‖linear2.weight[:, i]‖²
    (8), and norm2, which removes each token's mean, makes Σ_j linear2.weight[j, i] (8) and Σ linear2.bias laws:
    N = 17. The last lies in no unit slice: the linear laws of linear2 (72 coordinates) are searched whole."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 8, dropout=0.0, batch_first=True).double()
    assert uncovered(layer) == ["linear1", "linear2", "norm1", "norm2"]  # listed child by child
    monitor = Monitor(layer, input_shape=(3, 8))
    assert [g.key for g in monitor.groups][-1] == "found"
    (part,) = monitor.own.parts
    assert part.path == "" and part.outcome == "17 quadratic laws found; N = 17: the list is complete"
    p = dict(layer.named_parameters())
    unit = next(law for name, law in part.laws.items() if "linear1" in name)
    by_hand = (p["linear1.weight"] ** 2).sum(1) + p["linear1.bias"] ** 2 - (p["linear2.weight"] ** 2).sum(0)
    assert torch.allclose(unit(p).abs(), by_hand.abs(), rtol=1e-10)
    assert "Σ linear2.bias" in part.laws
    bias_sum = check_laws(layer, {"Σ linear2.bias": lambda q: q["linear2.bias"].sum()}, (3, 8))
    assert bias_sum.max_residual < 1e-10 and torch.allclose(part.laws["Σ linear2.bias"](p), p["linear2.bias"].sum())


class Twice(nn.Module):
    """The same linear layer applied twice, then a ReLU net: the first part's laws would not be the model's."""

    def __init__(self) -> None:
        super().__init__()
        self.square = nn.Linear(3, 3, bias=False)
        self.net = nn.Sequential(nn.Linear(3, 4, bias=False), nn.ReLU(), nn.Linear(4, 2, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.square(self.square(x)))


def test_a_layer_called_twice_inside_its_part_is_part_of_its_function() -> None:
    """Twice is one part, net(square(square(x))): its laws are those of that function.

    The ReLU's 4 units, and S ↦ cS, A₁ ↦ c⁻²A₁ (S² ↦ c²S²) keeps ‖S‖² − 2‖A₁‖²: N = 5.
    """
    torch.manual_seed(0)
    (part,) = own_laws(nn.Sequential(Twice(), SwiGLU(2, 2, 2)).double(), input_shape=(3,)).parts
    assert part.path == "0" and "N = 5: the list is complete" in part.outcome


def test_parts_whose_laws_would_not_be_the_models_are_not_searched() -> None:
    """A layer used in two places, a weight tied to another part's: reported, never searched (module docstring)."""
    torch.manual_seed(0)
    shared = nn.Linear(3, 3, bias=False)
    model = nn.Sequential(shared, nn.ReLU(), SwiGLU(3, 2, 3), shared).double()
    outcomes = {part.path: part.outcome for part in own_laws(model, input_shape=(3,)).parts}
    assert outcomes["0-1"] == "not searched: `0` is called 2 times in one forward, not once"
    tied = nn.Sequential(nn.Linear(3, 3, bias=False), nn.ReLU(), SwiGLU(3, 2, 3), nn.Linear(3, 3, bias=False))
    tied[3].weight = tied[0].weight
    outcomes = {part.path: part.outcome for part in own_laws(tied.double(), input_shape=(3,)).parts}
    assert outcomes["0-1"] == "not searched: its parameter `0.weight` is also `3.weight`"


class ByKeyword(nn.Module):
    """A ReLU net whose input is a keyword argument, as transformers' inner models take ``input_ids=``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 3))

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)


class CallsByKeyword(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = ByKeyword(), nn.Linear(3, 1100)  # the head puts the whole model past a monitor's search

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # GELUs: no unit rescales, so the whole is searched in pieces
        return self.head(nn.functional.gelu(self.body(x=x)))


def test_a_part_called_with_a_keyword_tensor_is_named_with_that_keyword() -> None:
    torch.manual_seed(0)
    outcomes = {part.path: part.outcome for part in own_laws(CallsByKeyword().double(), input_shape=(3,)).parts}
    assert outcomes["body"] == (
        "not searched: `body` is called with its tensor as a keyword argument (x=...), not as its first argument"
    )


@pytest.mark.slow
def test_an_embedding_part_is_searched_on_every_token_id() -> None:
    """EᵀE − Σ_t W_tᵀW_t (6 laws) and the ReLU's 4 units: N = 10 on ids 0..9, every id drawn."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 3), nn.Flatten(), nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    (part,) = own_laws(model, inputs=torch.tensor([[1, 2], [3, 4]])).parts
    assert "N = 10: the list is complete" in part.outcome


@pytest.mark.slow
def test_a_dropout_part_in_train_mode_keeps_the_laws_its_masks_keep() -> None:
    """A part is searched with its dropouts off, and each law found is checked under their masks: the ReLU units'
    rescalings commute with a mask (kept, and the monitor trains with dropout on); the shifts a LayerNorm removes
    become c·m after a dropout (left out: 2 of 3). Found in eval mode, train mode warns at the next record."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Dropout(0.3), nn.Linear(6, 3)).double()
    monitor = Monitor(model, input_shape=(4,))
    (part,) = monitor.own.parts
    assert "N = 6: the list is complete; found with its dropouts off, and each holds under their masks" in part.outcome
    x, y = torch.randn(32, 4, dtype=torch.float64), torch.randn(32, 3, dtype=torch.float64)
    drift = []
    for lr in (0.02, 0.005):  # laws of each masked step's flow: their drift falls as τ², not τ
        torch.manual_seed(1)
        net = copy.deepcopy(model)
        watched = Monitor(net, input_shape=(4,))
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning that train mode breaks them
            for _ in range(20):
                opt.zero_grad()
                ((net(x) - y) ** 2).mean().backward()
                opt.step()
                watched.step()
        drift.append(watched.last_epsilon()["found"])
    assert drift[0] / drift[1] > 8, drift
    norm = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.3), nn.LayerNorm(4, elementwise_affine=False), nn.Linear(4, 2))
    (part,) = own_laws(norm.double(), input_shape=(3,)).parts
    assert "2 of the 3 laws listed fail under their masks in training" in part.outcome
    assert list(part.laws) == ["for i in 0..1: Σ 3.weight[i, :]"]  # the LayerNorm's output sums to 0, masked or not
    monitor = Monitor(model.eval(), input_shape=(4,))
    model.train()
    with pytest.warns(UserWarning, match=r"`2` \(Dropout, p=0.3\) is in train mode"):
        monitor.step()


class BatchNormCNN(nn.Module):
    """The CNN of a tutorial: conv, BatchNorm, ReLU, pooling, twice, then a linear head on the mean of each channel."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.c2, self.bn2 = nn.Conv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.c1(x))), 2)
        return self.head(torch.relu(self.bn2(self.c2(x))).mean((2, 3)))


class DropoutCNN(BatchNormCNN):
    """The tutorial CNN with a dropout before its head."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.c1(x))), 2)
        return self.head(self.drop(torch.relu(self.bn2(self.c2(x))).mean((2, 3))))


def test_a_cnn_training_its_batch_norms_and_a_dropout_keeps_the_laws_that_hold_under_the_masks() -> None:
    """BatchNorms and a dropout in train mode: the laws of its rescaled units were checked with the dropout off, and
    the monitor then refused the dropout with the message for laws= (none was given). They are now checked under its
    masks too: a mask commutes with each unit's rescaling, so the 10 laws are watched."""
    torch.manual_seed(0)
    monitor = Monitor(DropoutCNN().double(), input_shape=(1, 8, 8))
    (part,) = monitor.own.parts
    assert part.dropout_masked and part.batch_coupled and len(monitor.own.laws) == 2
    assert "10 laws of rescaled units checked on batches of 8" in part.outcome
    assert "found with its dropouts off, and each holds under their masks in training" in part.outcome


def test_a_cnn_training_its_batch_norms_is_watched_on_the_laws_batch_statistics_keep() -> None:
    """No count applies to batch-coupled outputs, so the monitor refused it. Its rescalings are checked on batches
    instead: each norm's gain and shift against the next layer's columns (4 + 6 laws). They are laws of the gradient
    flow: over 30 SGD steps their drift falls as τ² (16 times at a quarter of the step), not as τ (4 times)."""
    x = torch.randn(32, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = torch.randint(0, 3, (32,), generator=torch.Generator().manual_seed(2))
    drift = []
    for lr in (0.05, 0.0125):
        torch.manual_seed(0)
        model = BatchNormCNN().double()
        monitor = Monitor(model, input_shape=(1, 8, 8))
        (part,) = monitor.own.parts
        assert "10 laws of rescaled units checked on batches of 8 (its BatchNorms train" in part.outcome
        assert part.batch_coupled and model.bn1.training and model.bn1.num_batches_tracked == 0
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        monitor.attach(optimizer)
        for _ in range(30):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        drift.append(monitor.epsilon("found")[-1])
    assert drift[0] / drift[1] > 10, drift


@pytest.mark.slow
def test_a_small_cnn_gets_its_channel_laws() -> None:
    """Conv-ReLU-Conv-Flatten-Linear: one law per ReLU channel (2), and, the second conv being followed by a linear
    map, its 2 output channels mixed by any G ∈ GL(2) against the Linear's column blocks: 2·3/2 = 3. N = 5."""
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(1, 2, 2), nn.ReLU(), nn.Conv2d(2, 2, 2), nn.Flatten(), nn.Linear(8, 2)).double()
    (part,) = own_laws(cnn, input_shape=(1, 4, 4)).parts
    assert part.layers == "Conv2d-ReLU-Conv2d-Flatten-Linear"
    assert part.outcome == "5 quadratic laws found; N = 5: the list is complete"
    assert len(part.laws) == 4  # the two ReLU channels' laws are one pattern, not one of them plus the other laws
    channels = "for i in 0..1: ‖0.weight[i, 0, :, :]‖² + 0.bias[i]² − ‖2.weight[:, i, :, :]‖²"
    assert next(iter(part.laws)).startswith(channels)


def test_a_max_pooling_cnn_whose_last_conv_sees_one_pixel_gets_its_laws() -> None:
    """Two max-pools take 4 × 4 images to 1 × 1 maps, where 8 of the 9 taps of each of the last conv's 16 kernels
    read only padding: 128 taps that never move, and one law per ReLU channel (3 + 4 + 4), N = 139. Behind the
    max-pools those zeros were taken for saturation, the count was refused, and the monitor watched nothing."""
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4, 3),
    )  # fmt: skip
    (part,) = own_laws(cnn, input_shape=(1, 4, 4)).parts
    n = 16 * 8 + 3 + 4 + 4
    assert part.outcome == f"{n} quadratic laws found; N = {n}: the list is complete"


def test_a_part_too_large_to_search_at_the_start_watches_its_rescaled_units_at_once() -> None:
    """The whole 64-64-64-2 ReLU MLP (D = 8,450) is over SEARCH_MAX_PARAMS: no count, its 128 unit rescalings proposed
    and checked in seconds, the outcome saying they are not counted."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))  # float32
    start = time.perf_counter()
    (part,) = own_laws(model, input_shape=(64,)).parts
    assert time.perf_counter() - start < 10
    assert part.outcome.startswith(
        "128 laws of rescaled units checked; not counted: other laws may exist (D = 8,450 is over the 3,072"
    )
    assert list(part.laws) == [
        "for i in 0..63: ‖0.weight[i, :]‖² + 0.bias[i]² − ‖2.weight[:, i]‖²",
        "for i in 0..63: ‖2.weight[i, :]‖² + 2.bias[i]² − ‖4.weight[:, i]‖²",
    ]


def test_a_part_too_large_whose_units_do_not_rescale_is_refused_at_once_and_searched_in_windows() -> None:
    """With GELU no unit rescales: the whole (D = 8,450) and its first window (8,320) are refused before any count,
    naming D and what came of the rescalings tried first; the last window too (4,290); nothing hangs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 2))  # float32
    start = time.perf_counter()
    own = own_laws(model, input_shape=(64,))
    assert time.perf_counter() - start < 10
    outcomes = {part.path: part.outcome for part in own.parts}
    assert list(outcomes) == ["", "0-2", "2-4"] and not own.laws
    assert outcomes[""].startswith("not searched: D = 8,450 parameters, over the 3,072 a monitor searches")
    assert outcomes[""].endswith(
        "; tried first: 0 laws of rescaled units checked, 2 proposed patterns failed their check (a unit or block the "
        "layers between do not keep)"
    )
    assert outcomes["0-2"].startswith("not searched: D = 8,320 parameters")
    assert outcomes["2-4"].startswith("not searched: D = 4,290 parameters")


class _Outside(nn.Module):
    """A SwiGLU block, then an MLP part that something outside it also reads (``how``)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.block, self.how = SwiGLU(4, 2, 4), how
        self.mlp = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.block(x)
        if self.how == "layer called outside":
            return self.mlp(z) + self.mlp[0](z)[..., :4]
        if self.how == "weight read outside":
            return nn.functional.linear(self.mlp(z), self.mlp[2].weight.T)
        return self.mlp(z)


@pytest.mark.parametrize("how", ["layer called outside", "weight read outside", "alone"])
def test_laws_the_whole_model_does_not_keep_are_not_watched(how: str) -> None:
    """The part alone has its 5 unit laws; a layer of it called again outside, or its weight read by the parent's
    forward, breaks them in the model: the check on the whole model's gradient leaves them out and says why."""
    torch.manual_seed(0)
    (part,) = own_laws(_Outside(how).double(), input_shape=(4,)).parts
    assert part.path == "mlp" and "N = 5: the list is complete" in part.outcome
    if how == "alone":
        assert len(part.laws) == 1 and "none watched" not in part.outcome
    else:
        assert not part.laws and "none watched: the whole model does not keep them" in part.outcome


class _TwoOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 6, bias=False), nn.Linear(6, 3, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.a(x))
        return self.b(hidden), hidden


def test_a_model_with_two_outputs_keeps_the_laws_of_both() -> None:
    """A loss may read the hidden layer it returns too: that fixes every unit's scale, so no law is left."""
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="(?s)no conservation law to watch.*N = 0: none exist"):
        Monitor(_TwoOutputs().double(), input_shape=(4,))


def test_what_the_model_takes_is_checked_with_a_clear_message() -> None:
    model = mlp(bias=False)
    assert own_laws(model, input_shape=4).parts[0].laws  # an int is one input's shape, as torch.Size(4) would be
    with pytest.raises(ValueError, match="not both"):
        own_laws(model, input_shape=(4,), inputs=torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="first dimension of inputs= counts the inputs"):
        own_laws(model, inputs=torch.randn(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="no parameters to train"):
        Monitor(nn.ReLU(), input_shape=(4,))
    with pytest.raises(ValueError, match="meta device"):
        Monitor(nn.Linear(2, 2, device="meta"), input_shape=(2,))


def test_a_frozen_layer_is_not_searched_nor_counted_in_the_part() -> None:
    """W₁ frozen: only b₁, W₂, b₂ train (27 parameters), and no rescaling of a unit is left to conserve anything."""
    model = mlp(bias=True)
    model[0].weight.requires_grad_(False)
    (part,) = own_laws(model, input_shape=(4,)).parts
    assert part.num_params == 6 + 18 + 3 and part.outcome == "no laws (N = 0: none exist)"


class _NoForward(nn.Module):
    """A LightningModule's usual shape, without Lightning: children, no forward (its training step calls them)."""

    def __init__(self, *children: tuple[str, nn.Module]) -> None:
        super().__init__()
        for name, child in children:
            self.add_module(name, child)


def test_a_module_without_forward_gets_the_laws_of_its_children_that_take_the_input() -> None:
    """The encoder takes (4,): its 6 unit laws, named as in the module; the decoder takes the encoder's output: listed,
    not searched; the loss module, without parameters, is not a part."""
    holder = _NoForward(("encoder", mlp(bias=False)), ("decoder", nn.Linear(3, 4).double()), ("loss", nn.MSELoss()))
    own = own_laws(holder, input_shape=(4,))
    assert own.note.startswith("`_NoForward` has no forward of its own: searched its child `encoder`, which takes")
    assert str(own).startswith(own.note + "\n")
    encoder, decoder = own.parts
    assert encoder.path == "encoder" and encoder.outcome.startswith("6 quadratic laws found")
    assert all(key.startswith("encoder:") for key in encoder.laws)
    assert decoder.path == "decoder" and decoder.outcome.startswith("not searched: it fails on inputs of shape (4,)")
    params = {name: p.detach() for name, p in holder.named_parameters()}
    assert all(torch.isfinite(law(params)).all() for law in encoder.laws.values())  # they read the holder's θ by name


def test_a_module_without_forward_none_of_whose_children_takes_the_input_is_a_clear_error() -> None:
    holder = _NoForward(("model", mlp(bias=False)))
    with pytest.raises(ValueError, match=r"`_NoForward` has no forward of its own, and no child of it takes inputs of "
                                         r"shape \(5,\).*`model`: it fails on inputs of shape \(5,\)"):  # fmt: skip
        own_laws(holder, input_shape=(5,))


def test_a_monitor_on_a_module_without_forward_with_a_registered_block_and_an_input_shape() -> None:
    """The reads outside the SwiGLU are looked for in the child that takes the input, not in the holder's call."""
    torch.manual_seed(0)
    holder = _NoForward(("model", nn.Sequential(SwiGLU(4, 3, 4), nn.Linear(4, 3, bias=False), nn.ReLU(),
                                                nn.Linear(3, 2, bias=False)).double()))  # fmt: skip
    monitor = Monitor(holder, input_shape=(4,))
    assert {"swiglu", "found"} <= {g.key for g in monitor.groups}
    assert monitor.own.note and [part.path for part in monitor.own.parts] == ["model.1-3"]


def test_a_part_beside_a_registered_block_says_their_common_laws_are_not_searched():
    # one part (the Linear after the SwiGLU block): the report names what it leaves out, as it does for two parts
    torch.manual_seed(0)
    model = nn.Sequential(SwiGLU(3, 2, 3), nn.Linear(3, 2)).double()
    own = own_laws(model, input_shape=(3,))
    assert len(own.parts) == 1
    assert "(each part alone: laws that couple two parts, or a part and a block, are not searched)" in str(own)
    alone = str(own_laws(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double(), input_shape=(3,)))
    assert "each part alone" not in alone


def test_no_part_is_searched_after_the_seconds_given() -> None:
    """A model of many parts (a tiny GPT-2 took over 380 s) still starts its monitor: the parts left are listed."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    spent = own_laws(model, input_shape=(3,), seconds=0.0)
    assert [part.outcome for part in spent.parts] == [SPENT] and not spent.laws
    (part,) = own_laws(model, input_shape=(3,)).parts  # the seconds by default: its 4 unit laws
    assert part.outcome.startswith("4 quadratic laws found; N = 4")


@pytest.mark.slow
def test_a_forward_that_calls_f_dropout_itself_is_searched_with_it_off() -> None:
    """``F.dropout(h, 0.2, self.training)`` in the forward: the count saw another output at each call and every
    layer was searched alone (no laws); with those calls off, then checked under their masks, the 6 unit laws."""

    class FunctionalDropout(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(nn.functional.dropout(torch.relu(self.a(x)), p=0.2, training=self.training))

    torch.manual_seed(0)
    (part,) = Monitor(FunctionalDropout().double(), input_shape=(4,)).own.parts
    assert "N = 6: the list is complete; found with its dropouts off, and each holds under their masks" in part.outcome


class DropoutThenNorm(nn.Module):
    """A layer, a dropout, a LayerNorm without gains, a head; the dropout a module or ``F.dropout`` in the forward."""

    def __init__(self, functional: bool) -> None:
        super().__init__()
        self.a, self.head, self.functional = nn.Linear(3, 4), nn.Linear(4, 2), functional
        self.drop = nn.Identity() if functional else nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.dropout(self.a(x), 0.3, self.training) if self.functional else self.drop(self.a(x))
        return self.head(nn.functional.layer_norm(h, (4,)))


@pytest.mark.slow
@pytest.mark.parametrize("functional", [False, True])
def test_laws_given_are_watched_in_train_mode_where_they_hold_under_the_masks(functional: bool, capsys) -> None:
    """``Monitor(model, laws=find_laws(model.eval(), ...).laws)`` on a model that trains with dropout: it refused
    them all, though the head's row sums hold under every mask (the LayerNorm's output sums to 0, masked or not);
    the shifts of ``a`` (c·1 becomes c·m) do not. Given inputs, each law is checked under the masks: 1 of 3 kept,
    and its drift falls as τ², not τ. Without inputs a Dropout module is refused, naming the way out."""
    torch.manual_seed(0)
    model = DropoutThenNorm(functional).double()
    found = find_laws(model.eval(), (3,))
    assert found.complete and len(found.laws) == 3
    model.train()
    if not functional:
        with pytest.raises(ValueError, match=r"`drop` \(Dropout, p=0.3\) is in train mode.*give input_shape="):
            Monitor(model, laws=found.laws)
    monitor = Monitor(model, laws=found.laws, input_shape=(3,))
    left_out = re.findall(r"law `(.*)` of laws= is left out: it fails under the masks", capsys.readouterr().out)
    assert len(left_out) == 2
    start = {key: law(dict(model.named_parameters())).detach().clone() for key, law in found.laws.items()}
    x, y = torch.randn(32, 3, dtype=torch.float64), torch.randn(32, 2, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    monitor.attach(opt)
    for _ in range(20):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    theta = {n: p.detach() for n, p in model.named_parameters()}
    moved = {key: float((law(theta) - start[key]).norm()) for key, law in found.laws.items()}
    assert monitor.last_epsilon()["found"] < 1e-12  # the head's row sums: linear, kept exactly by every masked step
    assert all(moved[key] > 1e-3 for key in left_out), moved  # the shifts left out: they move at first order


def test_a_bfloat16_model_is_searched_as_its_float64_function_and_told_of_its_rounding(capsys) -> None:
    """A model trained in bfloat16: the search refused each part ("call model.double()"), and the monitor had no law
    to watch. Its float64 copy is searched: the 5 unit laws of the exact function, and the monitor says that each
    bfloat16 step rounds θ, which ε then shows."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).bfloat16()
    monitor = Monitor(model, input_shape=(4,))
    out = capsys.readouterr().out
    assert "parameters are bfloat16: each step rounds θ to it" in out
    assert "5 quadratic laws found; N = 5: the list is complete" in out and model[0].weight.dtype == torch.bfloat16
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor.attach(opt)
    x, y = torch.randn(16, 4).bfloat16(), torch.randn(16, 3).bfloat16()
    for _ in range(5):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    assert 0 < monitor.epsilon("found")[-1] < 0.1


def test_laws_given_with_inputs_the_model_fails_on_are_refused_naming_them() -> None:
    """laws= with input_shape= on a model that reads token ids: the forward that looks for F.dropout failed with
    torch's dtype error; it names the inputs and the way out."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 2)).double()
    laws = {"unit": lambda p: (p["2.weight"] ** 2).sum(1) + p["2.bias"] ** 2 - (p["4.weight"] ** 2).sum(0)}
    assert [g.key for g in Monitor(model, laws=laws, inputs=torch.randint(0, 10, (4, 2))).groups] == ["found"]
    with pytest.raises(ValueError, match=r"fails on inputs like those given .*token ids: give inputs="):
        Monitor(model, laws=laws, input_shape=(2,))


def test_a_layer_scale_initialised_at_1e_6_gets_its_laws_found_in_seconds() -> None:
    """CaiT's LayerScale γ = 10⁻⁶: the search at the model's own scale found none in 130 s ("none watched")."""

    class LayerScaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 6), nn.Linear(6, 4, bias=False)
            self.gamma = nn.Parameter(torch.full((4,), 1e-6))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.gamma * self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(0)
    monitor = Monitor(LayerScaled().double(), input_shape=(4,), search_seconds=30)
    (part,) = monitor.own.parts
    assert part.outcome == "10 quadratic laws found; N = 10: the list is complete", part.outcome
    assert monitor.own.seconds < 30


def test_token_ids_described_by_an_input_shape_are_told_to_come_with_inputs() -> None:
    model = nn.Sequential(nn.Embedding(16, 4), nn.Flatten(), nn.Linear(12, 16)).double()
    with pytest.raises(ValueError, match="fails on inputs of shape \\(3,\\).*its nn.Embedding reads token ids: give"):
        Monitor(model, input_shape=(3,))
