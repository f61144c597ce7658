"""The conservation monitor on the package's blocks, a timm ViT (SwiGLU MLP) and torch's nn.MultiheadAttention."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from conslaw_lite.drift import arch_setup, trajectory
from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.laws import find_blocks, groups, parameters_of
from conslaw_lite.monitor import Diverged, Monitor, laws_against_controls, relative_drift, train_watched

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_vit() -> nn.Module:
    """A two-block ViT with timm's SwiGLU MLP (gate SiLU), float64, seeded."""
    from timm.layers import SwiGLU
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(
        img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=8, depth=2, num_heads=2,
        mlp_ratio=2.0, mlp_layer=SwiGLU, act_layer=nn.SiLU,
    ).double()


class SelfAttention(nn.Module):
    """torch's nn.MultiheadAttention used as self-attention, ``x ↦ MHA(x, x, x)``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, T, d) -> (batch, T, d)
        return self.attn(x, x, x, need_weights=False)[0]


def monitored_sgd(make: Callable[[], nn.Module], x: torch.Tensor, lr: float, steps: int) -> Monitor:
    """``steps`` steps of torch.optim.SGD on a random regression, the monitor attached as a hook."""
    model = make()
    monitor = Monitor(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    monitor.attach(opt)
    y = torch.randn(model(x).shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for _ in range(steps):
        opt.zero_grad()
        (0.5 * ((model(x) - y) ** 2).sum() / len(x)).backward()
        opt.step()
    return monitor


def assert_second_order(make: Callable[[], nn.Module], x: torch.Tensor, lr: float) -> list[str]:
    """Halving τ divides each law's ε by 4 (Δh = τ²gᵀMg) but each control's only by 2 (first order)."""
    big, small = monitored_sgd(make, x, lr, 3), monitored_sgd(make, x, lr / 2, 3)
    assert big.groups == small.groups
    for group in big.groups:
        ratio = big.epsilon(group.key)[-1] / small.epsilon(group.key)[-1]
        expected = 2.0 if group.kind == "control" else 4.0
        assert abs(ratio - expected) < 0.15 * expected, (group.key, ratio)
    conserved = [g.key for g in big.groups if g.kind == "law"]
    controls = {g.block: g.key for g in big.groups if g.kind == "control"}
    # Each law against its own look-alike: a LayerNorm gain's γ² moves less in 3 steps than a SwiGLU law.
    paired = [(g.key, controls[g.block]) for g in big.groups if g.kind == "law" and g.block in controls]
    assert paired and all(big.epsilon(law)[-1] < 0.05 * big.epsilon(control)[-1] for law, control in paired)
    return conserved

@pytest.mark.usefixtures("timm")
def test_monitor_on_a_timm_vit_with_swiglu_mlp() -> None:
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    kinds = assert_second_order(tiny_vit, x, 1e-3)
    assert "swiglu" in kinds and len(kinds) >= 2  # the MLPs and the attention blocks


def test_monitor_on_torch_multihead_attention() -> None:
    x = torch.randn(4, 5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    kinds = assert_second_order(SelfAttention, x, 1e-3)
    assert len(kinds) == 1


def test_monitor_agrees_with_the_recorded_training_run() -> None:
    """The monitor in a plain torch loop and flows.train (gd) give the same ε_block, step by step."""
    setup = arch_setup("swiglu", samples=16)
    t = trajectory(setup, 0, lr=0.05, steps=6)
    model, loss = setup(0)
    monitor = Monitor(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for k in range(6):
        opt.zero_grad()
        loss(model, k).backward()
        opt.step()
        monitor.step()
    for group in t.groups:
        np.testing.assert_allclose(monitor.epsilon(group.key), t.epsilon(group.key), rtol=1e-8, atol=1e-15)
    assert monitor.epsilon("swiglu")[-1] > 0


def test_every_n_steps_records_at_multiples_of_n() -> None:
    model, loss = arch_setup("swiglu", samples=8)(0)
    monitor = Monitor(model, every=3)
    assert [monitor.step() for _ in range(7)] == [False, False, True, False, False, True, False]
    assert monitor.steps.tolist() == [0, 3, 6]
    history = monitor.history()
    assert set(history) == {"step", *(g.key for g in monitor.groups)} and all(len(v) == 3 for v in history.values())


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="give input_shape=.* or inputs=.*laws="):
        Monitor(nn.Linear(2, 2))
    model, _ = arch_setup("swiglu")(0)
    with pytest.raises(ValueError, match="every"):
        Monitor(model, every=0)
    with pytest.raises(ValueError, match="swiglu"):
        Monitor(model).epsilon("attention")


def test_batched_heads_give_the_same_drift_as_law_by_law() -> None:
    """The monitor evaluates a block's heads in one batched call; each law's relative drift, in each
    group's order, is the one :func:`relative_drift` gives from the law functions called one by one."""
    torch.manual_seed(0)
    model = nn.Sequential(MultiHeadAttention(6, 3, 2, bias=True), MultiHeadAttention(6, 2, 2, pe="rope")).double()
    x, y = torch.randn(4, 5, 6, dtype=torch.float64), torch.randn(4, 5, 6, dtype=torch.float64)
    monitor = Monitor(model)
    grouped = groups(model)
    history = [{q.key: q.fn(parameters_of(model)) for qs in grouped.values() for q in qs}]
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        monitor.step()
        history.append({q.key: q.fn(parameters_of(model)) for qs in grouped.values() for q in qs})
    for group, qs in grouped.items():
        expected = np.stack([relative_drift(np.stack([h[q.key].numpy() for h in history])) for q in qs], axis=1)
        np.testing.assert_allclose(monitor.relative_drift(group.key), expected, rtol=1e-12, atol=1e-15)
    assert np.nanmax(monitor.relative_drift("mha:control")) > 1e-3  # the drift compared is not all zeros


def test_train_watched_takes_the_steps_of_a_hand_written_loop_and_times_training_and_monitor_apart() -> None:
    model, loss = arch_setup("swiglu", samples=8)(0)
    run = train_watched(model, Monitor(model), torch.optim.SGD(model.parameters(), lr=0.05), loss, steps=4)
    again, _ = arch_setup("swiglu", samples=8)(0)
    monitor, opt, losses = Monitor(again), torch.optim.SGD(again.parameters(), lr=0.05), []
    monitor.attach(opt)
    for k in range(4):
        opt.zero_grad()
        losses.append(loss(again, k))
        losses[-1].backward()
        opt.step()
    np.testing.assert_allclose(run.losses, [float(v.detach()) for v in losses], rtol=1e-12)
    np.testing.assert_allclose(run.monitor.epsilon("swiglu"), monitor.epsilon("swiglu"), rtol=1e-12)
    assert run.losses.shape == run.step_seconds.shape == run.monitor_seconds.shape == (4,)
    assert run.monitor.steps.tolist() == [0, 1, 2, 3, 4] and run.losses[-1] < run.losses[0]
    assert (run.step_seconds > 0).all() and (run.monitor_seconds > 0).all() and 0 < run.overhead < np.inf
    eps = laws_against_controls(run.monitor)
    assert list(eps) == ["swiglu"] and eps["swiglu"]["laws"] < 0.05 * eps["swiglu"]["controls"]
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        train_watched(model, run.monitor, opt, loss, steps=0)


class ReadAttention(nn.Module):
    """Self-attention whose ``out_proj.weight`` a layer outside it reads too: tied (``tie``) or read by the forward."""

    def __init__(self, tie: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attn, self.head, self.tie = nn.MultiheadAttention(8, 2, batch_first=True), nn.Linear(8, 2), tie
        if tie:
            self.extra = nn.Linear(8, 8, bias=False)  # named `extra`, as a Chain's own attribute was
            self.extra.weight = self.attn.out_proj.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.attn(x, x, x, need_weights=False)[0]
        mixed = self.extra(y) if self.tie else nn.functional.linear(y, self.attn.out_proj.weight.T)
        return self.head(torch.tanh(mixed)).mean(1)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "read by the forward"])
def test_a_block_whose_weight_is_read_outside_it_is_not_watched(tie: bool, capsys: pytest.CaptureFixture) -> None:
    """Its V/O laws drift at first order there (ε 0.24 against 0.17 for its controls): left out, and said so."""
    model = ReadAttention(tie).double()
    if tie:  # known from the names alone: left out wherever the registry's laws are asked for (laws_of too)
        with pytest.warns(UserWarning, match=r"at attn has a weight shared outside it \(`attn.out_proj.weight` is al"):
            assert not find_blocks(model)
        return
    with pytest.raises(ValueError, match="no conservation law to watch"):
        Monitor(model, input_shape=(5, 8))
    assert "the laws of `attn` (mha) are not watched: `attn.out_proj.weight` is read" in capsys.readouterr().out


def test_a_diverging_run_stops_at_the_step_its_laws_leave_the_finite_numbers() -> None:
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model, evaluate_every=1)
    with torch.no_grad():
        model.Q.weight.fill_(float("inf"))
    with pytest.raises(Exception, match="training diverged at step 1: the laws are NaN or infinite"):
        monitor.step()


def test_attach_warns_of_optimizers_that_break_the_laws_and_refuses_a_second_attach() -> None:
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model)
    with pytest.warns(UserWarning, match="weight_decay=0.1 shrinks θ"):
        monitor.attach(torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1))
    with pytest.warns(UserWarning, match="Adam does not step along −τ∇L as SGD does"):
        monitor.attach(torch.optim.Adam(model.parameters()))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    monitor.attach(sgd).remove()
    monitor.attach(sgd)  # removed first: attached once
    with pytest.raises(ValueError, match="already attached to this optimizer"):
        monitor.attach(sgd)


def test_param_groups_that_step_apart_are_warned_of_by_the_parameters_they_hold() -> None:
    """SGD with the attention's V at lr/10: VᵀV − OᵀO reads two groups, and drifts at first order (no warning was
    given); one lr for every parameter the laws read, whatever the groups, is gradient flow."""
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model)
    slow = [model.V.weight]
    rest = [p for p in model.parameters() if p is not model.V.weight]
    with pytest.warns(UserWarning, match=r"step with different settings \(lr=0.1: .*; lr=0.01: V.weight\)"):
        monitor.attach(torch.optim.SGD([{"params": rest}, {"params": slow, "lr": 0.01}], lr=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monitor.attach(torch.optim.SGD([{"params": rest}, {"params": slow, "momentum": 0.0}], lr=0.1))
    x = torch.randn(8, 3, 4, dtype=torch.float64)
    drift = []
    for lr in (0.02, 0.005):  # V at lr/10: first order, a 4 times smaller step moves the laws 4 times less
        torch.manual_seed(0)
        net = MultiHeadAttention(4, 2, 2).double()
        watched = Monitor(net)
        groups = [{"params": [p for p in net.parameters() if p is not net.V.weight]}, {"params": [net.V.weight]}]
        optimizer = torch.optim.SGD(groups, lr=lr)
        optimizer.param_groups[1]["lr"] = lr / 10
        for _ in range(30):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
            watched.step()
        drift.append(watched.last_epsilon()["mha"])
    assert drift[0] / drift[1] < 6, drift  # 16 for laws of the flow


def test_laws_given_are_evaluated_once_and_a_bad_one_is_named() -> None:
    model = nn.Linear(2, 1).double()
    with pytest.raises(ValueError, match="law 'x' reads a parameter the model does not have"):
        Monitor(model, laws={"x": lambda p: p["nope.weight"]})
    with pytest.raises(TypeError, match="law 'x' is a float"):
        Monitor(model, laws={"x": 1.0})
    with pytest.raises(ValueError, match="laws= is empty"):
        Monitor(model, laws={})


def test_a_parameter_replaced_after_the_start_is_named_not_read_stale() -> None:
    # load_state_dict(assign=True) puts new Parameters in the model: the monitor's records would read the old ones
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model, evaluate_every=1)
    monitor.step()
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    with pytest.raises(ValueError, match="'K.weight', 'O.weight', 'Q.weight' and 1 more of the model are no longer"):
        monitor.step()


def test_a_submodule_replaced_or_a_parameter_deleted_after_the_start_is_named() -> None:
    # the old Linear still holds its old weight: only the model's own link to it changed
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model, evaluate_every=1)
    model.O = nn.Linear(4, 4, bias=False).double()
    with pytest.raises(ValueError, match="'O.weight' of the model is no longer the parameter"):
        monitor.step()
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model, evaluate_every=1)
    del model.Q.weight
    with pytest.raises(ValueError, match="'Q.weight' of the model is no longer the parameter"):
        monitor.step()
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model, evaluate_every=1)
    model.V = nn.Sequential(model.V)  # wrapped: V.weight is now V.0.weight, the same tensor under another name
    with pytest.raises(ValueError, match="'V.weight' of the model is no longer .* renamed by a layer inserted or wrap"):
        monitor.step()


def test_laws_that_read_a_frozen_parameter_are_left_out(capsys: pytest.CaptureFixture) -> None:
    # V frozen, O trained: VᵀV − OᵀO moves at first order (a kept law drifted like its controls); Q, K still train
    model = MultiHeadAttention(4, 2, 2).double()
    model.V.weight.requires_grad_(False)
    monitor = Monitor(model)
    printed = capsys.readouterr().out
    assert "2 laws of group `mha` (8 values) not watched: they read frozen parameters (requires_grad=False:" in printed
    assert monitor.relative_drift("mha").shape[1] == 2  # the two heads' QᵀQ − KᵀK; of 4 laws with VᵀV − OᵀO
    assert Monitor(MultiHeadAttention(4, 2, 2).double()).relative_drift("mha").shape[1] == 4
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="every law reads a frozen parameter"):
        Monitor(model)


def test_an_optimizer_that_leaves_out_a_parameter_the_laws_read_is_warned_of() -> None:
    model = MultiHeadAttention(4, 2, 2).double()
    monitor = Monitor(model)
    partial = torch.optim.SGD([p for n, p in model.named_parameters() if n != "V.weight"], lr=0.1)
    monitor.attach(partial)  # another optimizer may be attached for V.weight: said at the first step
    model(torch.randn(2, 3, 4, dtype=torch.float64)).sum().backward()
    with pytest.warns(UserWarning, match="no optimizer attached updates V.weight, which the laws read"):
        partial.step()


def test_an_optimizer_inside_a_wrapper_is_judged_by_what_it_wraps() -> None:
    # accelerate's AcceleratedOptimizer (what a Trainer hands its callbacks) is an Optimizer holding the real one
    from conslaw_lite.watch_conditions import optimizer_breaks_laws

    class Wrapper(torch.optim.Optimizer):
        def __init__(self, optimizer: torch.optim.Optimizer) -> None:
            self.optimizer, self.param_groups = optimizer, optimizer.param_groups

    sgd = torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.1)
    assert optimizer_breaks_laws(Wrapper(sgd)) == []
    adam = torch.optim.Adam(sgd.param_groups[0]["params"])
    assert "Adam does not step along −τ∇L" in optimizer_breaks_laws(Wrapper(adam))[0]


def test_a_law_that_starts_at_0_is_named_and_followed_by_its_absolute_drift(capsys: pytest.CaptureFixture) -> None:
    """A ReLU MLP with every unit balanced at the start (‖w_i‖² = v_i²): its unit laws start at 0, so they have no
    relative drift (ε NaN), but ‖h(θ_k) − h(θ₀)‖ is recorded, and it is second order in the step (a law)."""
    gen = torch.Generator().manual_seed(0)
    x, y, W = (torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in ((16, 2), (16, 1), (3, 2)))
    units = {"‖w_i‖²−v_i²": lambda p: p["0.weight"].square().sum(1) - p["2.weight"].square().sum(0)}
    drifts = []
    for lr in (2e-4, 1e-4):  # θ barely moves: the drift's τ² shows at the same k
        model = nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU(), nn.Linear(3, 1, bias=False)).double()
        with torch.no_grad():
            model[0].weight.copy_(W)
            model[2].weight.copy_(W.norm(dim=1)[None] * torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64))
        monitor = Monitor(model, laws=units)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        monitor.attach(opt)
        for _ in range(20):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
        assert np.isnan(monitor.epsilon("found")).all() and np.isnan(monitor.last_epsilon()["found"])
        drifts.append(monitor.absolute_drift("found")[-1, 0])
    assert capsys.readouterr().out.count("Monitor: 1 law starts at 0") == 2
    assert drifts[1] > 0 and 3.5 < drifts[0] / drifts[1] < 4.5  # τ² at the same k: conserved by the flow


def _unit_laws(p: dict[str, torch.Tensor]) -> torch.Tensor:
    return (p["0.weight"] ** 2).sum(1) + p["0.bias"] ** 2 - (p["2.weight"] ** 2).sum(0)


def _two_layer_run(lr: float, steps: int = 5, **options: object) -> tuple[Monitor, list]:
    """A ReLU MLP trained by one SGD per layer, both attached: the monitor and the warnings it gave."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    x, y = torch.randn(16, 3, dtype=torch.float64), torch.randn(16, 2, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        monitor = Monitor(model, laws={"units": _unit_laws})
        optimizers = [torch.optim.SGD(model[i].parameters(), lr=lr, **options) for i in (0, 2)]
        for optimizer in optimizers:
            monitor.attach(optimizer)
        for _ in range(steps):
            loss = ((model(x) - y) ** 2).mean()
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
    return monitor, [str(w.message) for w in said]


def test_one_optimizer_per_layer_records_once_a_step_after_both() -> None:
    """Each optimizer's step was a record: 10 records for 5 steps, every other one with the first layer moved and the
    second not (ε ten times larger, first order), and each attach warned that it did not update the other layer."""
    monitor, said = _two_layer_run(0.05)
    assert monitor.steps.tolist() == [0, 1, 2, 3, 4, 5] and said == []
    small, _ = _two_layer_run(0.05 / 4)
    ratio = monitor.epsilon("found")[-1] / small.epsilon("found")[-1]
    assert 12 < ratio < 20, ratio  # second order: 16 for τ/4 over the same steps


def test_weight_decay_on_parameters_no_law_reads_is_not_warned_of_and_a_later_lr_gap_is() -> None:
    _, said = _two_layer_run(0.05, weight_decay=0.0)
    assert said == []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    monitor = Monitor(model, laws={"units": _unit_laws})
    groups = [{"params": [model[0].weight, model[2].weight]}, {"params": [model[2].bias], "weight_decay": 0.1}]
    optimizer = torch.optim.SGD([*groups, {"params": [model[0].bias]}], lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the decay is on 2.bias, which no law reads
        monitor.attach(optimizer)
    split = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda k: 1.0, lambda k: 1.0, lambda k: 1.0])
    split.lr_lambdas[0] = lambda k: 0.5 ** k  # the groups the laws read come apart after the first step
    model(torch.randn(2, 3, dtype=torch.float64)).sum().backward()
    optimizer.step()
    split.step()
    optimizer.param_groups[2]["params"][0].grad = None
    with pytest.warns(UserWarning, match="step with different settings"):
        optimizer.step()


def test_a_divergence_between_two_records_says_how_far_apart_they_are() -> None:
    """every=3, θ NaN from step 4 on: the record at step 6 is the first to see it, and it said only "step 6"."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    monitor = Monitor(model, laws={"units": _unit_laws}, every=3)
    for step in range(1, 7):
        if step == 4:
            with torch.no_grad():
                model[0].weight[0, 0] = float("nan")
        monitor.step()
    with pytest.raises(Diverged, match="at step 6: .*, first recorded there: records are every 3 steps, at step 3"):
        monitor.flush()


def test_a_monitor_let_go_is_freed_at_once_with_the_hooks_it_holds_on_the_model() -> None:
    """The optimizers' record callback held the monitor in a cycle: a replaced monitor, and the hooks by which it
    refuses calls on the model, lived on until the garbage collector ran."""
    import gc
    import weakref

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    gc.disable()
    try:
        let_go = weakref.ref(Monitor(model, laws={"units": _unit_laws}))
        assert let_go() is None
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # attached, it lives as long as its optimizer
        attached = Monitor(model, laws={"units": _unit_laws})
        attached.attach(optimizer)
        kept, attached = weakref.ref(attached), None
        optimizer.step()
        assert kept() is not None and kept().steps.tolist() == [0, 1]
    finally:
        gc.enable()
