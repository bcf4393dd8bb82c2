"""``check --world-size N``: N ranks of DDP simulated in one process, and its report.
:mod:`.simulated_ranks` runs the ranks the same way for both frameworks; :mod:`.mmengine_ranks`
and :mod:`.mmcv1_ranks` build a config's model, optimizer and data each its framework's way;
:mod:`.ddp_prediction` says what plain DDP would do; layers with a collective in their forward
are read by :mod:`..guard.forward_collectives`."""
