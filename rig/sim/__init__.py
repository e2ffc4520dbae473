"""The reference system: a voice system with ground-truth knobs (`rig sim`)."""
