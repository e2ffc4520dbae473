"""A run as a library object: its config (`config.RunConfig`, checked in `checks`), its
rollouts (`specs`), where it runs (`launch`: this process through `execute` and
`runner`, worker processes through `sharded`/`workers`/`worker`, an engine through
`engine`), what it shows and publishes while it streams (`livefeed`), the impairment relay
(`relays`) and `--sweep` (`sweep`). rig.cli and rig.api are its two front-ends.
docs/architecture.md.
"""
