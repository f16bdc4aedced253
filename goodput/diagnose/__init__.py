"""Stage 2 of the loop, **attribute**: what failed, and who is to blame.

`signatures` is the catalogue of known failure lines (data in `signatures/data/*.toml`) and its
linear-time matcher; `classify` turns a log into a verdict (also offline: `goodput classify`);
`attribution` weighs all the anomalies of one incident, root causes over knock-on effects, and
names the culprit nodes, GPUs or ranks, or the application, in which case no hardware is blamed.
Pure functions over models; diagnosis never acts and never imports `goodput.recover`.
"""
