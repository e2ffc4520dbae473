"""rig: a real-time audio proxy and streaming test rig for voice AI.

The rig joins a conversation with a speech system as a live participant, plays recorded
user audio into it on absolute deadlines, hears everything it says back, and stamps every
chunk in both directions on one shared monotonic clock.
"""

__version__ = "0.1.0"
