"""WebRTC transport (aiortc): see transport.py for timing, peer.py for ICE and taps."""

from rig.transports.webrtc.signalling import get_signalling
from rig.transports.webrtc.transport import WebRtcTransport, target_host

__all__ = ["WebRtcTransport", "get_signalling", "target_host"]
