"""Analysis after (or beside) a run: nothing here runs inside the audio loop.

    latency.py   the clock fit and each response's split (uplink, model, downlink, queue)
                 from a session log
    webrtc.py    over WebRTC, the rig-local shares of a latency (jitter buffer, codec)
    activity.py  speech activity of a track (webrtcvad + energy gate)
    timing.py    two-track timing metrics (pauses, turn-taking, backchannels, interruptions)
    finish.py    the finish step: the log's analysis, then timing of the rollout's files
                 (in the runner's worker process)
    rollout.py   reading one rollout directory, tolerating a crashed one
    stats.py     robust statistics (median, IQR, bootstrap CI)
    aggregate.py many rollouts' metrics rolled up into a run report

Times come in as data (session logs, recorded files); nothing here reads a clock.
"""
