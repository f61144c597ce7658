"""The monitor's check of the gradient training steps along (conslaw_lite.gradient_check), and the optimizer settings
it judges: edits between backward() and the optimizer are named, the loss's own gradient never is."""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest
import torch
from torch import nn

from conslaw_lite.monitor import Monitor
from tests.training_loops import UNITS, X, Y, loss, mlp, monitor_warnings, sgd_loop


def test_the_loss_gradient_is_not_flagged_with_or_without_momentum() -> None:
    for momentum in (0.0, 0.9):
        model = mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=momentum)
        assert monitor_warnings(model, sgd_loop(model, optimizer)) == []


def test_the_monitor_called_before_the_optimizer_is_not_flagged() -> None:
    """.grad then holds the gradient at θ now, not at θ of the call before: the smaller of the two is judged."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def step() -> None:
        optimizer.zero_grad()
        loss(model).backward()
        step.monitor.step()
        optimizer.step()

    assert monitor_warnings(model, step) == []


@pytest.mark.parametrize(
    "edit",
    [
        lambda model: torch.nn.utils.clip_grad_value_(model.parameters(), 0.05),
        lambda model: torch.nn.utils.clip_grad_norm_(model[0].parameters(), 0.05),
        lambda model: model[2].weight.grad.mul_(2.0),
    ],
    ids=["clip_grad_value_", "clip_grad_norm_ of one layer", "one gradient doubled"],
)
def test_an_edited_gradient_is_named(edit) -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    said = monitor_warnings(model, sgd_loop(model, optimizer, lambda: edit(model)))
    assert len(said) == 1 and said[0].startswith("Monitor: the laws given `unit` are not kept by the gradient in .grad")
    assert "either they are not laws of this model (laws= are watched as given) or .grad is not the loss's" in said[0]


def test_an_l2_penalty_in_the_loss_and_a_layer_frozen_later_are_named() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)

    def penalized() -> None:
        optimizer.zero_grad()
        (loss(model) + 1e-3 * sum(p.square().sum() for p in model.parameters())).backward()
        optimizer.step()
        penalized.monitor.step()

    assert "(an L2 penalty, an auxiliary loss on hidden units)" in monitor_warnings(model, penalized)[0]
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    step = sgd_loop(model, optimizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step.monitor = Monitor(model, laws=UNITS)
        model[2].weight.requires_grad_(False)  # after the start: the Monitor still watches the laws reading it
        for _ in range(4):
            step()
    said = [str(w.message) for w in caught if str(w.message).startswith("Monitor")]
    assert len(said) == 1 and "2.weight was frozen (requires_grad=False) after the start" in said[0]


def test_a_quantity_given_as_a_law_that_is_none_is_named() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    step = sgd_loop(model, optimizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step.monitor = Monitor(model, laws={"half": lambda p: p["0.weight"].square().sum(1)})
        for _ in range(2):
            step()
    said = [str(w.message) for w in caught if str(w.message).startswith("Monitor")]
    assert len(said) == 1 and "`half` are not kept by the gradient in .grad" in said[0]


def test_float32_training_of_a_transformers_model_is_not_flagged() -> None:
    """Its gradient's round-off (10⁻⁷ of its terms) is far below the tolerance, on every law of every block."""
    pytest.importorskip("transformers")
    from conslaw_lite.archs import ArchOptions
    from conslaw_lite.families.hf.archs import tiny_model

    options = ArchOptions(dim=32, heads=2, head_dim=8, hidden=64, out=64, experts=4, top_k=2)
    model = tiny_model("qwen3", options, num_hidden_layers=2, max_position_embeddings=16).float()
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = Monitor(model)
        for _ in range(4):  # checks at calls 2 and 3
            optimizer.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            monitor.step()
    assert monitor._gradients.next == 1003  # both checks ran, and found nothing
    assert [str(w.message) for w in caught if "gradient in .grad" in str(w.message)] == []


def test_key_biases_whose_gradient_is_round_off_of_zero_are_not_flagged() -> None:
    """GPT-2's key biases: each entry is a law (the softmax ignores a shift of the scores), the sum ⟨∇h, g⟩ one term,
    as large as its own size: judged against the largest terms' size (a false warning at step 2 before)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = Monitor(model.eval(), inputs=ids[:2])
        for _ in range(4):
            optimizer.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            monitor.step()
    assert monitor._gradients.next == 1003
    assert [str(w.message) for w in caught if "gradient in .grad" in str(w.message)] == []


def test_groups_apart_by_maximize_a_subclass_of_sgd_and_a_scheduler_warn_once() -> None:
    model = mlp()
    apart = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "maximize": True}])
    monitor = Monitor(model, laws=UNITS)
    with pytest.warns(UserWarning, match="step with different settings \\(maximize=0"):
        monitor.attach(apart)

    class LARS(torch.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    class Renamed(torch.optim.SGD):  # SGD's own step: nothing to say
        pass

    with pytest.warns(UserWarning, match="LARS subclasses SGD with a step\\(\\) of its own"):
        Monitor(model, laws=UNITS).attach(LARS(model.parameters(), lr=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Monitor(model, laws=UNITS).attach(Renamed(model.parameters(), lr=0.1))
    groups = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters()}], lr=0.02)
    decay = torch.optim.lr_scheduler.LambdaLR(groups, [lambda k: 1.0, lambda k: 1 / (1 + 0.1 * k)])
    monitor = Monitor(model, laws=UNITS)
    monitor.attach(groups)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(10):
            groups.zero_grad()
            loss(model).backward()
            groups.step()
            decay.step()
    said = [str(w.message) for w in caught if "different settings" in str(w.message)]
    assert len(said) == 1  # its lr changes at every step: the same reason, said once


def test_an_edit_that_starts_late_is_named_at_the_next_check() -> None:
    """Checks come every 1,000 steps after the first two: an edit from step 1,500 on is named at step 2,003."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    calls = []

    def clip_late() -> None:
        calls.append(None)
        if len(calls) >= 1500:
            torch.nn.utils.clip_grad_value_(model.parameters(), 1e-3)

    said = monitor_warnings(model, sgd_loop(model, optimizer, clip_late), steps=2100)
    assert len(said) == 1 and "at step 2003" in said[0]


def test_a_hook_registered_before_the_start_is_named_once() -> None:
    """The monitor names it at the start; the check that then finds the laws moved does not say it again."""
    model = mlp()
    model[2].weight.register_hook(lambda g: 3 * g)
    said = monitor_warnings(model, sgd_loop(model, torch.optim.SGD(model.parameters(), lr=0.02)))
    assert len(said) == 1 and "a hook on the gradient of parameter '2.weight'" in said[0]


def autocast_loop(model: nn.Module, clip: float | None = None):
    """SGD on float32 ``model`` with its loss computed under bf16 autocast, the gradient clipped to norm ``clip``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)

    def step() -> None:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            error = model(X.float()) - Y.float()
        error.float().square().mean().backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        step.monitor.step()

    return step


def test_a_gradient_computed_under_bf16_autocast_is_not_judged() -> None:
    """Each entry a bf16 number: its round-off (10⁻² of the terms) is not taken for an edit. Clipped, it is no longer
    recognised, and the warning names that cause too; ``gradients_in_16_bits()`` then turns the check off."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 3))
    laws = {"unit": lambda p: p["0.weight"].square().sum(1) + p["0.bias"].square() - p["2.weight"].square().sum(0)}
    assert monitor_warnings(model, autocast_loop(model), laws=laws) == []
    clipped = autocast_loop(model, clip=1e-3)
    said = monitor_warnings(model, clipped, laws=laws)
    assert len(said) == 1 and "round-off of a gradient computed under 16-bit autocast" in said[0], said
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clipped.monitor = Monitor(model, laws=laws)
        clipped.monitor.gradients_in_16_bits()
        for _ in range(4):
            clipped()
    assert [w for w in caught if "Monitor" in str(w.message)] == []


def test_a_monitor_attached_and_stepped_by_hand_too_is_refused() -> None:
    """Each step would count twice (21 records for 10 steps), and nothing said so."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    step = sgd_loop(model, optimizer)
    step.monitor = Monitor(model, laws=UNITS)
    step.monitor.attach(optimizer)
    with pytest.raises(ValueError, match="called by hand while the monitor is attached to an optimizer"):
        step()


def test_optimizers_stepped_by_a_loop_that_calls_the_monitor_by_hand_are_judged() -> None:
    """No attach: AdamW, weight decay and param groups at two lr moved the laws at first order, and nothing was said
    (the ratio of ε at τ and τ/2 was 0.92, 1.00 and 1.00)."""
    for make, reason in (
        (lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3), "AdamW does not step along −τ∇L"),
        (lambda m: torch.optim.SGD(m.parameters(), lr=0.02, weight_decay=0.05), "weight_decay=0.05 shrinks θ"),
        (lambda m: torch.optim.SGD([{"params": m[0].parameters(), "lr": 0.002}, {"params": m[2].parameters()}],
                                   lr=0.02), "the laws read parameters that step with different settings"),
    ):  # fmt: skip
        model = mlp()
        said = monitor_warnings(model, sgd_loop(model, make(model)), steps=3)
        assert any(reason in w for w in said), said


def test_the_global_step_hooks_do_not_keep_a_monitor_alive() -> None:
    """torch's global hooks are registered once for all monitors, which they hold weakly."""
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

    model = mlp()
    Monitor(model, laws=UNITS)
    before = len(_global_optimizer_pre_hooks), len(_global_optimizer_post_hooks)
    monitor = Monitor(model, laws=UNITS)
    assert (len(_global_optimizer_pre_hooks), len(_global_optimizer_post_hooks)) == before
    gone = weakref.ref(monitor)
    del monitor
    gc.collect()
    assert gone() is None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss(model).backward()
    optimizer.step()  # no hook calls a monitor collected


def test_a_layer_no_optimizer_steps_is_named_even_with_its_gradient_the_losss() -> None:
    """``model.zero_grad()`` gives the left-out layer the loss's gradient, so .grad passes; but it stands still while
    the other layer moves, and the laws reading both drift at first order (said nothing before)."""
    model = mlp()
    left_out = torch.optim.SGD(model[2].parameters(), lr=0.02)

    def step() -> None:
        model.zero_grad()
        loss(model).backward()
        left_out.step()
        step.monitor.step()

    said = monitor_warnings(model, step, steps=25)
    assert len(said) == 1 and "read 0.bias, 0.weight, which have not moved from step 1 to step 21 though" in said[0]
    for alternate in (False, True):  # one optimizer per layer: both at each step, or one each step (GAN-style)
        model = mlp()
        both = [torch.optim.SGD(model[i].parameters(), lr=0.02) for i in (0, 2)]

        def per_layer() -> None:
            model.zero_grad()
            loss(model).backward()
            for optimizer in both[per_layer.monitor._count % 2 :: 2] if alternate else both:
                optimizer.step()
            per_layer.monitor.step()

        assert monitor_warnings(model, per_layer, steps=25) == []  # alternating, the laws are kept at second order
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(k / 5, 1.0))  # lr 0 at the first step
    warming = sgd_loop(model, optimizer, after=warmup.step)
    assert monitor_warnings(model, warming) == []  # nothing moved at step 1: no parameter is named


def test_a_gradient_zeroed_before_the_monitor_is_said_once() -> None:
    """The check found no .grad and said nothing: edits of the gradient went unnamed in such a loop."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    emptied = sgd_loop(model, optimizer, after=optimizer.zero_grad)
    said = monitor_warnings(model, emptied, steps=1010)  # checks at 2, 3 and 1003: the note once
    assert len(said) == 1 and "found .grad empty at step 2 though θ moved: monitor.step() comes after zero_grad()" in (
        said[0]
    )


def test_sparse_embedding_gradients_and_adam_beside_sgd_are_judged_without_a_crash() -> None:
    """``nn.Embedding(sparse=True)`` gave the check a sparse .grad it could not compare (NotImplementedError), and Adam
    on one layer beside SGD on the other a KeyError (Adam has no momentum to list)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 3, sparse=True), nn.Linear(3, 2, bias=False)).double()
    gram = {"gram": lambda p: p["0.weight"].T @ p["0.weight"] - p["1.weight"].T @ p["1.weight"]}
    ids, target = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(1)), torch.randn(16, 2).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def step() -> None:
        optimizer.zero_grad()
        (model(ids) - target).square().mean().backward()
        optimizer.step()
        step.monitor.step()

    assert monitor_warnings(model, step, steps=4, laws=gram) == []
    assert step.monitor._gradients.next == 1003  # both checks ran
    model = mlp()
    adam, sgd = torch.optim.Adam(model[0].parameters(), lr=1e-3), torch.optim.SGD(model[2].parameters(), lr=0.05)

    def two() -> None:
        model.zero_grad()
        loss(model).backward()
        adam.step()
        sgd.step()
        two.monitor.step()

    said = monitor_warnings(model, two, steps=3)
    assert any("different settings (lr=0.001: 0.bias, 0.weight; lr=0.05: 2.weight)" in w for w in said), said


def test_an_optimizer_of_ones_own_is_not_said_to_break_the_laws() -> None:
    """A class not from torch may well be plain SGD (its laws kept, ratio 0.50): it was said to break them, as Adam."""

    class PlainSGD(torch.optim.Optimizer):
        def __init__(self, params, lr: float) -> None:
            super().__init__(params, {"lr": lr})

        @torch.no_grad()
        def step(self, closure=None) -> None:
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(p.grad, alpha=-group["lr"])

    model = mlp()
    said = monitor_warnings(model, sgd_loop(model, PlainSGD(model.parameters(), lr=0.02)), steps=3)
    assert len(said) == 1 and "PlainSGD is not torch's SGD: the laws hold only if it steps along −τ∇L" in said[0]


def gan_style(model: nn.Module, clip: float | None = None, attached: bool = False) -> list[str]:
    """One optimizer per layer, stepped in turn, the gradient computed again between them: the second layer's at θ
    after the first's step. ``clip``: its gradient then clipped by value."""
    first, second = (torch.optim.SGD(model[i].parameters(), lr=0.05) for i in (0, 2))

    def step() -> None:
        for optimizer in (first, second):
            model.zero_grad()
            loss(model).backward()
            if clip is not None and optimizer is second:
                nn.utils.clip_grad_value_(model[2].parameters(), clip)
            optimizer.step()
        if not attached:
            step.monitor.step()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step.monitor = Monitor(model, laws=UNITS)
        if attached:
            step.monitor.attach(first), step.monitor.attach(second)
        for _ in range(20):
            step()
    return [str(w.message) for w in caught if str(w.message).startswith("Monitor")]


@pytest.mark.parametrize("attached", [False, True])
def test_a_gradient_computed_again_between_two_optimizers_steps_is_judged_where_it_was_computed(attached: bool) -> None:
    """.grad then holds g at θ between the steps, neither at the record before nor at the one after: judged there, the
    loss's gradient (its share was 0.01 to 0.03 of the terms at either record, a warning); clipped, it is named."""
    assert gan_style(mlp(), attached=attached) == []
    said = gan_style(mlp(), clip=1e-3, attached=attached)
    assert len(said) == 1 and "are not kept by the gradient in .grad" in said[0], said
