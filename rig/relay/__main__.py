"""`python -m rig.relay ...`: the relay process (rig.relay.process.main)."""

import sys

from rig.relay.process import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
