# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A sweep through the Python API
#
# Runs, judges and reduces a small sweep with the functions `apm-run`, `apm-judge` and `apm-reduce`
# wrap (`docs/api.md`): two memory protocols (SimpleStream and raw video) on the pixel-perceiver
# reference, over a tiny synthetic release, judged by the gate-only reference judge (no model). Each
# config is the method `apm-run` would make of it: the same run dir, config hash and table row.
# Everything goes below `APM_API_OUT` (default `api-out/`); set `APM_RELEASE` to run on a release you
# already have instead of synthesising one.

# %%
import os
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

import apm
from apm.reduce import render, tables
from apm.synth import generate

OUT = Path(os.environ.get("APM_API_OUT", "api-out"))
RELEASE = Path(os.environ.get("APM_RELEASE") or generate(OUT / "release", seed=0, scale="tiny"))
COMMON = [f"dataset.root={RELEASE}", f"output_root={OUT / 'runs'}", f"frames.cache_dir={OUT / 'cache'}",
          "backbone=perceiver", "logging.wandb.mode=disabled", "logging.progress=false"]

# %% [markdown]
# ## Run: one `apm.run` per config (the overrides `apm-run` takes)

# %%
runs = [apm.run([*COMMON, f"memory={memory}"]) for memory in ("none", "raw_video")]
display(pd.DataFrame([vars(r) for r in runs]))

# %% [markdown]
# ## Judge and reduce

# %%
judged = apm.judge_runs([r.run_dir for r in runs], "gate_only")
print(f"{judged.judge}: {judged.judged} judged, {judged.cached} already judged, {judged.failed} failed")
report = apm.reduce_runs([r.run_dir for r in runs], OUT / "report", bootstrap=200, figures=False)
print(report.scores_csv, f"{len(report.tables)} table files")

# %% [markdown]
# ## The paper's Tables 3 and 4, from the scores the reduction returned

# %%
for spec in tables.TABLES[:2]:
    values = tables.numeric(spec, report.scores)
    display(Markdown(render.markdown(tables.formatted(spec, values, latex=False), spec.caption)))
