"""Every architecture of the book has a provenance, and the summary table is the registry's."""

from __future__ import annotations

from conslaw_lite.archs import list_archs
from conslaw_lite.provenance import PROVENANCE, STATUSES, summary_rows


def test_every_registered_architecture_is_classified_and_nothing_else() -> None:
    missing = sorted(set(list_archs()) - set(PROVENANCE))
    assert not missing, f"classify these architectures in conslaw_lite.provenance.PROVENANCE: {missing}"
    assert not set(PROVENANCE) - set(list_archs()), "PROVENANCE names an architecture that is not registered"
    assert {status for status, _ in PROVENANCE.values()} <= set(STATUSES)


def test_summary_rows_follow_the_registry_in_the_book_order() -> None:
    rows = summary_rows()
    assert [r.arch for r in rows] == [r.arch for r in sorted(rows, key=lambda r: r.chapter)]
    assert sorted(r.arch for r in rows) == list_archs()
    deep = {r.arch: r for r in rows if r.family == "deep"}
    assert {r.status for r in deep.values()} == {"conjectured"}
    assert deep["deep-relu"].formula == "Σ_l r_l = 3 + 3 = 6"
