"""Ports of the daemon: the small interfaces its shell is given (clock, metrics, fault hooks),
each with the default production uses and the fakes tests use (fakes.py), and the typed view of
the call context grpc hands a servicer (rpc.py).

This package sits below every other schedd package and imports none of them, so any layer may
take a port without pulling in another layer."""
