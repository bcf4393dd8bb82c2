# Inherit this to turn the guard on:
#     _base_ = ['mmdet3d::...your config...', 'path/to/configs/_base_/ddp_guard.py']
# GuardedDDP decides how to treat unused parameters (see its docstring). The report hook is
# not here: a base that sets `custom_hooks` collides with a config whose own bases set it
# (MMEngine refuses a key two bases set), so write
# `custom_hooks = [dict(type='UnusedParamsHook', interval=50)]` in your own config. A
# top-level `find_unused_parameters = ...` that your config inherits is honoured by
# GuardedDDP; to let GuardedDDP choose, write `find_unused_parameters = 'auto'` in your own
# config (a leaf line overrides the inherited value).
custom_imports = dict(imports=['mmdet3d_ddp_guard'], allow_failed_imports=False)
model_wrapper_cfg = dict(type='GuardedDDP')
