"""``inferpool tune``: the search for the fastest serving settings within a p99 objective and a
time budget (``command``), its search space, trials, measures, ranking, confirmation and report."""
