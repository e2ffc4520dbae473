"""Analysis after (or beside) a run: timing metrics, statistics, run reports.

Nothing here runs inside the audio loop: these are pure functions over arrays and records
(`timing`, `stats`) and readers of a finished or partial run directory (`rollout`,
`aggregate`).
"""
