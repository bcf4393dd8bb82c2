# The guarded plugin config plus the guard's report hook, as a user adds it.
_base_ = ['./plugin_tiny_retinanet_branch_guarded.py']
custom_hooks = [dict(type='UnusedParamsHook', interval=2)]
