"""The words every message shares: the frameworks' names (:mod:`.framework_names`), the config
lines a fix names, in the user's framework (:mod:`.config_lines`), and what plain DDP does with
an iteration (:mod:`.ddp_outcome`). It reads nothing of the package outside this folder."""
