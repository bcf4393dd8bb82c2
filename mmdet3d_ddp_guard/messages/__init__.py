"""The user's words, both ways: every text the guard and the stall guard show, as functions of
data, and what the user wrote, read. The frameworks' names (:mod:`.framework_names`), the
config lines a fix names, in the user's framework (:mod:`.config_lines`), what the user asked
for unused parameters (:mod:`.mode_request`), what plain DDP does with an iteration
(:mod:`.ddp_outcome`), the decision's words (:mod:`.decision_text`) and evidence
(:mod:`.decision_evidence`), parameters named (:mod:`.parameter_text`), the guard's errors
(:mod:`.guard_errors`) and build-time warnings (:mod:`.build_warnings`), a framework found
that the guard cannot serve (:mod:`.framework_found`), and the stall guard's
(:mod:`.stall_guard_text`). It reads nothing of the package outside this folder."""
