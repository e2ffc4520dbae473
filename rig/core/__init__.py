"""The sans-I/O core: time comes in as an argument; no sleeping, no clock reads, no I/O.

    units.py      NS_PER_S, NS_PER_MS: the one definition of each
    events.py     what crosses the wire: DownAudio, DownEvent (in), ControlRequest (out)
    timeline.py   session timeline: sample <-> shared-clock time
    pacer.py      absolute uplink deadlines, lateness, stalls, fast prefill
    plan.py       the user track prepared before streaming (turns, speech bounds)
    director.py   the turn-taking script, decided frame by frame from what is heard
    placement.py  the listener's playback queue
    onset.py      system speech onsets on the playback timeline
    records.py    frozen records of what happened (chunks, events, audio, probes, marks)
    responses.py  user turn ends matched to system onsets; lateness statistics
    uplink.py     the user side of a rollout: frames out, records of what was sent
    listener.py   the rig's ears: arrivals in, records and control requests out
    log.py        the frozen session log of a rollout
    metrics.py    metrics.json as one pure function of the log and the outcome

Tests drive every piece with plain calls (tests/core/).
"""
