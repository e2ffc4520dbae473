"""Run directories: crash-safe, append-only recordings and their manifest."""
