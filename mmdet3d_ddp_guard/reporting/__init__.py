"""What :class:`UnusedParamsHook` writes and reads back, for both frameworks: the hooks' options
and start (:mod:`.report_options`), the per-iteration files (:mod:`.usage_report`), the history
they are read into (:mod:`.usage_history`) and the summary (:mod:`.usage_summary`). Torch and
the standard library only."""
