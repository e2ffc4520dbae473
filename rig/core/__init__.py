"""The sans-I/O core: time comes in as an argument; no sleeping, no clock reads, no I/O."""
