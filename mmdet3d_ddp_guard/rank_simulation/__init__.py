"""``check --world-size N``: N ranks of DDP simulated in one process, and its report, without
a framework. :mod:`.config_framework` tells which framework a config is written for;
:mod:`.simulated_ranks` runs the ranks the same way for both frameworks, driven by each
adapter's ``rank_simulation`` module (:mod:`..openmmlab2.rank_simulation`,
:mod:`..openmmlab1.rank_simulation`), which builds a config's model, optimizer and data its
framework's way; :mod:`.forward_collective_counts` counts each rank's calls of the layers
with a collective in their forward (found by :mod:`..guard.forward_collectives`);
:mod:`.ddp_prediction` says what plain DDP would do and :mod:`.check_report` is the text
``check`` prints."""
