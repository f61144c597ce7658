"""A limit on the seconds a count or a search of laws may take: ``count_laws(..., seconds=60)``.

A count's time grows with D, the outputs and the bracket depth, a search's with the blocks it solves, and a model of
a thousand parameters can take minutes of either (a convolution read at many positions). A monitor starting before
training cannot wait that long, and a user should not have to guess whether to. The counter and the search check
the clock between their steps (a chunk of brackets, the gradients or the LU of the complement, a block's samples)
with :func:`check_time`, never inside one, and do not start a step that their last steps say would end past it: they
stop within one step of the limit, raising :class:`OutOfTime`.
Limits nest: an inner one never extends an outer one; only :func:`past_limits` lifts them, for the checks of laws a
stopped search found. :func:`said_if_long` prints one line when a wait grows long,
so that a search that runs is not taken for one that hangs: on stderr, as a progress bar is, since when it comes
depends on the machine.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_LIMIT: ContextVar[tuple[float, float]] = ContextVar("time_limit", default=(math.inf, math.inf))  # (end, seconds)


class OutOfTime(TimeoutError):
    """A count or a search stopped at its time limit (``seconds=``); the message says which limit."""


@contextmanager
def time_limit(seconds: float | None, since: float | None = None) -> Iterator[None]:
    """Within it, :func:`check_time` raises :class:`OutOfTime` once ``seconds`` have passed (``None``: no limit),
    counted from ``since`` (a ``time.monotonic()`` reading: work done before it began counts too) or from now.

    Examples
    ========
    >>> with time_limit(0.0):
    ...     check_time()
    Traceback (most recent call last):
    ...
    conslaw_lite.time_limit.OutOfTime: stopped at its time limit of 0 s (seconds=0)
    >>> with time_limit(None):
    ...     check_time()
    """
    if seconds is None:
        yield
        return
    if not seconds >= 0:
        raise ValueError(f"seconds must be a number ≥ 0 (or None: no limit), got {seconds!r}")
    token = _LIMIT.set(min(_LIMIT.get(), ((time.monotonic() if since is None else since) + seconds, seconds)))
    try:
        yield
    finally:
        _LIMIT.reset(token)


@contextmanager
def past_limits() -> Iterator[None]:
    """Within it no limit applies: the checks of the laws a stopped search found run to their end
    (:func:`~conslaw_lite.find_laws.find_laws`). A law is never returned unchecked, and a check cut short would throw
    away what the search found in the seconds it had.

    Examples
    ========
    >>> with time_limit(0.0), past_limits():
    ...     check_time()
    """
    token = _LIMIT.set((math.inf, math.inf))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def time_left() -> float:
    """Seconds until the earliest-ending :func:`time_limit` ends (``inf`` without one; ≤ 0 once it has passed)."""
    return _LIMIT.get()[0] - time.monotonic()


def check_time(need: float = 0.0) -> None:
    """Raise :class:`OutOfTime` if the earliest-ending :func:`time_limit` has passed, or will have before a step
    expected to take ``need`` seconds ends (a step that cannot end within the limit is not started); nothing
    without a limit.

    Examples
    ========
    >>> with time_limit(60.0):
    ...     check_time(need=100.0)  # find_laws(seconds=30) stopped at 22.7 s said it stopped at its limit of 30 s
    Traceback (most recent call last):
    ...
    conslaw_lite.time_limit.OutOfTime: stopped 60 s before its time limit of 60 s, the next step needing about 100 s ...
    """
    left = time_left()
    if left <= need:
        seconds = _LIMIT.get()[1]
        if left > 0:  # a step that would end past the limit is not started: say so, not that the limit was reached
            early = f"{left:.0f} s before its time limit of {seconds:g} s, the next step needing about {need:.0f} s"
            raise OutOfTime(f"stopped {early} (seconds={seconds:g})")
        raise OutOfTime(f"stopped at its time limit of {seconds:g} s (seconds={seconds:g})")


@contextmanager
def said_if_long(text: str, after: float) -> Iterator[None]:
    """Print ``text`` once (on stderr, from a timer thread) if the block still runs ``after`` seconds on.

    Examples
    ========
    >>> with said_if_long("still searching", after=60.0):  # done at once: nothing printed
    ...     pass
    """
    timer = threading.Timer(after, print, args=(text,), kwargs={"file": sys.stderr, "flush": True})
    timer.daemon = True  # an interpreter that exits is not kept waiting for it
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
