"""A ``transformers`` ``TrainerCallback`` that logs ε_block per block kind while a ``Trainer`` trains.

:class:`ConservationCallback` starts a :class:`~conslaw_lite.Monitor` on the model when training begins
(h(θ₀) of every law the registry knows for it), records after every optimizer step (``on_optimizer_step``;
``every`` thins it), and adds ``"epsilon/<group>"`` (e.g. ``"epsilon/gqa-rope-qknorm-shared"``,
``"epsilon/swiglu:control"``) to each log (``on_log``): to ``trainer.state.log_history`` and to every
callback after it. The Trainer puts its reporting callbacks (TensorBoard, ...) before the user's, so
:func:`watch` inserts the callback first, where they see its keys too.
"""

from __future__ import annotations

from torch import nn

from conslaw_lite.families.hf.epsilon_log import latest_epsilon
from conslaw_lite.monitor import Monitor, check_every

try:
    from transformers import TrainerCallback
except ModuleNotFoundError:  # the class below then says what to install when it is built
    TrainerCallback = object


class ConservationCallback(TrainerCallback):
    """ε_block per block kind of the trained model, added to the Trainer's logs (see the module docstring).

    ``monitor`` is the :class:`~conslaw_lite.Monitor`, from the start of training on; ``options`` are its own
    (``input_shape=``/``inputs=`` to find the laws of parts outside the registered blocks, ``laws=``, ``device=``).

    Examples
    ========
    >>> ConservationCallback(every=0)
    Traceback (most recent call last):
    ...
    ValueError: every must be a positive integer, got 0
    """

    def __init__(self, every: int = 1, **options) -> None:
        if TrainerCallback is object:
            raise ModuleNotFoundError("transformers is not installed: pip install 'conslaw_lite[hf]'")
        self.every = check_every(every)
        self.options = options
        self.monitor: Monitor | None = None

    def on_train_begin(self, args, state, control, model: nn.Module | None = None, **kwargs):
        """Record h(θ₀) of every law of ``model``; warn when the optimizer does not follow gradient flow or leaves
        out parameters the laws read."""
        self.monitor = Monitor(model, every=self.every, **self.options)
        if getattr(args, "bf16", False) or getattr(args, "fp16", False):
            self.monitor.gradients_in_16_bits()
        if (optimizer := kwargs.get("optimizer")) is not None:  # later, the monitor's global step hook judges it
            self.monitor.judge_optimizers(optimizer)

    def on_optimizer_step(self, args, state, control, **kwargs):
        """Count one optimizer step (every ``every``-th records the laws): right after it, while ``.grad`` still holds
        the gradient it took, which the monitor checks (:mod:`conslaw_lite.gradient_check`; the Trainer zeroes it
        before ``on_step_end``)."""
        self.monitor.step()

    def on_log(self, args, state, control, logs: dict | None = None, **kwargs):
        """Add ``"epsilon/<group>": ε_block`` at the latest record to ``logs`` and to the log history."""
        if self.monitor is None or logs is None:
            return
        values = latest_epsilon(self.monitor)
        logs.update(values)
        if state.log_history:
            state.log_history[-1].update(values)


def watch(trainer, every: int = 1, **options) -> ConservationCallback:
    """Add a :class:`ConservationCallback` (``options``: the :class:`~conslaw_lite.Monitor`'s) to ``trainer`` ahead
    of its reporting callbacks; return it.

    Examples
    ========
    >>> watch(object())
    Traceback (most recent call last):
    ...
    TypeError: watch needs a transformers Trainer, got object
    """
    handler = getattr(trainer, "callback_handler", None)
    if handler is None:
        raise TypeError(f"watch needs a transformers Trainer, got {type(trainer).__name__}")
    callback = ConservationCallback(every, **options)
    handler.callbacks.insert(0, callback)
    return callback
