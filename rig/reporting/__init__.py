"""Reporting: summaries, labels and plots of finished runs."""
