"""Clocks: the shared monotonic clock, a fake one for tests, and (in `fit`) the fitting of
other clocks (servers, devices) onto it."""

from rig.clock.base import NS_PER_MS, NS_PER_S, Clock, FakeClock, MonotonicClock

__all__ = ["NS_PER_MS", "NS_PER_S", "Clock", "FakeClock", "MonotonicClock"]
