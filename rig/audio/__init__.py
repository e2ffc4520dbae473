"""Audio sources and PCM helpers."""
