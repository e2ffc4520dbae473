"""Fitting a peer's clock (a server's, a device's) onto the shared clock, from stamps alone.

    mapping.py   the fitted line (offset, drift, their errors) or the refusal to give one
    envelope.py  LP lower/upper envelopes of a point cloud
    fit.py       one-way fits (downlink, uplink) and their two-way combination
    ntp.py       four-timestamp exchanges: per-exchange offset and delay
    rtt.py       round-trip statistics
    steps.py     where a peer clock jumped, and the one stepped fit (split_fit)

Pure functions of integer-ns stamps (docs/clock-fit.md).
"""
