"""Defect sites: which kernel statement produced a finding (docs/defects.md).

* `trace.py`: every `tl.load` / `tl.store` of a kernel run under Triton's interpreter, recorded.
* `attribute.py`: a traced run's wrong cells, stray writes and stray reads, each with its statement;
  the first access outside every tensor (a crash's site).
* `static.py`: the `tl.store` statements of a kernel's source that write through one parameter.
* `run.py`: one case attributed, in this process or in a subprocess of its own with a timeout.
* `site.py`: the site record a saved case's `meta["site"]` holds, and `site_line`.
* `choose.py`: which of a case's sites a finding of a given kind stands on.
* `defects.py`: findings with one site are one defect (the grouping rule, roots at loads, inputs).
"""

from .site import Site, site_line, site_of

__all__ = ["Site", "site_line", "site_of"]
