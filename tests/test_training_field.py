"""Models whose training does not follow the field the counter differentiates are refused, not counted: hooks on the
gradient, straight-through estimators, autograd Functions whose derivative is not their forward's."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from conslaw_lite import count_laws, find_laws


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4, bias=False), nn.ReLU(), nn.Linear(4, 2, bias=False)).double()


def _hooked(hook: Callable[[nn.Module], object]) -> nn.Module:
    model = _mlp()
    hook(model)
    return model


@pytest.mark.parametrize(
    ("hook", "named"),
    [
        (lambda m: m[0].weight.register_hook(lambda g: 2 * g), r"gradient of parameter '0.weight' \(Tensor.register"),
        (lambda m: m[0].weight.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(2)), "register_post_acc"),
        (lambda m: m[1].register_full_backward_hook(lambda mod, gi, go: gi), "a backward hook on `1`"),
        (lambda m: m[1].register_backward_hook(lambda mod, gi, go: gi), "a backward hook on `1`"),  # it crashed
    ],
)
def test_a_hook_on_the_gradient_is_refused(hook, named: str) -> None:
    """W's gradient doubled: the unit laws ‖W_i‖² − ‖V_{:,i}‖² were certified complete, and drift at first order under
    that training (which keeps ‖W_i‖² − 2‖V_{:,i}‖²)."""
    with pytest.raises(ValueError, match=f"{named}.*training does not step along the loss's gradient"):
        count_laws(_hooked(hook), (3,), progress=False)


def test_a_hook_that_only_reads_the_gradient_is_counted() -> None:
    """A logger's hook (wandb.watch's kind) leaves the step as it is: the 4 unit laws, as without it."""
    norms: list[torch.Tensor] = []
    model = _hooked(lambda m: m[0].weight.register_hook(lambda g: norms.append(g.norm())))
    model[2].weight.register_post_accumulate_grad_hook(lambda p: norms.append(p.grad.norm()))
    count = count_laws(model, (3,), progress=False)
    assert count.conclusive and count.num_laws == 4 and model[2].weight.grad is None


def test_a_small_or_large_scale_and_a_kink_at_the_given_theta_are_no_mismatch() -> None:
    """A LayerScale at 10⁻⁸ moves f by 10⁻¹⁶ of itself (round-off, refused at first); zero biases on zero inputs put
    every unit on its kink at the model's θ, where differences cross it (checked at random θ instead)."""

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.g = nn.Linear(4, 3), nn.Linear(3, 4), nn.Parameter(torch.full((4,), 1e-8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 1e6 * x + self.g * self.b(torch.relu(self.a(x)))

    torch.manual_seed(0)
    assert count_laws(Scaled().double(), (4,), progress=False).num_laws == 3 + 4
    model = _mlp()
    inputs = torch.randn(32, 3, dtype=torch.float64)
    inputs[:6] = 0.0
    assert count_laws(model, inputs=inputs, at=dict(model.named_parameters()), progress=False).num_laws == 4


class _StraightThrough(nn.Module):
    """``V (W + (round(W) − W).detach()) x``: W trains by the estimator's gradient, its values move by steps."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.W, self.V = nn.Parameter(2 * torch.randn(2, 3)), nn.Parameter(torch.randn(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        quantized = self.W + (self.W.round() - self.W).detach()
        return x @ quantized.T @ self.V.T


class _Reversal(torch.autograd.Function):
    """A gradient reversal whose jvp mirrors its backward: −t, where the forward's derivative is t."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return -grad

    @staticmethod
    def jvp(ctx, tangent: torch.Tensor) -> torch.Tensor:
        return -tangent


class _Adversarial(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.A, self.B = nn.Linear(2, 3, bias=False), nn.Linear(4, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.A(_Reversal.apply(self.B(x)))


@pytest.mark.parametrize(("model", "shape"), [(_StraightThrough, (3,)), (_Adversarial, (4,))])
def test_a_derivative_that_is_not_the_values_is_refused(model: type, shape: tuple[int, ...]) -> None:
    """The estimator counted N = 10, conclusive, where the field it trains by has 11; the reversal N = 0 for 3
    (AᵀA + BBᵀ): the brackets were of a field training does not follow."""
    with pytest.raises(ValueError, match="derivative in θ is not the derivative of its values"):
        count_laws(model().double(), shape, progress=False)
    with pytest.raises(ValueError, match="derivative in θ is not the derivative of its values"):
        find_laws(model().double(), shape)


def test_the_monitor_warns_of_a_hook_on_the_gradient() -> None:
    from conslaw_lite import Monitor
    from conslaw_lite.families.ffn.block import SwiGLU

    block = SwiGLU(4, 3, 4).double()
    block.A.weight.register_hook(lambda g: 2 * g)
    with pytest.warns(UserWarning, match="Monitor: a hook on the gradient of parameter 'A.weight'"):
        Monitor(block)


class _BatchBranch(nn.Module):
    """A tanh taken or not on the sign of the whole batch's sum: the output of an input depends on the others."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.a(x)
        return self.b(torch.tanh(z) if x.sum() > 0 else z)


@pytest.mark.parametrize("seed", range(4))
def test_a_branch_on_a_statistic_of_the_batch_is_refused_at_every_seed(seed: int) -> None:
    """Both halves of the probe batch took the branch's same side by chance: N = 10 conclusive at seed 0 (the linear
    path's laws, broken by every batch of positive sum), N = 0 at others. Each input alone is now compared too."""
    torch.manual_seed(seed)
    with pytest.raises(ValueError, match="mixes the inputs of a batch"):
        count_laws(_BatchBranch().double(), (3,), seed=seed, progress=False)


class _NoVmapRule(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return 2 * ctx.saved_tensors[0] * grad


def test_an_autograd_function_without_a_vmap_rule_is_refused_with_what_to_do() -> None:
    """torch's RuntimeError from inside the count (the CLI exited 3 with a traceback)."""
    model = _mlp()
    model[1].register_forward_hook(lambda module, args, out: _NoVmapRule.apply(out))
    with pytest.raises(ValueError, match="autograd.Function without a vmap rule: give it generate_vmap_rule = True"):
        count_laws(model, (3,), progress=False)
