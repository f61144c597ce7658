"""Deep stacks: the conjecture at two depths per kind, the depth-1 stack is the FFN, the committed sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conslaw_lite.archs import ArchOptions
from conslaw_lite.families.deep import DeepFFN
from conslaw_lite.families.deep.sweep import count_case
from conslaw_lite.families.ffn.block import FFN, SwiGLU
from tests.certificates import assert_complete

SWEEP = Path(__file__).parents[1] / "benchmarks" / "deep_stacks.json"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["deep-relu", "deep-gelu", "deep-swiglu"])
@pytest.mark.parametrize("options", [ArchOptions(depth=2), ArchOptions(depth=3, dim=2, hidden=4, out=3)])
def test_certificate_agrees_with_the_conjecture_at_two_sizes(arch: str, options: ArchOptions) -> None:
    assert_complete(arch, options)


def test_a_stack_of_depth_one_is_the_ffn() -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.float64)
    deep, swiglu = DeepFFN((3, 4, 2), "swiglu").double(), SwiGLU(3, 4, 2).double()
    swiglu.load_state_dict({"B.weight": deep.B[0].weight, "C.weight": deep.C[0].weight, "A.weight": deep.A.weight})
    torch.testing.assert_close(deep(x), swiglu(x))
    deep, ffn = DeepFFN((3, 4, 2), "gelu").double(), FFN(3, 4, 2, activation="gelu").double()
    ffn.load_state_dict({"B.weight": deep.W[0].weight, "A.weight": deep.A.weight})
    torch.testing.assert_close(deep(x), ffn(x))


def test_the_committed_sweep_says_how_it_was_made_and_supports_the_conjecture() -> None:
    sweep = json.loads(SWEEP.read_text())
    assert sweep["made"]["command"].startswith("python benchmarks/deep_stacks.py")
    rows = sweep["rows"]
    assert {(r["kind"], len(r["widths"]) - 2) for r in rows} == {
        (k, L) for k in ("relu", "gelu", "swiglu") for L in (2, 3, 4)
    }
    conclusive = [r for r in rows if r["counted"] is not None]
    assert all(r["agrees"] and r["counted"] == r["formula"] == r["known_laws"] for r in conclusive)
    assert len(conclusive) >= 0.95 * len(rows)  # an inconclusive count gives no number: its reason is recorded
    assert all(r["reason"] for r in rows if r["counted"] is None)


@pytest.mark.slow
def test_a_row_of_the_sweep_is_reproduced() -> None:
    """The committed numbers are the counter's: recount the smallest stack of each kind at depth 3."""
    rows = json.loads(SWEEP.read_text())["rows"]
    for kind in ("relu", "gelu", "swiglu"):
        row = min((r for r in rows if r["kind"] == kind and len(r["widths"]) == 5), key=lambda r: r["num_params"])
        again = count_case(kind, tuple(row["widths"]))
        assert (again.counted, again.num_params) == (row["counted"], row["num_params"])


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="widths must be"):
        DeepFFN((3, 2), "relu")
    with pytest.raises(ValueError, match="kind must be one of"):
        DeepFFN((3, 2, 2), "tanh")
    with pytest.raises(ValueError, match="expected input of width 3"):
        DeepFFN((3, 2, 2), "relu")(torch.randn(4, 2))
