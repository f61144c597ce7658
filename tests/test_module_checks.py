"""Forwards the counter refuses: lower precision, randomness, train mode, batch coupling, no derivative."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from conslaw_lite import check_laws, count_laws
from conslaw_lite.counting import RESIDUAL_TOL
from conslaw_lite.counting.embedding_rows import UnreadRows
from conslaw_lite.counting.exact_ops import embedding_bag
from conslaw_lite.counting.layer_kinds import mode_dependent_layers
from conslaw_lite.counting.module_checks import check_countable, check_dtypes
from conslaw_lite.families.ffn.block import SwiGLU
from conslaw_lite.find_laws import find_laws
from conslaw_lite.fuzz import Pointwise
from conslaw_lite.laws import laws_of
from conslaw_lite.monitor import Monitor

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

HIDDEN = 3  # a bias-free ReLU net 3 → HIDDEN → 2 has one law per hidden unit


class ReLUNet(nn.Module):
    """``W2 mid(relu(W1 x))``, ``mid`` an optional layer on the hidden units."""

    def __init__(self, mid: nn.Module | None = None) -> None:
        super().__init__()
        self.W1 = nn.Linear(3, HIDDEN, bias=False)
        self.mid = mid if mid is not None else nn.Identity()
        self.W2 = nn.Linear(HIDDEN, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W2(self.mid(torch.relu(self.W1(x))))


class CastNet(ReLUNet):
    """The issue's net: the hidden units rounded to a lower precision and back, in the model's own forward."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W2(torch.relu(self.W1(x)).to(self.dtype).to(x.dtype))


class Float32Softmax(nn.Module):
    """A mixed-precision softmax, as library attention kernels write it."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.softmax(h.float(), dim=-1).to(h.dtype)


class Rounded(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.round(h)


class TrainScaled(nn.Module):
    """Reads ``self.training``: doubles its input in train mode."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return 2 * h if self.training else h


class Noise(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + 0.1 * torch.randn_like(h)


class NoisyInput(ReLUNet):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x + 0.1 * torch.randn_like(x))


def relu_count(model: nn.Module) -> int:
    count = count_laws(model, (3,))
    assert count.conclusive, count.reason
    return count.num_laws


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_cast_to_lower_precision_in_forward_is_refused(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(ValueError, match=rf"^the model \(CastNet\) computes in {name} .*cast up, not down"):
        count_laws(CastNet(dtype).double(), (3,))


def test_the_downcast_is_named_by_its_layer_and_a_float32_constant_is_not_one() -> None:
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"^`mid` \(Float32Softmax\) computes in float32 \(aten\._to_copy"):
        count_laws(ReLUNet(Float32Softmax()), (3,))

    class Shifted(nn.Module):  # adds a float32 constant: the sum is float64, no data rounded
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return h * torch.full_like(h, 1.5, dtype=torch.float32)

    torch.manual_seed(0)
    assert relu_count(ReLUNet(Shifted())) == relu_count(ReLUNet())

    class Table(nn.Module):  # a float64 buffer rounded to float32, as transformers' rotary tables are: no θ in it
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.tensor([1.5, 0.5, 2.0]))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return h * self.scale.float()

    net = ReLUNet(Table()).double()
    assert net.mid.scale.dtype == torch.float64  # the counter rounds a float64 buffer
    torch.manual_seed(0)
    assert relu_count(net) == relu_count(ReLUNet())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_parameters_are_refused(dtype: torch.dtype) -> None:
    name = str(dtype).removeprefix("torch.")
    message = rf"^parameter 'W1.weight' of `W1` \(Linear\) is {name}: .*call model.double\(\)"
    with pytest.raises(ValueError, match=message):
        count_laws(ReLUNet().to(dtype), (3,))
    with pytest.raises(ValueError, match=rf"^parameter 'B' is {name}"):
        check_dtypes({"B": torch.ones(2, 3, dtype=dtype)})


def test_a_plain_mlp_in_its_default_train_mode_is_counted_as_before() -> None:
    torch.manual_seed(0)
    model = ReLUNet()
    assert model.training and not mode_dependent_layers(model)
    assert relu_count(model) == HIDDEN == relu_count(model.eval())


def test_dropout_in_train_mode_is_refused_and_counted_in_eval_mode() -> None:
    torch.manual_seed(0)
    model = ReLUNet(nn.Dropout(0.1))
    message = r"^`mid` \(Dropout, p=0.1\) is random in train mode: call model.eval\(\) to count the deterministic"
    with pytest.raises(ValueError, match=message):
        count_laws(model, (3,))
    with pytest.raises(ValueError, match=message):  # find_laws and check_laws count through count_laws
        find_laws(model, (3,))
    assert relu_count(model.eval()) == relu_count(ReLUNet())
    assert relu_count(ReLUNet(nn.Dropout(0.0))) == relu_count(ReLUNet())  # p = 0: deterministic in train mode


def test_batch_norm_in_train_mode_is_refused_and_counted_in_eval_mode() -> None:
    torch.manual_seed(0)
    model = ReLUNet(nn.BatchNorm1d(HIDDEN))
    message = r"^`mid` \(BatchNorm1d\) normalizes with batch statistics in train mode: .*call model.eval\(\)"
    with pytest.raises(ValueError, match=message):
        count_laws(model, (3,))
    with pytest.raises(ValueError, match=message):
        check_laws(model, {"W1": lambda p: p["W1.weight"].sum()}, (3,))
    eval_count = count_laws(model.eval(), (3,))
    assert eval_count.conclusive and eval_count.num_laws is not None
    stateless = ReLUNet(nn.BatchNorm1d(HIDDEN, track_running_stats=False)).eval()  # batch statistics in eval too
    with pytest.raises(ValueError, match=r"^`mid` \(BatchNorm1d\) normalizes with batch statistics in eval mode too"):
        count_laws(stateless, (3,))


def test_a_module_reading_self_training_or_drawing_noise_is_refused() -> None:
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"^`mid` \(TrainScaled\) computes another function in train mode"):
        count_laws(ReLUNet(TrainScaled()), (3,))
    assert relu_count(ReLUNet(TrainScaled()).eval()) == relu_count(ReLUNet())
    with pytest.raises(ValueError, match=r"^`mid` \(Noise\) gives another output on a second call"):
        count_laws(ReLUNet(Noise()).eval(), (3,))
    # noise drawn in the model's own forward, before a layer: the model is named, not the layer that reads it
    with pytest.raises(ValueError, match=r"^the model \(NoisyInput\) gives another output on a second call"):
        count_laws(NoisyInput().eval(), (3,))


def test_a_rounding_op_is_named() -> None:
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"^`1` \(Rounded\) applies round, whose derivative is zero"):
        count_laws(nn.Sequential(nn.Linear(3, 2), Rounded()).double(), (3,))


def test_a_cast_of_theta_to_integers_is_refused_at_random_theta_and_counted_near_the_models() -> None:
    """torch's Householder map multiplies Q by X.diagonal().int(): at random θ the columns with |X_ii| < 1 vanish, and
    a ReLU MLP behind it with biases (gradient flowing) counted N = 20, conclusive, where its own θ has at most 10."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    nn.utils.parametrizations.orthogonal(model[0], orthogonal_map="householder")
    with pytest.raises(ValueError, match=r"^`0` \(ParametrizedLinear\) casts a value computed from θ to int32.*at="):
        count_laws(model, (4,))
    near = count_laws(model, (4,), at=dict(model.named_parameters()))
    assert near.num_laws is None or near.num_laws <= 10, near


class AboveOne(nn.Module):
    """``(z > 1)·z`` after each of three bias-free layers: at nn.Linear's scale it is 0 on nearly every input, but
    it passes gradients wherever a unit is above 1, and it keeps each unit's ‖w_in‖² − ‖w_out‖² (6 laws)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(2, 2, bias=False) for _ in range(3))
        self.out = nn.Linear(2, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            z = layer(x)
            x = (z > 1).to(z.dtype) * z
        return self.out(x)


def test_a_comparison_that_passes_gradients_only_at_other_scales_is_counted() -> None:
    """Drawn at the model's scale alone, every θ of the check gave a zero gradient, and the count was refused:
    "applies gt, whose derivative is zero where it exists"."""
    for seed in range(3):
        torch.manual_seed(0)
        count = count_laws(AboveOne().double(), (2,), seed=seed)
        assert count.conclusive and count.num_laws == 6, count


def test_a_function_model_with_float32_params_is_counted_and_one_that_casts_is_not() -> None:
    net = lambda p, x: torch.relu(x @ p["W1"].T) @ p["W2"].T  # noqa: E731
    shapes = {"W1": (HIDDEN, 3), "W2": (2, HIDDEN)}
    single = {n: torch.ones(s) for n, s in shapes.items()}
    double = {n: torch.ones(s, dtype=torch.float64) for n, s in shapes.items()}
    assert count_laws(net, (3,), params=single).num_laws == count_laws(net, (3,), params=double).num_laws == HIDDEN
    cast = lambda p, x: net({n: v.float() for n, v in p.items()}, x.float()).double()  # noqa: E731
    with pytest.raises(ValueError, match=r"^the model function computes in float32"):
        count_laws(cast, (3,), params=double)


def test_the_check_leaves_random_state_modes_and_statistics_as_they_were() -> None:
    torch.manual_seed(0)
    model = ReLUNet(nn.BatchNorm1d(HIDDEN)).double()
    model.mid.eval()  # the rest in train mode: a mixed state, kept as it was
    stats = model.mid.running_mean.clone()
    apply = lambda p, x: functional_call(model, p, (x,))  # noqa: E731
    x = torch.randn(6, 3, dtype=torch.float64)
    state = torch.random.get_rng_state()
    check_countable(apply, dict(model.named_parameters()), x, model)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert model.training and not model.mid.training and torch.equal(model.mid.running_mean, stats)


# ---------------------------------------------------------------- the monitor agrees with the count


def sgd_drift(model: nn.Module, lr: float, steps: int, laws=None) -> dict[str, float]:
    """ε at the end of minibatch SGD on a random regression, in the model's own mode."""
    torch.manual_seed(1)
    monitor = Monitor(model, laws=laws)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    monitor.attach(opt)
    X, Y = torch.randn(256, 4, dtype=torch.float64), torch.randn(256, 3, dtype=torch.float64)
    for _ in range(steps):
        batch = torch.randint(0, 256, (32,))
        opt.zero_grad()
        ((model(X[batch]) - Y[batch]) ** 2).mean().backward()
        opt.step()
    return {group.key: float(monitor.epsilon(group.key)[-1]) for group in monitor.groups}


def test_a_train_mode_batch_norm_beside_a_block_keeps_its_laws() -> None:
    """The SwiGLU's laws are a symmetry of its own parameters: a law drifts O(τ) at fixed τk, a control does not."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), SwiGLU(6, 5, 3)).double()
    start = {n: p.detach().clone() for n, p in model.state_dict().items()}
    coarse = sgd_drift(model, 0.05, 200)
    model.load_state_dict(start)
    fine = sgd_drift(model, 0.0125, 800)
    assert coarse["swiglu"] / fine["swiglu"] > 2.5  # τ → τ/4: the law's drift falls with τ
    assert fine["swiglu:control"] > 10 * fine["swiglu"]


def test_the_monitor_refuses_a_train_mode_dropout_inside_a_linear_block(timm) -> None:
    from timm.layers import Mlp

    torch.manual_seed(0)
    model = Mlp(4, 5, 3, act_layer=nn.Identity, drop=0.3).double()
    with pytest.raises(ValueError, match=r"^Monitor: `drop1` \(Dropout, p=0.3\) is in train mode.*linear block"):
        Monitor(model)
    monitor = Monitor(model.eval())
    model.train()  # switched after the start: a warning at the next record
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor.step()
    assert any("`drop1` (Dropout, p=0.3) is in train mode" in str(w.message) for w in caught)


def test_the_monitor_refuses_laws_found_in_eval_mode_for_a_train_mode_batch_norm() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5, bias=False), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3, bias=False))
    found = find_laws(model.double().eval(), (4,))
    assert found.complete
    eval_drift = sgd_drift(model, 0.05, 200, laws=found.laws)["found"]
    with pytest.raises(ValueError, match=r"^Monitor: `1` \(BatchNorm1d\) is in train mode.*eval-mode function"):
        Monitor(model.train(), laws=found.laws)
    assert eval_drift < 0.05  # trained in eval mode, the found laws are what it keeps


def test_complex_parameters_are_refused() -> None:
    """They were cast to real (torch's warning only) and counted on 12 of their 24 real coordinates."""
    with pytest.raises(ValueError, match="parameter 'W' is complex"):
        count_laws(lambda p, x: (x.to(p["W"].dtype) @ p["W"].T).abs(), (3,), params={"W": torch.ones(4, 3) * 1j})


def test_an_embedding_with_max_norm_is_refused_with_its_option() -> None:
    net = nn.Sequential(nn.Embedding(6, 3, max_norm=1.0), nn.Linear(3, 4)).double()
    with pytest.raises(ValueError, match=r"`0` \(Embedding\) renormalizes the rows it reads in place .*max_norm=1\)"):
        count_laws(net, inputs=torch.arange(24).reshape(6, 4) % 6)


@pytest.mark.parametrize("kind", [nn.Embedding, nn.EmbeddingBag])
def test_an_embedding_that_scales_its_gradient_is_refused_with_its_option(kind: type[nn.Module]) -> None:
    net = nn.Sequential(kind(6, 3, scale_grad_by_freq=True), nn.Linear(3, 4)).double()
    with pytest.raises(ValueError, match=rf"`0` \({kind.__name__}\) divides each row's gradient .*scale_grad_by_freq"):
        count_laws(net, inputs=torch.arange(24).reshape(6, 4) % 6)


def test_token_ids_that_leave_embedding_rows_unread_are_warned_of() -> None:
    """Each entry of a row never read gets no gradient: a law of training on such data, named as such."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(6, 3), nn.Linear(3, 4, bias=False)).double()
    with pytest.warns(UserWarning, match="reads rows 0..3 of 6 on the given inputs: rows 4, 5 get no gradient"):
        count = count_laws(net, inputs=torch.randint(0, 4, (64, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = count_laws(net, inputs=torch.arange(64).reshape(16, 4) % 6)
    assert count.num_laws == full.num_laws + 2 * 3


def test_rows_a_tied_output_layer_reads_are_not_warned_of() -> None:
    """Logits through the table's transpose read every row: tokens 0..3 of 6 were warned to leave rows 4, 5
    without gradient, which they have."""

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.E, self.M = nn.Embedding(6, 3), nn.Linear(3, 3, bias=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.M(self.E(tokens))) @ self.E.weight.T

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreadRows)
        count_laws(Tied().double(), inputs=torch.tensor([[0, 1], [2, 3], [1, 2], [3, 0]]))


def test_an_embeddings_padding_row_is_held_constant_and_its_entries_are_laws() -> None:
    """torch's backward gives row padding_idx no gradient while its forward-mode derivative moves it: two ways of
    taking D²f disagreed, and every count of a model with a padding row was inconclusive."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(6, 3, padding_idx=0), nn.Linear(3, 4, bias=False)).double()
    ids = torch.arange(64).reshape(16, 4) % 6  # every id, the padding row's too
    with pytest.warns(UnreadRows, match=r"`0` \(Embedding\) gets no gradient on its padding row 0 .*3 entries"):
        count = count_laws(net, inputs=ids)
    assert count.conclusive and count.num_laws >= 3
    with pytest.warns(UnreadRows):
        pad = check_laws(net, {"pad": lambda p: p["0.weight"][0]}, inputs=ids)
    assert pad.max_residual <= RESIDUAL_TOL and pad.independent == 3


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_the_embedding_bag_stand_in_is_torchs(mode: str, padding_idx: int | None) -> None:
    """torch's fused embedding_bag has no forward-mode derivative: nn.EmbeddingBag could not be counted."""
    torch.manual_seed(0)
    w, ids = torch.randn(6, 3, dtype=torch.float64), torch.randint(0, 6, (5, 4))
    flat, offsets = torch.randint(0, 6, (9,)), torch.tensor([0, 2, 2, 7])  # bags of 2, 0, 5 and 2 ids
    assert torch.allclose(embedding_bag(ids, w, mode=mode, padding_idx=padding_idx),
                          F.embedding_bag(ids, w, mode=mode, padding_idx=padding_idx))  # fmt: skip
    assert torch.allclose(embedding_bag(flat, w, offsets, mode=mode, padding_idx=padding_idx),
                          F.embedding_bag(flat, w, offsets, mode=mode, padding_idx=padding_idx))  # fmt: skip


def test_an_embedding_bag_model_is_counted_and_its_padding_row_named() -> None:
    """The mean of a bag's rows read by a linear layer: a linear junction, EᵀE − WᵀW (d(d+1)/2 = 10 laws)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.EmbeddingBag(10, 4, mode="mean"), nn.Linear(4, 2)).double()
    ids = torch.randint(0, 10, (64, 5))
    count = count_laws(net, inputs=ids)
    assert count.conclusive and count.num_laws == 10
    padded = nn.Sequential(nn.EmbeddingBag(10, 4, mode="sum", padding_idx=0), nn.Linear(4, 2)).double()
    with pytest.warns(UnreadRows, match=r"`0` \(EmbeddingBag\) gets no gradient on its padding row 0"):
        assert count_laws(padded, inputs=ids).num_laws == 10 + 4


class ClampsItsWeight(nn.Module):
    """Weight clipping written into forward (``with torch.no_grad(): weight.clamp_(...)``, or WGAN's ``.data``)."""

    def __init__(self, through_data: bool) -> None:
        super().__init__()
        self.l1, self.l2, self.through_data = nn.Linear(3, 4), nn.Linear(4, 2), through_data

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.through_data:
            self.l1.weight.data[0].clamp_(-0.1, 0.1)
        else:
            with torch.no_grad():
                self.l1.weight.clamp_(-1.0, 1.0)
        return self.l2(torch.relu(self.l1(x)))


@pytest.mark.parametrize("through_data", [False, True], ids=["no_grad", "data row"])
def test_a_forward_writing_into_a_parameter_is_refused_with_its_name(through_data: bool) -> None:
    """It ended in torch's traceback (a view modified in place), the CLI's exit 3. The line of forward is named."""
    with pytest.raises(ValueError, match=r"writes into parameter 'l1.weight' in forward \(aten.clamp_, at .*"
                       r"test_module_checks.py:\d+\)"):  # fmt: skip
        count_laws(ClampsItsWeight(through_data).double(), (3,))


class CastsItsLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1.to(torch.float32)(x.float())))


def test_a_layer_cast_inside_forward_is_told_that_the_counter_runs_in_float64() -> None:
    """The message was torch's alone: 'mat1 and mat2 must have the same dtype, but got Float and Double'."""
    with pytest.raises(ValueError, match="same dtype.*the counter runs the model in float64.*cannot be counted"):
        count_laws(CastsItsLayer().double(), (3,))


def test_the_unread_rows_warning_points_at_the_callers_line() -> None:
    """Not at a line of conslaw_lite: the warning's location is the user's call of count_laws."""
    net = nn.Sequential(nn.Embedding(6, 3), nn.Linear(3, 4, bias=False)).double()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        count_laws(net, inputs=torch.arange(64).reshape(16, 4) % 4)
    (unread,) = [w for w in caught if issubclass(w.category, UnreadRows)]
    assert (unread.filename, unread.lineno) == (__file__, line)


class PythonBranch(nn.Module):
    """``if c.item() > 0``: a·b·c·x (N = 2) or a polynomial with no law, as the random θ decides."""

    def __init__(self, read) -> None:
        super().__init__()
        self.read = read
        self.a, self.b, self.c = (nn.Parameter(torch.randn(1, dtype=torch.float64)) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.read(self.c) > 0:
            return self.a * self.b * self.c * x
        return self.a * x + self.b * x**2 + self.c * x**3


@pytest.mark.parametrize("read", [lambda c: c.item(), float, bool], ids=["item", "float", "bool"])
def test_a_value_of_the_parameters_read_into_python_is_refused(read) -> None:
    """The count was N = 0 at seed 0 and N = 2 at seed 5, both conclusive."""
    with pytest.raises(ValueError, match=r"reads a value computed from the parameters into Python \(Tensor\."):
        count_laws(PythonBranch(read), (1,))


def test_a_compiled_module_is_counted_and_watched_as_the_module_inside() -> None:
    """torch.compile's wrapper holds the same function and parameters: counted without compiling a graph per θ,
    and its laws named as the user wrote the model, not ``_orig_mod.``."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), SwiGLU(4, 6, 4), nn.Linear(4, 2))
    compiled = torch.compile(net)
    # 6 SwiGLU units, and each linear junction (4 wide) its balancedness matrix, 10 laws
    assert count_laws(compiled, (3,)).num_laws == count_laws(net, (3,)).num_laws == 6 + 10 + 10
    assert list(laws_of(compiled)) == list(laws_of(net)) == ["1:|A_{:,i}|^2-|C_{i,:}|^2"]
    assert [g.key for g in Monitor(compiled).groups] == ["swiglu", "swiglu:control"]


def test_a_torchscript_module_is_refused_naming_what_to_give() -> None:
    scripted = torch.jit.script(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)))
    for use in (lambda: count_laws(scripted, (3,)), lambda: Monitor(scripted)):
        with pytest.raises(ValueError, match=r"TorchScript module .*give the nn.Module it was made from"):
            use()


def test_infinite_higher_derivatives_are_named() -> None:
    """``relu(z) ** 1.5`` is C¹ only: its second derivative is infinite at the units a ReLU puts at 0. The count
    failed inside an SVD ("the input matrix contained non-finite values")."""
    torch.manual_seed(0)
    power = Pointwise("z ** 1.5", lambda z: z**1.5)
    model = nn.Sequential(nn.Linear(3, 3, bias=False), nn.ReLU(), power, nn.Linear(3, 2, bias=False))
    with pytest.raises(ValueError, match=r"second or third derivatives in θ are not finite"):
        count_laws(model.double(), (3,))


class CountsItsCalls(nn.Module):
    """A ReLU MLP that counts its calls in a buffer, as training loops often do: the buffer never reaches the output."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.l1, self.l2 = nn.Linear(4, 5), nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.l2(torch.relu(self.l1(x)))


def test_a_forward_that_writes_a_buffer_in_place_is_counted() -> None:
    """``self.calls += 1``: torch.func refused the write into a tensor captured from outside its transforms, and
    count_laws, find_laws and the monitor raised its RuntimeError (the CLI: exit 3, a traceback). Each call now writes
    its own copy of the buffers: the 5 unit laws, and the model's own counter is untouched by the count."""
    torch.manual_seed(0)
    model = CountsItsCalls().double()
    count = count_laws(model, (4,))
    assert count.conclusive and count.num_laws == 5
    assert int(model.calls) == 0
    assert check_laws(model, find_laws(model, (4,), count=count).laws, (4,)).complete
