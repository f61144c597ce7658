"""A limit on a count's and a search's seconds (time_limit.py): they stop and say so, a monitor starts anyway."""

from __future__ import annotations

import importlib
import time

import pytest
import torch
from torch import nn

import conslaw_lite.law_search as law_search
import conslaw_lite.own_laws as own_laws_module
from conslaw_lite.counting import count_laws
from conslaw_lite.find_laws import find_laws
from conslaw_lite.monitor import Monitor
from conslaw_lite.own_laws import SPENT, STOPPED, own_laws
from conslaw_lite.time_limit import OutOfTime, check_time, said_if_long, time_limit

find_laws_module = importlib.import_module("conslaw_lite.find_laws")  # the package exports the function

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()


def test_a_count_past_its_seconds_stops_with_out_of_time() -> None:
    with pytest.raises(OutOfTime, match=r"stopped at its time limit of 0 s \(seconds=0\)"):
        count_laws(mlp(), (3,), seconds=0.0)
    assert count_laws(mlp(), (3,), seconds=600.0).num_laws == 4  # a limit it keeps changes nothing


def test_a_search_past_its_seconds_stops_and_says_so() -> None:
    count = count_laws(mlp(), (3,))
    found = find_laws(mlp(), (3,), count=count, seconds=0.0)  # the count given: the search's own steps check the clock
    assert found.stopped == "stopped at its time limit of 0 s (seconds=0)"
    assert (found.num_found, found.complete, found.laws) == (0, False, {})
    assert found.message == f"found 0 of N = 4: the search {found.stopped} before it found the other 4"
    assert isinstance(OutOfTime("x"), TimeoutError)


def deeper_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).double()


def stop_after_blocks(monkeypatch, blocks: int) -> None:
    """The clock runs out once ``blocks`` blocks have been solved (their null space computed), wherever that is."""
    solved, null_space = [0], law_search.null_space

    def counted(*args, **kwargs):
        solved[0] += 1
        return null_space(*args, **kwargs)

    def check_time(need: float = 0.0) -> None:
        if solved[0] >= blocks:
            raise OutOfTime("stopped at its time limit of 1 s (seconds=1)")

    monkeypatch.setattr(law_search, "null_space", counted)
    monkeypatch.setattr(law_search, "check_time", check_time)


def test_a_search_stopped_midway_keeps_the_laws_of_the_blocks_it_solved(monkeypatch) -> None:
    """Two hidden layers of 4 ReLU units (N = 8): stopped after one block, the laws of that block's hidden layer are
    returned, each checked, and the message says how many of N were found and why the others were not."""
    count = count_laws(deeper_mlp(), (3,))
    stop_after_blocks(monkeypatch, 1)
    found = find_laws(deeper_mlp(), (3,), count=count)
    assert (found.num_found, found.count.num_laws, found.conclusive, found.complete) == (4, 8, True, False)
    assert list(found.laws) == ["for i in 0..3: ‖0.weight[i, :]‖² + 0.bias[i]² − ‖2.weight[:, i]‖²"]
    assert found.check.max_residual <= 1e-8
    assert found.message == "found 4 of N = 8: the search stopped at its time limit of 1 s (seconds=1) before it " \
        "found the other 4"
    assert found.to_dict()["stopped"] == found.stopped


def test_a_stage_stopped_midway_keeps_the_laws_it_moved_too(monkeypatch) -> None:
    """Hidden layers of 16 ReLU units, searched per unit slice: the stop comes inside that stage, after one layer's
    first unit was solved and its law moved to the 15 others; all 16 are kept, the other layer's are not found."""
    monkeypatch.setattr(find_laws_module, "SQUARES_FIRST", 0)  # the unit slices' stage, not the squares tried first
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2)).double()
    count = count_laws(model, (3,))
    stop_after_blocks(monkeypatch, 5)
    found = find_laws(model, (3,), count=count)
    assert (found.num_found, found.count.num_laws, found.conclusive, found.complete) == (16, 32, True, False)
    assert list(found.laws) == ["for i in 0..15: ‖2.weight[i, :]‖² + 2.bias[i]² − ‖4.weight[:, i]‖²"]


def test_a_monitor_watches_the_laws_a_stopped_search_found(monkeypatch, capsys) -> None:
    stop_after_blocks(monkeypatch, 1)
    monitor = Monitor(deeper_mlp(), input_shape=(3,))
    (part,) = monitor.own.parts
    assert len(monitor.own.laws) == 1 and part.outcome.startswith("found 4 of N = 8: the search stopped")
    assert "own_laws' seconds= (Monitor's search_seconds=) gives it longer" in capsys.readouterr().out
    assert [group.key for group in monitor.groups] == ["found"]


def test_an_inner_limit_never_extends_an_outer_one() -> None:
    with time_limit(0.0), time_limit(600.0), pytest.raises(OutOfTime, match="of 0 s"):
        check_time()
    with time_limit(600.0), time_limit(0.0), pytest.raises(OutOfTime, match="of 0 s"):
        check_time()
    with time_limit(600.0):
        check_time()  # within its limit: nothing


def test_a_negative_or_nan_limit_is_refused() -> None:
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="seconds must be a number ≥ 0"), time_limit(bad):
            pass


def test_a_part_stopped_mid_search_is_listed_as_not_searched_in_full(monkeypatch) -> None:
    """The search of a part starts, then runs past the seconds: the part says so, and no law of it is watched."""
    real = own_laws_module.find_laws
    monkeypatch.setattr(own_laws_module, "find_laws", lambda *a, **k: real(*a, **{**k, "seconds": 0.0}))
    (part,) = own_laws(mlp(), input_shape=(3,)).parts
    assert part.outcome == STOPPED and not part.laws
    assert "find_laws(part, input_shape) finds its laws without a limit" in str(part)


def test_a_long_wait_is_said_once_and_a_short_one_not(capsys) -> None:
    with said_if_long("still at it", after=0.0):
        time.sleep(0.2)
    with said_if_long("never said", after=60.0):
        pass
    assert capsys.readouterr().err == "still at it\n"


def test_a_monitor_takes_the_seconds_of_its_search() -> None:
    """search_seconds=0: no part is searched, so a model with no registered block has no law to watch, and says why."""
    with pytest.raises(ValueError, match="no conservation law to watch") as refused:
        Monitor(mlp(), input_shape=(3,), search_seconds=0.0)
    assert SPENT in str(refused.value)
    assert Monitor(mlp(), input_shape=(3,), search_seconds=600.0).own.laws  # within it: the 4 unit laws, found
