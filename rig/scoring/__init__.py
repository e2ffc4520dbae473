"""Scorers: behaviour judged against reference marks, over finished run directories.

A scorer is a pure function of a run directory (tracks, events, marks, words, tags) and its
parameters, re-run at will with `rig report RUN --score NAME [--score-opt K=V ...]`; its
result goes to `RUN/scores.json` (never into the recordings). One module per scorer:

  pause_turn          pause outcomes and turn-end responses (People Making Conversation)
  eot_int             end-of-turn / interruption anchor detection (TurnBench)
  interaction         scripted interaction items' pass windows (InteractionBench)
  onset_distribution  onset offsets against reference kernels, twCRPS (TACT); `compare`
                      is the Jensen-Shannon distance between two runs

`rundir` reads a run as the scorers see it, `measures` holds the metric/group shapes,
`kernels` the timing kernels and twCRPS, `registry` the names, options and scores.json,
`render` the text/HTML/JUnit views, `options` and `report` the `rig report` hooks.
This module imports nothing, so `rig --help` stays light. docs/benchmarks.md, "Scorers".
"""
