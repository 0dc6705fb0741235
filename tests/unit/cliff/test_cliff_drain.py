"""wait_drained with a fake clock: no real sleeping."""

from __future__ import annotations

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import drain


class FakeClock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def counters_moving_until(clock, until_s, start=1000.0):
    """Store counter grows by 7 per second of fake time until ``until_s`` after start, then stays."""

    def read():
        elapsed = min(clock.now - start, until_s)
        return {"lmcache_mp_l2_store_completed_objects_chunks_total": float(int(elapsed) * 7)}

    return read


def test_stops_early_once_counters_settle():
    fc = FakeClock()
    result = drain.wait_drained(
        counters_moving_until(fc, 20), interval=2, settle=10, bound=300, clock=fc.clock, sleep=fc.sleep
    )
    drained, waited, samples = result  # a plain tuple too
    assert drained is True
    # Moving until t=20, then the same value for 10 s: done at t=30, far before the 300 s bound.
    assert waited == 30
    assert sum(fc.sleeps) == 30
    assert samples[-1] == (30, {"lmcache_mp_l2_store_completed_objects_chunks_total": 140.0})
    assert all(s <= 2 for s in fc.sleeps)


def test_capped_at_the_bound_when_counters_keep_moving():
    fc = FakeClock()
    result = drain.wait_drained(
        counters_moving_until(fc, 10_000), interval=7, settle=10, bound=300, clock=fc.clock, sleep=fc.sleep
    )
    assert result.drained is False
    assert result.waited_s == 300  # the last sleep is shortened to land exactly on the bound
    assert sum(fc.sleeps) == 300
    assert max(fc.sleeps) == 7


def test_default_bound_is_300_seconds():
    fc = FakeClock()
    result = drain.wait_drained(lambda: {"x": fc.now}, clock=fc.clock, sleep=fc.sleep)
    assert (result.drained, result.waited_s) == (False, 300)


def test_already_idle_counters_need_one_settle_period():
    fc = FakeClock()
    result = drain.wait_drained(
        lambda: {"a": 1.0, "b": 2.0}, interval=1, settle=3, bound=300, clock=fc.clock, sleep=fc.sleep
    )
    assert result == (
        True,
        3,
        [(0, {"a": 1.0, "b": 2.0}), (1, {"a": 1.0, "b": 2.0}), (2, {"a": 1.0, "b": 2.0}), (3, {"a": 1.0, "b": 2.0})],
    )


def test_a_new_counter_appearing_counts_as_movement():
    # OTel drops zero-valued counters: the first store makes a new sample appear.
    fc = FakeClock()

    def read():
        return {} if fc.now < 1003 else {"lmcache_mp_l2_store_completed_objects_chunks_total": 1.0}

    result = drain.wait_drained(read, interval=1, settle=4, bound=60, clock=fc.clock, sleep=fc.sleep)
    assert (result.drained, result.waited_s) == (True, 7)


def test_read_errors_are_recorded_and_restart_the_settle_period():
    fc = FakeClock()

    def read():
        if 1002 <= fc.now < 1004:
            raise ConnectionError("scrape failed")
        return {"x": 1.0}

    result = drain.wait_drained(read, interval=1, settle=3, bound=60, clock=fc.clock, sleep=fc.sleep)
    assert result.drained is True
    assert result.waited_s == 7  # stable again from t=4, settled at t=7
    assert {"error": "ConnectionError: scrape failed"} in [v for _dummy, v in result.samples]


def test_zero_bound_samples_once():
    fc = FakeClock()
    result = drain.wait_drained(lambda: {"x": 1}, bound=0, clock=fc.clock, sleep=fc.sleep)
    assert (result.drained, result.waited_s, len(result.samples)) == (False, 0, 1)
    assert fc.sleeps == []
