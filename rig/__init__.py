"""rig: a real-time audio proxy and streaming test rig for voice AI.

The rig joins a conversation with a speech system as a live participant, plays recorded
user audio into it on absolute deadlines, hears everything it says back, and stamps every
chunk in both directions on one shared monotonic clock.

Installed as the distribution `rig-voice` (`pip install rig-voice`); the import package and
the command are `rig`.
"""

#: the one version string: pyproject.toml reads it (setuptools dynamic version), and
#: `rig --version`, the run manifest and the Pipecat client metadata print it
__version__ = "0.1.0"
