"""Fitting peer clocks (servers, devices) onto the shared clock: pure functions of stamps."""
