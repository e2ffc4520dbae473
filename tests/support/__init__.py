"""Test support code that is not a test: helpers shared by tests and runnable by hand."""
