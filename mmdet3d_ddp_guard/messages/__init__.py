"""The user's words, both ways: the frameworks' names (:mod:`.framework_names`), the config
lines a fix names, in the user's framework (:mod:`.config_lines`), what the user asked for
unused parameters, read from what they wrote (:mod:`.mode_request`), what plain DDP does with
an iteration (:mod:`.ddp_outcome`), and the evidence a revised decision shows
(:mod:`.decision_evidence`). It reads nothing of the package outside this folder."""
