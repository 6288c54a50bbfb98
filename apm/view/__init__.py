"""``apm-view``: a static, offline HTML page showing per instance what each method was shown and said.

:mod:`collect` reads run dirs (records, judgements, scores via :mod:`apm.reduce`, prompt fields via
:mod:`apm.data`, the prompts sent via :mod:`apm.records.prompts`) into plain JSON; :mod:`thumbs` cuts
thumbnails from the frame cache; :mod:`site` streams the page's chunks (assets in ``assets/``);
the command is :mod:`apm.cli.view`. Contract: ``docs/view.md``. Only the command's name and defaults
here, so its ``--help`` imports none of the modules above.
"""

PROG = "apm-view"
DEFAULT_FRAMES_PER_CELL = 8
"""Thumbnails per method cell unless ``--frames-per-cell`` says otherwise, as ``apm-publish``'s strips."""
DEFAULT_THUMB_GRID = 120
"""Seconds of the grid that a cell's thumbnails between its first and last frame lie on unless
``--thumb-grid`` says otherwise (:func:`apm.view.collect.thumbed`): a site's thumbnails are then at most
one per two minutes of each session's cached video plus the cells' first and last frames (at the
paper's scale ~3.6k grid points and ~15k ends, ~60 MB at 160 px: docs/performance.md, "Viewer")."""
