# A BEV-shaped config (plugin=True, plugin_dir, and a seed written, which no 1.x train script
# reads: they set cfg.seed from their --seed) whose plugin has no build_dataloader of its own,
# so that its training builds the loader with mmdet's. Without data.train_dataloader: mmdet
# 2.14's train_detector reads none (and passes no shuffle), so shuffle is build_dataloader's
# default, True.
_base_ = ['../../configs/tiny_retinanet_branch.py']
plugin = True
plugin_dir = 'tests/openmmlab1/projects/lean_plugin/'
seed = 5
data = dict(train_dataloader=dict(_delete_=True))
