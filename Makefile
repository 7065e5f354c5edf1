# trajforge — `make run` runs the end-to-end job on the embedded CPU model; `make test` runs
# the whole test suite. Both create .venv and install what they need on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-12)
ARGS   ?=
PYTEST_ARGS ?=

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_LOGGING_LEVEL ?= WARNING
export HF_HUB_OFFLINE ?= 1

.PHONY: run test install model lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[local,train,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

model: install
	$(VENV)/bin/trajforge prepare-model

run: model
	$(VENV)/bin/trajforge run $(ARGS)

test: model
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf out .pytest_cache .ruff_cache
