"""Test-only machinery of the daemon and the worker, for tests/jepsen_like.

Everything here is off unless the process runs in test mode (SCHEDD_TEST_MODE=1, and for a node
`test_mode = true` in its config). The daemon and `schedd worker` read the environment once at
start (hooks.configure_node / configure_worker) and pass the result in; off, that is the
do-nothing NO_FAULTS / NO_WORKER_FAULTS of the fault-hooks ports.
"""
