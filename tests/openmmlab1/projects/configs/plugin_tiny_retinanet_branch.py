# The plugin codebase's config: the tiny branch RetinaNet of tests/openmmlab1/configs, with
# the codebases' plugin keys (read by projects/train.py --plugin-after-config).
_base_ = ['../../configs/tiny_retinanet_branch.py']
plugin = True
plugin_dir = 'tests/openmmlab1/projects/mmdet3d_plugin/'
