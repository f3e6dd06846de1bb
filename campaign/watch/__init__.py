"""`spec-ab watch`: the control arm of many nights, per lane, watched for lasting changes.

- `nights`: run folders (or parents holding them) → verified nights, each a small summary
  of its control's values (the medians over its valid passes); a failing night is named;
- `cache`: those summaries kept by the content of every file `verify` reads;
- `series`: nights → one series per lane, metric and decision cell, in registered order;
- `detect`: change points (ruptures' binary segmentation, each tested by Welch's
  t-test) and one-night outliers;
- `watching`: the whole watch: the changes, those for the worse among the newest nights
  (exit 1), the advice;
- `text`: table, Markdown and JSON; `figures`: one matplotlib plot per series, and HTML.
"""
