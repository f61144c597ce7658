"""Every registered block family: a folder that names itself, whose laws the counter confirms complete.

These tests run over :func:`conslaw_lite.families.registered`, so a new family folder is tested as
soon as it exists: its first architecture must be counted conclusively, to its formula, with its
known laws complete (the derivation cases are held against the formula in ``test_derive.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import conslaw_lite.families
from conslaw_lite.archs import ArchOptions, list_archs
from conslaw_lite.certify import certify
from conslaw_lite.families import Family, family, registered
from conslaw_lite.symbolic.cases import case_names

FOLDER = Path(conslaw_lite.families.__file__).parent


def test_every_family_folder_is_registered_in_the_book_order() -> None:
    folders = sorted(p.name for p in FOLDER.iterdir() if (p / "__init__.py").exists())
    assert sorted(f.name for f in registered()) == folders
    chapters = [f.chapter for f in registered()]
    assert chapters == sorted(chapters)


def test_architecture_and_case_names_are_unique_across_families() -> None:
    archs = [a.name for f in registered() for a in f.architectures]
    assert len(archs) == len(set(archs)) and sorted(archs) == list_archs()
    cases = [c for f in registered() for c in f.cases]
    assert len(cases) == len(set(cases)) and tuple(cases) == case_names()


def test_a_family_without_its_case_says_so() -> None:
    with pytest.raises(ValueError, match="the toy family has no case 'mha'; its cases: $"):
        family("toy").case("mha")


@pytest.mark.parametrize("fam", registered(), ids=lambda f: f.name)
def test_first_architecture_of_each_family_is_counted_to_its_formula(fam: Family) -> None:
    assert fam.architectures, f"{fam.name} has no named architecture for certify and drift"
    arch = fam.architectures[0].name
    try:
        result = certify(arch, ArchOptions(heads=1))  # one head keeps the attention families fast
    except ModuleNotFoundError as err:  # a family of an optional extra (hf: transformers) says what to install
        pytest.skip(str(err))
    assert result.conclusive, result.reason
    assert result.num_laws == result.formula, result.formula_text
    assert result.known_laws == result.num_laws and result.complete
