"""The impairment relay (`--impair`): a TCP relay in its own process between the rig and a
target, applying rig.net.impair's link models per direction. `TcpRelay` is the handle."""
