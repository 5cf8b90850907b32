"""trm.report: what a run did, from its run directory — plots, index.html, the summary table
(:mod:`~trm.report.build`), and the leak and slowdown detectors (:mod:`~trm.report.detect`)
that the end of ``trm run`` uses too.

Importing this package imports neither matplotlib nor the plots, so the loop can use the
detectors without paying for them.
"""
