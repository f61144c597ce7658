"""A progress bar for a long count: at each θ, the rank of Lie(W)(θ) found so far, the bracket depth, the outputs.

Shown on stderr when it is a terminal (or with ``progress=True``), and only for a count that runs
longer than ``DELAY`` seconds; silent in tests, doctests and pipes unless asked for. Once shown, its line is
ended when the count ends, however it ends (a result, an error, Ctrl-C), so what is printed next starts a line
of its own in a log file or a pipe too.
"""

from __future__ import annotations

import shutil
import sys
import time

from tqdm.auto import tqdm

from conslaw_lite.counting.budget import Estimate, duration
from conslaw_lite.counting.lie_rank import Report

DELAY = 2.0  # seconds before the bar appears: a small count prints nothing


def wanted(progress: bool | None) -> bool:
    """``progress``, or by default whether stderr is a terminal.

    Examples
    ========
    >>> wanted(False), wanted(True)
    (False, True)
    """
    return sys.stderr.isatty() if progress is None else bool(progress)


class Progress:
    """One bar, reset at each θ: rank found so far out of D, with the depth and the outputs in its postfix (or
    the stage of a count through the complement before its first rank: ``gradients 4,096/20,000``, ``LU``).

    The bar opens at the first report ``delay`` seconds (default ``DELAY``) after the start, not by tqdm's own
    ``delay``: ``tqdm.reset`` draws the bar at once, delay or not, and counts the delay again from the reset, so
    a bar closed within ``delay`` of its last reset was left on the screen without the newline that ends it.

    Examples
    ========
    >>> from conslaw_lite.counting.budget import Estimate
    >>> bar = Progress(10, Estimate(1e6, 0.1, {}), enabled=True, delay=0)
    >>> report = bar.point(0, n_out=40)
    >>> report(1, 6); report(2, 9); bar.bar.n, bar.bar.desc
    (9, 'count_laws θ1 (est. 1 MB, 0 s of linear algebra)')
    >>> _ = bar.point(1, n_out=40)
    >>> bar.desc  # the θ before took under a second
    'count_laws θ2 (est. 1 MB, 0 s of linear algebra; θ1 took 0 s)'
    >>> bar.close()
    """

    def __init__(self, D: int, need: Estimate, enabled: bool, delay: float | None = None) -> None:
        self.D, self.need, self.desc = D, need.short(), "count_laws"
        wait = DELAY if delay is None else delay
        self.opens_at = time.monotonic() + wait if enabled else float("inf")
        self.bar: tqdm | None = None  # opened by the first report after the delay
        self.started = time.monotonic()  # of the latest θ

    def point(self, k: int, n_out: int) -> Report:
        """The report for the rank at θ number ``k`` (``n_out`` outputs there)."""
        now = time.monotonic()
        # the estimate is of the linear algebra only, the bar's rate slows at the deep brackets: what the θ before
        # took is the best guess of what this one takes (a ViT of 1,355 parameters: est. 4 s, 90 s a θ)
        before = f"; θ{k} took {duration(now - self.started)}" if k else ""
        self.started = now
        self.desc = f"count_laws θ{k + 1} (est. {self.need}{before})"
        if self.bar is not None:
            self.bar.set_description(self.desc, refresh=False)
            self.bar.set_postfix(outputs=n_out, refresh=False)
            self.bar.reset(total=self.D)

        def report(depth: int, rank: int, stage: str = "") -> None:
            bar = self.opened()
            if bar is None:
                return
            if stage:  # the complement's gradients and LU, before any rank is known
                bar.set_postfix(outputs=n_out, stage=stage)
                return
            bar.update(rank - bar.n)
            bar.set_postfix(outputs=n_out, depth=depth, rank=rank, refresh=False)

        return report

    def opened(self) -> tqdm | None:
        """The bar, opened now if the delay has passed; ``None`` before (or when not enabled).

        Examples
        ========
        >>> from conslaw_lite.counting.budget import Estimate
        >>> Progress(10, Estimate(1e6, 0.1, {}), enabled=False).opened() is None
        True
        """
        if self.bar is None and time.monotonic() >= self.opens_at:
            # a terminal that reports a size of 0 × 0 (a pty opened without one) got no bar at all from tqdm's own
            size = shutil.get_terminal_size()  # which falls back to 80 × 24 there
            self.bar = tqdm(
                total=self.D, unit="dir", desc=self.desc, file=sys.stderr, ncols=size.columns, nrows=size.lines
            )
        return self.bar

    def close(self) -> None:
        """End the bar's line (when it was shown): a count calls this however it ends."""
        if self.bar is not None:
            self.bar.close()
