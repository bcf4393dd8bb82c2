"""What :class:`UnusedParamsHook` logs, writes and reads back, for both frameworks: the
hooks' options and start (:mod:`.report_options`), the log messages, per-iteration lines and
checkpointed counts (:mod:`.report`), the per-iteration file, written and read back
(:mod:`.history_file`), and the summary (:mod:`.summary`) with its verdict, the setting that
fits (:mod:`.recommended_setting`). Torch and the standard library
only."""
