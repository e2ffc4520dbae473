"""The room: the system's own echo in what it hears, and the rig's own echo removed from what
the rig hears (docs/devices.md, docs/metrics.md).

`spec` reads `--echo erl_db=20,delay_ms=40[,rir=FILE|room=small]`; `convolve` is the
uniformly partitioned FFT convolution the echo path runs frame by frame; `resample` reads the
playback track at the uplink rate; `rir` loads or builds a room impulse response; `path` is the
uplink frame hook that adds the echo; `canceller` removes the rig's own playback from a sound
card's capture after the fact and `livecancel` as it arrives (SpeexDSP). Sans-I/O except
`rir` (reads a file, runs pyroomacoustics), which the session calls off the event loop.
"""
