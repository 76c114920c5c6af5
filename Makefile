# The test tiers and checks by name; CONTRIBUTING.md says what each holds. Run inside the venv
# of the README (`. .venv/bin/activate`). Extra pytest arguments: `make unit ARGS="-n 0 -x"`.

PYTEST ?= pytest
ARGS ?=

.PHONY: lint type unit deep integration fault test ci

lint:           ## ruff over the whole tree
	ruff check .

type:           ## mypy over the three distributions, then --strict on the pure layers
	mypy
	mypy --strict --follow-imports=silent schedd/core schedd/replication schedd/ports schedd/settings.py

unit:           ## unit and property tests (~1 min)
	$(PYTEST) tests/unit $(ARGS)

deep:           ## the unit tier with every example of the heavy property tests (tests/support/properties.py)
	SCHEDD_DEEP_PROPERTIES=1 $(PYTEST) tests/unit $(ARGS)

integration:    ## real processes on 127.0.0.1, and the security tests (~5 min)
	$(PYTEST) tests/integration tests/security $(ARGS)

fault:          ## the fault-injection suite, smoke profile (add ARGS=--jepsen-full for all of it)
	$(PYTEST) tests/jepsen_like $(ARGS)

test:           ## the README's test command: every default tier
	$(PYTEST) $(ARGS)

ci:             ## what CI runs on a clean clone: fresh venv, generated-code check, lint, types, pytest
	.ci/run
