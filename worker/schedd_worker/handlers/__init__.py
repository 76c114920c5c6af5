"""The handler kinds a worker runs, one module each behind one interface (`base.Handler`):
shell, http, python, sensor. `schedd_worker.executors.execute` dispatches to them."""
