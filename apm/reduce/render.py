"""Tiny Markdown and LaTeX (booktabs) emitters for tables of already-formatted strings."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "✓": r"\checkmark{}", "✗": r"$\times$", "–": "--", "−": "$-$", "†": r"$^\dagger$", "‡": r"$^\ddagger$",
    "×": r"$\times$", "≥": r"$\geq$", "≤": r"$\leq$",
}


def latex_escape(text: str) -> str:
    r"""Escape LaTeX's special characters in plain text, and write the symbols the tables use (✓, ✗, –, †, ‡)
    as LaTeX (``amssymb``'s ``\checkmark``), which pdfLaTeX cannot typeset raw."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _blocks(
    rows: list[str], headings: Sequence[str] | None, heading_rows: Callable[[str, bool], list[str]]
) -> list[str]:
    """``rows`` with ``heading_rows(h, first)`` inserted before each row whose heading ``h`` differs
    from the row before's (nothing without ``headings``)."""
    if headings is None:
        return rows
    out: list[str] = []
    current = None
    for row, heading in zip(rows, headings):
        if heading != current:
            out += heading_rows(heading, current is None)
            current = heading
        out.append(row)
    return out


def markdown(cells: pd.DataFrame, caption: str, headings: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table (index as the first column) under a bold caption; with ``headings``
    (one per row), a bold heading row above each block of rows sharing one."""
    header = [str(cells.index.name or "")] + [str(c) for c in cells.columns]
    rule = ["---"] + ["---:"] * len(cells.columns)
    lines = [f"**{caption}**", "", "| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    rows = ["| " + " | ".join([str(i)] + list(row)) + " |" for i, row in zip(cells.index, cells.to_numpy(dtype=str))]
    blank = " |" * len(cells.columns)
    lines += _blocks(rows, headings, lambda h, _: [f"| **{h}** |{blank}"])
    return "\n".join(lines) + "\n"


def latex(cells: pd.DataFrame, caption: str, label: str, headings: Sequence[str] | None = None,
          source: str = "") -> str:
    r"""A booktabs ``table`` environment; cells are raw LaTeX, caption, index and headers are escaped; with
    ``headings`` (one per row), an italic heading spanning the table above each block of rows; ``source``
    (which table of the paper it is) a comment above it, as ``\caption`` numbers the table itself."""
    spec = "l" + "r" * len(cells.columns)
    header = " & ".join(latex_escape(str(c)) for c in [cells.index.name or "", *cells.columns])
    rows = [
        " & ".join([latex_escape(str(i))] + list(row)) + r" \\"
        for i, row in zip(cells.index, cells.to_numpy(dtype=str))
    ]
    span = len(cells.columns) + 1

    def heading_rows(heading: str, first: bool) -> list[str]:
        spanning = rf"\multicolumn{{{span}}}{{l}}{{\textit{{{latex_escape(heading)}}}}} \\"
        return ([] if first else [r"\midrule"]) + [spanning]

    body = _blocks(rows, headings, heading_rows)
    return "\n".join(
        [*([f"% {source}"] if source else []), r"\begin{table}[t]", r"\centering",
         rf"\caption{{{latex_escape(caption)}}}", rf"\label{{{label}}}",
         rf"\begin{{tabular}}{{{spec}}}", r"\toprule", header + r" \\", r"\midrule", *body,
         r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    )
