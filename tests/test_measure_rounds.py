"""The spread of a ratio over interleaved rounds, and the chance that rounds agree by luck."""

import pandas as pd
import pytest

from servelab.measure.rounds import chance_of_agreement, every_round_above, one_side, spread


def test_spread_gives_the_median_round_and_the_extremes():
    assert spread([3.0, 1.0, 2.0]) == {"rounds": 3, "median": 2.0, "lowest": 1.0, "highest": 3.0}
    assert spread([1.0, 2.0])["median"] == 1.5
    with pytest.raises(ValueError, match="at least one round's value, got none"):
        spread([])


def test_one_side_of_the_threshold():
    assert one_side([0.9, 0.8]) == "below" and one_side(pd.Series([1.2, 1.01])) == "above"
    assert one_side([0.9, 1.1]) == "both sides" and one_side([1.0, 1.2]) == "both sides"
    assert one_side([]) == "both sides"  # no values: no side
    assert one_side([0.5, 0.6], threshold=0.4) == "above" and one_side([0.5], threshold=0.6) == "below"


def test_every_round_must_clear_the_threshold():
    assert every_round_above([1.2, 1.01]) and not every_round_above([1.2, 0.99]) and not every_round_above([])
    assert every_round_above([0.5], threshold=0.4)


def test_chance_that_rounds_of_no_effect_all_agree():
    assert chance_of_agreement(3) == 0.25 and chance_of_agreement(1) == 1.0
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        chance_of_agreement(0)
