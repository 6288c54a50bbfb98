"""``apm-view``: a static, offline HTML page showing per instance what each method was shown and said.

:mod:`collect` reads run dirs (records, judgements, scores via :mod:`apm.reduce`, prompt fields via
:mod:`apm.data`, the prompts sent via :mod:`apm.records.prompts`) into plain JSON; :mod:`thumbs` cuts
thumbnails from the frame cache; :mod:`site` streams the page's chunks (assets in ``assets/``);
the command is :mod:`apm.cli.view`. Contract: ``docs/view.md``.
"""

from apm.view.site import Site, build_site

__all__ = ["Site", "build_site"]
