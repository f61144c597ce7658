"""``python -m conslaw_lite drift``: the options of :func:`conslaw_lite.drift.measure` and its report as a table.

A model of one's own: ``drift FILE.py[:FACTORY] --input-shape 3,4`` (or ``--input-dtype long --vocab V``, or a
function ``inputs(n)`` in the file, as for ``certify``) trains ``FACTORY()`` built anew for each seed, on the laws
:func:`conslaw_lite.find_laws.find_laws` finds for it (what it found, on stderr; past its 8,192 parameters, the laws
of its rescaled units, :mod:`conslaw_lite.rescaling_laws`).

Exit codes: 0 every τ trained to step K, 1 some τ diverged (the table still has the stable ones, a row per
diverged τ with its step and seed, and ``slope_lr`` fitted over the stable τ; one line on stderr says so),
2 bad input, a size option the architecture does not take, or every τ diverged (one ``error:`` line naming
the step), 3 an internal error, 4 the module file raised, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterator

import torch

from conslaw_lite.archs import add_size_arguments, check_sizes, given_sizes, size_flag, size_options
from conslaw_lite.cli import INTERRUPTED, USER_CODE, json_text
from conslaw_lite.cli.certify import add_input_arguments, parse_shape, vocab_option
from conslaw_lite.config import device as default_device
from conslaw_lite.drift import DriftReport, Setup, arch_setup, batch_size, measure, model_setup
from conslaw_lite.early_warning import DIVERGENCE, SweepPoint, sweep
from conslaw_lite.find_laws import MAX_PARAMS, find_laws
from conslaw_lite.flows import OPTIMIZERS, SCHEDULES, Diverged
from conslaw_lite.laws import Law
from conslaw_lite.rescaling_laws import rescaling_laws
from conslaw_lite.seeding import seeded
from conslaw_lite.user_module import first_line, load_module, names_a_file

DTYPES = {"float64": torch.float64, "float32": torch.float32}  # training dtypes of the command line
PARTIAL = 1  # the exit code when some τ diverged: the report is there, but not for every τ asked
EXIT_CODES = (
    f"exit codes: 0 every tau trained to step K, {PARTIAL} some tau diverged (their rows name the step; slope_lr fits "
    f"the stable ones), 2 bad input or every tau diverged, 3 internal error, {USER_CODE} the FILE.py module raised, "
    f"{INTERRUPTED} interrupted"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``drift`` subcommand's options.

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> args = parser.parse_args(["mha-rope", "--lr", "0.01", "0.02", "--optimizer", "sgd"])
    >>> args.lr, args.steps, args.schedule, args.batch
    ([0.01, 0.02], 100, 'constant', None)
    >>> parser.epilog
    'exit codes: 0 every tau trained to step K, 1 some tau diverged ...'
    """
    parser.epilog = EXIT_CODES  # drift's own: 1 is a partial sweep here
    parser.add_argument(
        "arch", help="architecture name, as in `certify` (e.g. swiglu, mha-rope), or FILE.py[:FACTORY], a module of "
        "one's own"
    )  # fmt: skip
    add_input_arguments(parser, "with FILE.py")
    parser.add_argument("--lr", type=float, nargs="+", required=True, help="step sizes τ to compare")
    parser.add_argument("--steps", type=int, default=100, help="number of steps K (default 100)")
    parser.add_argument("--schedule", choices=SCHEDULES, default="constant", help="τ_k = τ or τ/(k+1)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="gd", help="gd = full batch, sgd = mini-batch")
    parser.add_argument("--batch", type=int, help="mini-batch size (sgd; default samples/8), or for momentum/adam")
    parser.add_argument("--samples", type=int, default=64, help="number of random data points (default 64)")
    parser.add_argument("--seeds", type=int, default=1, help="average over seeds 0..N-1 (default 1)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--device", help="where to train (default: cuda when present, else cpu)")
    parser.add_argument("--dtype", choices=DTYPES, default="float64", help="training dtype; laws are float64")
    parser.add_argument("--alarm", action="store_true",
                        help="instead: per τ, the step the drift alarm warns and the step the loss diverges (> 10 L_0)")
    add_size_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Measure and print; exit code 0, or 1 when some τ diverged (bad input raises, as does a sweep in which
    every τ diverged, and the CLI turns it into exit code 2).

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> run(parser.parse_args(["toy", "--lr", "0.01", "--steps", "2", "--batch", "4"]))
    Traceback (most recent call last):
    ...
    ValueError: gd is full batch; use --optimizer sgd for mini-batches of 4
    >>> run(parser.parse_args(["toy", "--lr", "0.01", "--heads", "2"]))
    Traceback (most recent call last):
    ...
    ValueError: toy takes no --heads (its size options: --dim)
    >>> run(parser.parse_args(["toy", "--lr", "0.001", "1e6", "--steps", "2"]))  # stderr: 1 of 2 step sizes diverged...
    toy: gd, constant step, K = 2, full batch, 1 seed(s)
    ...
         1e+06  diverged at step 1: the loss grew from ...
    slope_lr: cannot be fitted with fewer than 2 stable tau (1 stable, 1 diverged)
    1
    """
    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1, got {args.steps}")
    if args.seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {args.seeds}")
    given = " ".join(f"{lr:g}" for lr in args.lr)
    if not all(math.isfinite(lr) and lr > 0 for lr in args.lr):
        raise ValueError(f"--lr takes step sizes τ > 0, got {given}")
    if len(set(args.lr)) < len(args.lr):
        raise ValueError(f"--lr takes distinct step sizes (slope_lr is fitted over them), got {given}")
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():  # the file's prints
        text, code = _report(args)
    print(text)
    return code


def _report(args: argparse.Namespace) -> tuple[str, int]:
    """The table or JSON of the measurement (or the alarm's sweep) that ``args`` asks for, and the exit code."""
    batch = batch_size(args.optimizer, args.batch, args.samples)
    options = size_options(args)
    laws, locate = None, str
    if names_a_file(args.arch):
        setup, laws, locate = own_module(args, batch)
    else:
        if args.input_shape is not None or args.vocab is not None or args.input_dtype != "float64":
            raise ValueError("--input-shape, --input-dtype and --vocab are for FILE.py; an arch knows its inputs")
        check_sizes(args.arch, options)
        setup = arch_setup(args.arch, options, samples=args.samples, batch=batch)
    with _named_in_file("the training batch", locate if laws is not None else None):
        if args.alarm:
            return run_alarm(args, setup, laws)
        report = measure(
            setup, args.lr, steps=args.steps, schedule=args.schedule, optimizer=args.optimizer,
            seeds=args.seeds, name=args.arch, batch=batch, device=default_device(args.device),
            dtype=DTYPES[args.dtype], laws=laws,
        )  # fmt: skip
    text = json_text(report.to_dict()) if args.json else format_report(report)
    return text, PARTIAL if report.diverged else 0  # measure warned of the diverged τ, one line on stderr


@contextlib.contextmanager
def _named_in_file(where: str, locate: Callable[[ValueError], str] | None) -> Iterator[None]:
    """Errors raised inside named with the line of the module file they surfaced at (exit 2, as certify's): a
    ``ValueError`` as it is, any other as the model failing on ``where``; one raised outside the file (``locate`` is
    ``None`` for an architecture) is a bug of this package, exit 3. A divergence passes through."""
    try:
        yield
    except ValueError as err:
        raise ValueError(str(err) if locate is None else locate(err)) from err
    except Diverged:
        raise
    except Exception as err:
        failed = ValueError(f"the model fails on {where} ({first_line(err)})")
        failed.__cause__ = err
        if locate is None or locate(failed) == str(failed):
            raise
        raise ValueError(locate(failed)) from err


def own_module(args: argparse.Namespace, batch: int | None) -> tuple[Setup, dict[str, Law], Callable]:
    """``FILE.py[:FACTORY]``: its setup (:func:`conslaw_lite.drift.model_setup`, the file loaded anew for each seed),
    the laws :func:`~conslaw_lite.find_laws.find_laws` finds for it (over its ``MAX_PARAMS``: those of its rescaled
    units, :mod:`conslaw_lite.rescaling_laws`), said on stderr, and what names an error with the file's line."""
    given = [size_flag(size) for size in given_sizes(size_options(args))]
    if given:
        raise ValueError(f"{args.arch} builds its model at its sizes: leave out {', '.join(given)}")
    shape = None if args.input_shape is None else parse_shape(args.input_shape)
    vocab = vocab_option(args)
    with seeded(0):
        user = load_module(args.arch)
    searched_on = user.inputs(shape, vocab)  # as many as the counter needs
    inputs = user.samples(args.samples, shape, vocab)
    if inputs is None and shape is None:
        raise ValueError(f"{args.arch} needs --input-shape, e.g. --input-shape 3,4 (or a function inputs(n) in it)")
    D = sum(p.numel() for p in user.model.parameters() if p.requires_grad)
    locate = lambda err: user.located(err, tokens=vocab is not None)  # noqa: E731
    setup = model_setup(
        lambda: load_module(args.arch).model, shape if inputs is None else None, inputs=inputs, samples=args.samples,
        batch=batch,
    )  # fmt: skip
    batch_of = f"the training batch of {args.samples} inputs" + ("" if shape is None else f" of shape {shape}")
    with _named_in_file(batch_of, locate):
        setup(0)  # the training's model and loss, before a search of seconds: a model it cannot train stops here
    with _named_in_file("the inputs of the law search", locate):
        if D > MAX_PARAMS:  # past find_laws: the laws of its rescaled units, checked, not counted
            laws, found = rescaling_laws(user.model, shape if inputs is None else None, inputs=searched_on)
            found += f" (D = {D:,} is over the {MAX_PARAMS:,} find_laws counts)"
        else:
            found = find_laws(user.model, shape if inputs is None else None, inputs=searched_on)
            laws = found.laws
    if not laws:
        raise ValueError(f"{args.arch} has no laws whose drift to measure: {found}")
    print(f"laws of {args.arch}: {found}", file=sys.stderr)
    return setup, laws, locate


def format_report(report: DriftReport) -> str:
    """The human-readable table of :func:`run`: one row per stable τ, one per diverged τ, then ``slope_lr``.

    Examples
    ========
    >>> print(format_report(measure(arch_setup("toy", samples=1), [0.001, 0.002], steps=2, name="toy")))
    toy: gd, constant step, K = 2, full batch, 1 seed(s)
    ...
    slope_lr = 1.992 (log drift at k = K against log tau)
    >>> print(format_report(measure(arch_setup("toy", samples=1), [0.001, 0.002, 1e6], steps=2, name="toy")))
    toy: gd, constant step, K = 2, full batch, 1 seed(s)
    ...
         0.002 ...
         1e+06  diverged at step 1: the loss grew from ... (run with τ = 1e+06, gd, seed 0)
    slope_lr = 1.992 (log drift at k = K against log tau, over the 2 stable tau)
    """
    head = (
        f"{report.arch}: {report.optimizer}, {report.schedule} step, K = {report.steps}"
        + (f", batch {report.batch}" if report.batch else ", full batch")
        + f", {report.seeds} seed(s)"
    )
    cols = f"{'tau':>10} {'drift':>11} {'epsilon':>10} {'control_eps':>11} {'normalized':>11} "
    cols += f"{'slope_steps':>11} {'identity_err':>12} {'theta_moved':>11} {'loss':>17}"
    rows = [
        f"{p.lr:>10.4g} {p.drift:>11.4g} {p.epsilon:>10.3g} {p.control_epsilon:>11.3g} {p.normalized_drift:>11.4g} "
        f"{p.slope_steps:>11.3f} {p.identity_error:>12.2g} {p.param_change:>11.2%} "
        f"{p.loss_start:>8.3g}→{p.loss_end:<8.3g}"
        for p in report.points
    ]
    rows += [f"{d.lr:>10.4g}  diverged at step {d.step}: {d.reason}" for d in report.diverged]
    stable, diverged = len(report.points), len(report.diverged)
    if stable < 2:
        fit = f"slope_lr: cannot be fitted with fewer than 2 stable tau ({stable} stable, {diverged} diverged)"
    else:
        over = f", over the {stable} stable tau" if diverged else ""
        fit = f"slope_lr = {report.slope_lr:.3f} (log drift at k = K against log tau{over})"
    return "\n".join([head, cols, *rows, fit, *_adam_note(report.optimizer)])


def _adam_note(optimizer: str) -> list[str]:
    """Adam's steps are not −τ∇L: the laws drift at first order (slope_lr near 1, where gradient descent's is 2)."""
    if optimizer != "adam":
        return []
    return ["note: Adam rescales each coordinate of the gradient, so its steps are not along −∇L and the laws are not "
            "conserved: they drift at first order in tau (slope_lr near 1, where gradient descent's is near 2)"]



def run_alarm(args: argparse.Namespace, setup: Callable, laws: dict[str, Law] | None = None) -> tuple[str, int]:
    """``--alarm``: :func:`conslaw_lite.early_warning.sweep` over ``--lr`` for each seed, a row per τ (the table, or
    JSON with ``--json``), and the exit code: :data:`PARTIAL` where some runs diverged, 2 where all did (a line on
    stderr says so).

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> run(parser.parse_args(["ffn-relu", "--lr", "1", "6", "--steps", "12", "--alarm"]))
    ffn-relu: SGD at a constant step, K = 12, full batch; diverged = loss > 10 L_0 or not finite
          tau  seed  drift warning  loss > 3 L_0   diverged   lead
            1     0              —             —          —      —
            6     0             10             9         10      0
    1
    """
    if args.optimizer not in ("gd", "sgd") or args.schedule != "constant":
        raise ValueError("--alarm trains with plain (S)GD at a constant step: use --optimizer gd or sgd, "
                         "--schedule constant")
    if args.device not in (None, "cpu") or args.dtype != "float64":
        raise ValueError("--alarm trains on the cpu in float64: leave out --device and --dtype")
    runs = [
        (seed, point)
        for seed in range(args.seeds)
        for point in sweep(setup, args.lr, steps=args.steps, seed=seed, laws=laws)
    ]
    diverged = sum(p.diverged_at is not None for _, p in runs)
    code = 0 if not diverged else PARTIAL if diverged < len(runs) else 2
    if diverged:
        print(f"warning: {diverged} of {len(runs)} runs diverged (loss > {DIVERGENCE:g} L_0); their rows name the step",
              file=sys.stderr)
    if args.json:
        rows = [{"lr": p.lr, "seed": seed, "warned_at": p.warned_at, "loss_warned_at": p.loss_warned_at,
                 "diverged_at": p.diverged_at, "lead": p.lead} for seed, p in runs]
        return json_text({"arch": args.arch, "steps": args.steps, "divergence": DIVERGENCE, "alarm": rows}), code
    return format_alarm(args.arch, args.steps, batch_size(args.optimizer, args.batch, args.samples), runs), code


def format_alarm(arch: str, steps: int, batch: int | None, runs: list[tuple[int, SweepPoint]]) -> str:
    """The table of :func:`run_alarm`: per τ and seed, the steps of the drift warning, the loss alarm, the divergence.

    Examples
    ========
    >>> import numpy as np
    >>> point = SweepPoint(0.1, 9, 4, 7, np.ones(9), np.arange(1, 10), np.ones(9))
    >>> print(format_alarm("toy", 20, None, [(0, point)]))
    toy: SGD at a constant step, K = 20, full batch; diverged = loss > 10 L_0 or not finite
          tau  seed  drift warning  loss > 3 L_0   diverged   lead
          0.1     0              4             7          9      5
    """
    def say(step: int | None) -> str:
        return "—" if step is None else str(step)

    head = (f"{arch}: SGD at a constant step, K = {steps}, " + (f"batch {batch}" if batch else "full batch")
            + f"; diverged = loss > {DIVERGENCE:g} L_0 or not finite")
    cols = f"{'tau':>9} {'seed':>5} {'drift warning':>14} {'loss > 3 L_0':>13} {'diverged':>10} {'lead':>6}"
    rows = [f"{p.lr:>9.4g} {seed:>5} {say(p.warned_at):>14} {say(p.loss_warned_at):>13} {say(p.diverged_at):>10} "
            f"{say(p.lead):>6}" for seed, p in runs]
    return "\n".join([head, cols, *rows])
