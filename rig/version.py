"""The one version string, on the ground floor: pyproject.toml reads it (setuptools dynamic
version), and `rig --version`, the run manifest, OpenTelemetry and the Pipecat client
metadata print it. Importing it pulls in nothing else of rig."""

__version__ = "0.1.0"
