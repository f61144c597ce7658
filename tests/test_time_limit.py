"""A limit on a count's and a search's seconds (time_limit.py): they stop and say so, a monitor starts anyway."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

import conslaw_lite.own_laws as own_laws_module
from conslaw_lite.counting import count_laws
from conslaw_lite.find_laws import find_laws
from conslaw_lite.monitor import Monitor
from conslaw_lite.own_laws import SPENT, STOPPED, own_laws
from conslaw_lite.time_limit import OutOfTime, check_time, said_if_long, time_limit

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()


def test_a_count_past_its_seconds_stops_with_out_of_time() -> None:
    with pytest.raises(OutOfTime, match=r"stopped at its time limit of 0 s \(seconds=0\)"):
        count_laws(mlp(), (3,), seconds=0.0)
    assert count_laws(mlp(), (3,), seconds=600.0).num_laws == 4  # a limit it keeps changes nothing


def test_a_search_past_its_seconds_stops_with_out_of_time() -> None:
    count = count_laws(mlp(), (3,))
    with pytest.raises(OutOfTime):  # the count given: the search's own steps check the clock
        find_laws(mlp(), (3,), count=count, seconds=0.0)
    assert isinstance(OutOfTime("x"), TimeoutError)


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
