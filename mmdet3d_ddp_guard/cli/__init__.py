"""Command-line tools: ``python -m mmdet3d_ddp_guard {check,summarize}``."""
