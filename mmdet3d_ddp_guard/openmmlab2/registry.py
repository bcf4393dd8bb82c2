"""MMEngine registries of the ``mmdet3d_ddp_guard`` scope.

A config that inherits ``mmdet3d_ddp_guard::_base_/ddp_guard.py`` gets its dicts tagged
``_scope_='mmdet3d_ddp_guard'`` by MMEngine, which then imports this module (and so this
package, registering everything) and builds from these registries. They are children of
MMEngine's root registries, where the classes themselves are registered (``Runner.wrap_model``
looks a wrapper up in the root only), and a child finds what its parent holds.
"""
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import Registry

MODEL_WRAPPERS = Registry('model_wrapper', parent=MMENGINE_MODEL_WRAPPERS,
                          scope='mmdet3d_ddp_guard')
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope='mmdet3d_ddp_guard')
