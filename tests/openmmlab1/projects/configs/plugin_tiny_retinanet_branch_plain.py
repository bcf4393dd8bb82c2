# The plugin codebase's config as plain mmcv DDP trains it: the guard imported only so that
# torchrun can start gloo ranks on a machine without CUDA, and turned off.
_base_ = ['./plugin_tiny_retinanet_branch_guarded.py']
ddp_guard = dict(enabled=False)
