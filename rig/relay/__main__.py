"""`python -m rig.relay ...`: the TCP relay process (rig.relay.process.main), or with a first
argument `udp` the UDP media relay (rig.relay.udpprocess.main)."""

import sys

from rig.relay.process import main
from rig.relay.udpprocess import main as udp_main

if __name__ == "__main__":
    if sys.argv[1:2] == ["udp"]:
        sys.exit(udp_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
