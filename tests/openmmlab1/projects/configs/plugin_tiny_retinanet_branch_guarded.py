# The plugin codebase's config with the one line a user adds (and nothing else).
_base_ = ['./plugin_tiny_retinanet_branch.py']
custom_imports = dict(imports=['mmdet3d_ddp_guard'], allow_failed_imports=False)
