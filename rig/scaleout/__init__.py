"""Scale-out: shard run directories merged into one run (`merge`), and the fleet on Ray
(`ray_engine`). The shard assignment itself is sans-I/O in rig.shard. docs/scale-out.md.
"""
