"""A PyTorch Lightning ``Callback`` that logs ε_block per block kind to the trainer's logger.

:class:`ConservationLightningCallback` starts a :class:`~conslaw_lite.Monitor` on the ``LightningModule``
when training starts, records after each optimizer step (a batch that advanced ``trainer.global_step``,
so gradient accumulation is counted once per step) and logs ``"epsilon/<group>"`` with
``LightningModule.log_dict``: to the trainer's logger (TensorBoard, CSV, ...) and ``trainer.logged_metrics``.
Either ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning`` provides the base class.
"""

from __future__ import annotations

import warnings

from conslaw_lite.families.hf.epsilon_log import latest_epsilon
from conslaw_lite.monitor import Monitor, check_every

try:
    from lightning.pytorch import Callback
except ModuleNotFoundError:
    try:
        from pytorch_lightning import Callback
    except ModuleNotFoundError:  # the class below then says what to install when it is built
        Callback = object


class ConservationLightningCallback(Callback):
    """ε_block per block kind of the ``LightningModule``, logged after each optimizer step (module docstring).
    ``options`` are the :class:`~conslaw_lite.Monitor`'s (``input_shape=``/``inputs=`` to find the laws of a
    module outside the registered blocks, ``laws=``, ``device=``).

    Examples
    ========
    >>> ConservationLightningCallback(every=-1)
    Traceback (most recent call last):
    ...
    ValueError: every must be a positive integer, got -1
    """

    def __init__(self, every: int = 1, **options) -> None:
        if Callback is object:
            raise ModuleNotFoundError("PyTorch Lightning is not installed: pip install 'conslaw_lite[hf]'")
        self.every = check_every(every)
        self.options = options
        self.monitor: Monitor | None = None
        self._step = 0

    def on_train_start(self, trainer, pl_module) -> None:
        """Record h(θ₀) of every law of the module; warn when the optimizers do not follow gradient flow or leave
        out parameters the laws read."""
        self.monitor = Monitor(pl_module, every=self.every, **self.options)
        if str(getattr(trainer, "precision", "32")).startswith(("16", "bf16")):  # "bf16-mixed", "16-mixed", ...
            self.monitor.gradients_in_16_bits()
        self.monitor.judge_optimizers(*trainer.optimizers)  # later, the monitor's global step hook judges them
        for why in value_clipping(trainer):
            warnings.warn(f"Monitor: {why}", stacklevel=2)
        self._step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        """After a batch that stepped the optimizer: record, and log ε_block per group when it recorded."""
        if trainer.global_step == self._step:
            return  # an accumulation batch: no step yet
        self._step = trainer.global_step
        if self.monitor.step():
            pl_module.log_dict(latest_epsilon(self.monitor), on_step=True, on_epoch=False)


def value_clipping(trainer: object) -> list[str]:
    """Why a Lightning trainer that clips gradients by value does not follow gradient flow; ``[]`` when it does not.

    Clipping each coordinate at ``gradient_clip_val`` changes the direction of the step, so the laws drift at first
    order (by norm, ``gradient_clip_algorithm="norm"``, the whole gradient is scaled: the same flow, a smaller step).

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> value_clipping(SimpleNamespace(gradient_clip_val=0.1, gradient_clip_algorithm="value"))[0][:48]
    'the trainer clips gradients by value (gradient_c'
    >>> value_clipping(SimpleNamespace(gradient_clip_val=0.1, gradient_clip_algorithm="norm"))
    []
    """
    if not getattr(trainer, "gradient_clip_val", None) or getattr(trainer, "gradient_clip_algorithm", None) != "value":
        return []
    return [
        f"the trainer clips gradients by value (gradient_clip_val={trainer.gradient_clip_val}, "
        "gradient_clip_algorithm='value'): each coordinate clipped apart turns the step away from the gradient, and "
        "the laws drift at first order (ε measures how far); clip by norm (gradient_clip_algorithm='norm'), which "
        "scales the whole gradient, to keep them"
    ]
