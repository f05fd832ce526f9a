# The two commands a newcomer runs (README): `make setup demo` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install setup demo test test-slow

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# everything the main job needs: the environment and the real SmolLM2 target in the cache
setup: install
	$(BIN)/hedgespec prepare

demo: setup
	$(BIN)/hedgespec generate --config configs/smollm2.yaml

test: install
	$(BIN)/pytest -q

# real SmolLM2 runs, registry builds, long benchmarks
test-slow: setup
	$(BIN)/pytest -q -m slow
