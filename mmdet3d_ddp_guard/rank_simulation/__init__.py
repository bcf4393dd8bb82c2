"""``check --world-size N``: N ranks of DDP simulated in one process, and its report.
:mod:`.config_framework` tells which framework a config is written for; :mod:`.simulated_ranks`
runs the ranks the same way for both frameworks; :mod:`.mmengine_ranks` and :mod:`.mmcv1_ranks`
(its loaders per rank in :mod:`.mmcv1_loaders`) build a config's model, optimizer and data each
its framework's way; :mod:`.ddp_prediction` says what plain DDP would do and
:mod:`.check_report` is the text ``check`` prints; layers with a collective in their forward
are read by :mod:`..guard.forward_collectives`."""
