"""WebRTC transport (aiortc): transport.py for timing, media.py for RTP, peer.py for ICE."""

from rig.transports.webrtc.signalling import get_signalling
from rig.transports.webrtc.transport import WebRtcTransport, target_host

__all__ = ["WebRtcTransport", "get_signalling", "target_host"]
