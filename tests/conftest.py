"""Shared fixtures: a real server started by this test session (never one it did not start)."""

pytest_plugins = ["lockworker.testing.plugin"]
