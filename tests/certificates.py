"""The check every new architecture's certificate passes: count = closed form = independent known laws, < 60 s."""

from __future__ import annotations

from conslaw_lite.archs import ArchOptions
from conslaw_lite.certify import certify


def assert_complete(arch: str, options: ArchOptions) -> None:
    """Certify ``arch`` at ``options``: conclusive, N = formula = independent known laws, complete, under a minute."""
    result = certify(arch, options)
    assert result.conclusive, result.reason
    assert result.num_laws == result.formula == result.known_laws and result.complete, result.formula_text
    assert result.seconds < 60
