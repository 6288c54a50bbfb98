# The commands people type. `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXTRAS ?= dev,hf
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
comma  := ,
DEMO   ?= demo-out

.PHONY: install test demo clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	rm -rf $(DEMO)/release
	$(BIN)/apm-data synth --out $(DEMO)/release --scale small --seed 0
	$(BIN)/apm-data validate $(DEMO)/release
	$(BIN)/apm-data stats $(DEMO)/release

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
