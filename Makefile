# The commands people type. `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXTRAS ?= dev,hf
comma  := ,
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
DEMO   ?= demo-out

.PHONY: install test test-all demo clean

$(STAMP): setup.cfg setup.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	bash .ci/torchvision-cpu-fix.sh $(BIN)/python  # PyPI's torchvision beside the CPU torch wheel (see the script)
	touch $@

install: $(STAMP)

# `make test` is the suite a developer runs often: every test but those marked `slow` (end-to-end sweeps on
# the tiny VLM, vLLM, SLURM, the browser, the transformers 4.x side environment). `make test-all` (and CI,
# `.ci/run`) runs them all. Wall times on 2 cores: docs/performance.md, "The test suite".
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

# The main job end to end on the embedded default: synthesise the `small` release; run the
# pixel-perceiver reference (the information ceiling of what each protocol shows) under SimpleStream,
# raw video and a text summary it writes itself, beside the tiny random-weight VLM (the real engine
# path, on the first 4 instances of each task) and the baselines; judge, reduce, print Tables 3 and 4,
# write the figures and the instance viewer, publish offline W&B runs from the records into $WANDB_DIR/apm-publish
# with the Report's specification, and print the one `wandb sync` command. Latency: 2 probes a
# task per run timed again in isolated mode after the main run (latency.sample; docs/records.md, "Latency").
DEMO_ENV := APM_CACHE_DIR=$(DEMO)/cache APM_TINY_MODEL=$(DEMO)/tiny-qwen2vl WANDB_DIR=$(DEMO) WANDB_SILENT=true
DEMO_RUN := $(DEMO_ENV) $(BIN)/apm-run -m dataset.root=$(DEMO)/release output_root=$(DEMO)/runs logging.progress=false \
  logging.wandb.mode=disabled latency.sample=2
DEMO_SUMMARY := memory=text_summary memory.max_tokens=160 +backbone@writer=perceiver
demo: $(STAMP)
	rm -rf $(DEMO)
	$(BIN)/apm-data synth --out $(DEMO)/release --scale small --seed 0
	$(BIN)/apm-data validate $(DEMO)/release
	$(BIN)/apm-data stats $(DEMO)/release
	$(BIN)/python -m apm.testing.tiny_models $(DEMO)/tiny-qwen2vl
	$(DEMO_RUN) memory=none,raw_video backbone=perceiver
	$(DEMO_RUN) $(DEMO_SUMMARY) backbone=perceiver
	$(DEMO_RUN) memory=none backbone=random,always_silent,oracle
	$(DEMO_RUN) memory=none,raw_video backbone=tiny_qwen2vl_hf dataset.limit=52 generation.max_tokens=24
	$(DEMO_RUN) $(DEMO_SUMMARY) backbone=tiny_qwen2vl_hf dataset.limit=52 generation.max_tokens=24
	$(BIN)/apm-judge $(DEMO)/runs/*/*/* judge=gate_only
	$(BIN)/apm-reduce $(DEMO)/runs/*/*/* --out $(DEMO)/report
	$(DEMO_ENV) $(BIN)/apm-publish $(DEMO)/runs --mode offline --report > $(DEMO)/publish.log 2> $(DEMO)/publish.err \
	  || { cat $(DEMO)/publish.err; exit 1; }
	$(BIN)/apm-view $(DEMO)/runs --out $(DEMO)/site
	@cat $(DEMO)/report/tables/table3.md; echo; cat $(DEMO)/report/tables/table4.md
	@echo; echo "figures: $(DEMO)/report/figures  scores: $(DEMO)/report/scores.csv"
	@echo "viewer: $(DEMO)/site/index.html  W&B runs (offline, every one in $(DEMO)/apm-publish; listed in $(DEMO)/publish.log)"
	@echo "W&B Report (Tables 3-4, Figure 2) specification: $(DEMO)/apm-publish/report.json; upload the runs with:"
	@sed -n 's/.*upload with: //p' $(DEMO)/publish.err

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
