"""Security tests for issue 10: one test per item, named for what it proves."""
