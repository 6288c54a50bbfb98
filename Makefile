# The commands people type. `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXTRAS ?= dev,hf
comma  := ,
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
DEMO   ?= demo-out

.PHONY: install test demo clean

$(STAMP): setup.cfg setup.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	bash .ci/torchvision-cpu-fix.sh $(BIN)/python  # PyPI's torchvision beside the CPU torch wheel (see the script)
	touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The main job end to end on the embedded default: synthesise the `small` release, sweep
# memory x backbone, judge, reduce, print Tables 3 and 4 and write the figures.
DEMO_ENV := APM_CACHE_DIR=$(DEMO)/cache APM_TINY_MODEL=$(DEMO)/tiny-qwen2vl WANDB_DIR=$(DEMO) WANDB_SILENT=true
demo: $(STAMP)
	rm -rf $(DEMO)
	$(BIN)/apm-data synth --out $(DEMO)/release --scale small --seed 0
	$(BIN)/apm-data validate $(DEMO)/release
	$(BIN)/apm-data stats $(DEMO)/release
	$(BIN)/python -m apm.testing.tiny_models $(DEMO)/tiny-qwen2vl
	$(DEMO_ENV) $(BIN)/apm-run -m dataset.root=$(DEMO)/release output_root=$(DEMO)/runs \
	  memory=none,raw_video backbone=random,always_silent,oracle,tiny_qwen2vl_hf \
	  generation.max_tokens=24 logging.progress=false
	$(DEMO_ENV) $(BIN)/apm-run -m dataset.root=$(DEMO)/release output_root=$(DEMO)/runs \
	  memory=text_summary memory.max_tokens=96 +backbone@writer=tiny_qwen2vl_hf \
	  backbone=random,always_silent,oracle,tiny_qwen2vl_hf generation.max_tokens=24 logging.progress=false
	$(BIN)/apm-judge $(DEMO)/runs/*/*/* judge=gate_only
	$(BIN)/apm-reduce $(DEMO)/runs/*/*/* --out $(DEMO)/report
	@cat $(DEMO)/report/tables/table3.md; echo; cat $(DEMO)/report/tables/table4.md
	@echo; echo "figures: $(DEMO)/report/figures  scores: $(DEMO)/report/scores.csv  W&B (offline): $(DEMO)/runs/*/*/*/wandb"

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
