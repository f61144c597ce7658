"""A progress bar for a long count: at each θ, the rank of Lie(W)(θ) found so far, the bracket depth, the outputs.

Shown on stderr when it is a terminal (or with ``progress=True``), and only for a count that runs
longer than ``DELAY`` seconds; silent in tests, doctests and pipes unless asked for.
"""

from __future__ import annotations

import sys

from tqdm.auto import tqdm

from conslaw_lite.counting.budget import Estimate
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

    Examples
    ========
    >>> from conslaw_lite.counting.budget import Estimate
    >>> bar = Progress(10, Estimate(1e6, 0.1, {}), enabled=True)  # shown after DELAY seconds only
    >>> report = bar.point(0, n_out=40)
    >>> report(1, 6); report(2, 9); bar.bar.n, bar.bar.desc
    (9, 'count_laws θ1 (est. 1 MB, 0 s): ')
    >>> bar.close()
    """

    def __init__(self, D: int, need: Estimate, enabled: bool) -> None:
        self.D, self.need = D, need.short()
        self.bar = tqdm(total=D, disable=not enabled, delay=DELAY, unit="dir", desc="count_laws", file=sys.stderr)

    def point(self, k: int, n_out: int) -> Report:
        """The report for the rank at θ number ``k`` (``n_out`` outputs there)."""
        self.bar.set_description(f"count_laws θ{k + 1} (est. {self.need})", refresh=False)
        self.bar.set_postfix(outputs=n_out, refresh=False)
        self.bar.reset(total=self.D)

        def report(depth: int, rank: int, stage: str = "") -> None:
            if stage:  # the complement's gradients and LU, before any rank is known
                self.bar.set_postfix(outputs=n_out, stage=stage)
                return
            self.bar.update(rank - self.bar.n)
            self.bar.set_postfix(outputs=n_out, depth=depth, rank=rank, refresh=False)

        return report

    def close(self) -> None:
        self.bar.close()
