"""Tiny Markdown and LaTeX (booktabs) emitters for tables of already-formatted strings."""

from __future__ import annotations

import pandas as pd

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def markdown(cells: pd.DataFrame, caption: str) -> str:
    """A GitHub Markdown table (index as the first column) under a bold caption."""
    header = [str(cells.index.name or "")] + [str(c) for c in cells.columns]
    rule = ["---"] + ["---:"] * len(cells.columns)
    lines = [f"**{caption}**", "", "| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join([str(i)] + list(row)) + " |" for i, row in zip(cells.index, cells.to_numpy(dtype=str))]
    return "\n".join(lines) + "\n"


def latex(cells: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs ``table`` environment; cells are raw LaTeX, index and headers are escaped."""
    spec = "l" + "r" * len(cells.columns)
    header = " & ".join(latex_escape(str(c)) for c in [cells.index.name or "", *cells.columns])
    body = [
        " & ".join([latex_escape(str(i))] + list(row)) + r" \\"
        for i, row in zip(cells.index, cells.to_numpy(dtype=str))
    ]
    return "\n".join(
        [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(caption)}}}", rf"\label{{{label}}}",
         rf"\begin{{tabular}}{{{spec}}}", r"\toprule", header + r" \\", r"\midrule", *body,
         r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    )
