"""How often a run is looked at: young runs more often, capacity waits less often."""

from __future__ import annotations

from air_runtime._polling import young_interval


def test_a_young_run_is_looked_at_every_fifth_of_its_age_within_one_second_and_the_base():
    assert young_interval(5.0, 0.0) == 1.0
    assert young_interval(5.0, 4.0) == 1.0
    assert young_interval(5.0, 10.0) == 2.0
    assert young_interval(5.0, 25.0) == 5.0
    assert young_interval(5.0, 3600.0) == 5.0
    # A base interval under a second is kept (never slower than asked).
    assert young_interval(0.2, 0.0) == 0.2
    # A capacity wait's longer interval is reached once the run is old enough.
    assert young_interval(30.0, 100.0) == 20.0
