"""Test-only machinery of the daemon and the worker, for tests/jepsen_like.

Everything here is off unless the process runs in test mode (SCHEDD_TEST_MODE=1, and for a node
`test_mode = true` in its config). Off, it costs one `is None` test per hook.
"""
