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
# # APM-Bench analysis
#
# Reads `scores.csv` (written by `apm-reduce RUN_DIR... --out OUT`) and the runs' records, draws the
# paper's figures, drills into one task and shows the failing instances with their outputs and
# frames. By default it reads `make demo`'s output (`demo-out/runs` and `demo-out/report`, from the
# checkout's root or from `notebooks/`); set `APM_RUNS` (run dirs, `:`-separated), `APM_REDUCE_OUT`
# (the `--out` folder) and `APM_TASK` (a task code) before running, or edit the cell below.

# %%
# %matplotlib inline
import os
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

from apm.reduce import figures, load_runs, read_scores, render, tables
from apm.reduce.units import candidate_units

DEMO = next((p for p in (Path("demo-out"), Path("..") / "demo-out") if p.is_dir()), Path("demo-out"))
RUNS = [Path(p) for p in os.environ.get("APM_RUNS", str(DEMO / "runs")).split(":")]
OUT = Path(os.environ.get("APM_REDUCE_OUT", DEMO / "report"))
TASK = os.environ.get("APM_TASK", "ERA")
pd.set_option("display.max_colwidth", 120)

# %% [markdown]
# ## Scores and the paper's tables

# %%
scores = read_scores(OUT / "scores.csv")
for spec in tables.TABLES[:2]:
    values = tables.numeric(spec, scores)
    display(Markdown(render.markdown(tables.formatted(spec, values, latex=False), spec.caption)))

# %% [markdown]
# ## Figures 2 and 7–8

# %%
display(figures.tradeoff_figure(scores))

# %%
display(figures.radar_figure(scores))

# %% [markdown]
# ## One task in detail: score with its interval, and per-candidate scores

# %%
task_rows = scores[(scores["task"] == TASK)].pivot_table(
    index=["memory", "backbone"], columns="metric", values="value", aggfunc="last"
)
display(task_rows)

runs = load_runs(RUNS, detail=True)
units = candidate_units(runs.records, runs.judgements)
per_candidate = units.xs(TASK, level="task")[["score", "scored", "pos_n", "neg_n", "judge_fail"]]
display(per_candidate.sort_values("score").head(20))

# %% [markdown]
# ## Failing instances: what the model saw and said
#
# An instance fails when its MCQA answer is wrong, its adaptive gate fails, its output could not be
# parsed, or the backbone errored. `frames` lists the (session, offset, wall-clock) of every frame
# the instance was shown.

# %%
rec = runs.records[runs.records["task"] == TASK]
failing = rec[
    (rec["correct"] == False)  # noqa: E712 (nullable boolean)
    | (rec["gate_pass"] == False)  # noqa: E712
    | (rec["parse_status"] == "failed")
    | rec["error"].notna()
]
columns = ["key", "memory", "polarity", "probe_time", "decision", "answer", "correct_option", "parse_status",
           "parse_error", "error", "output"]
display(failing[columns].head(20))

# %%
for _, r in failing.head(3).iterrows():
    display(Markdown(f"**{r['key']}** ({r['memory']}, probe at {r['probe_time']}): `{r['output']}`"))
    display(pd.DataFrame(r["frames"]))
