# The tiny branch RetinaNet with the guard (tiny_retinanet_branch_guarded.py), trained by
# mmdet3d 0.x's own tools/train.py (its train_model, then mmdet's train_detector):
# tests/openmmlab1/test_mmdet3d_0x.py.
_base_ = ['./tiny_retinanet_branch_guarded.py']
# mmdet3d 0.x's tools/train.py does not set cfg.device, which mmdet >= 2.25's train_detector
# reads (build_ddp); mmdet 2.x's own tools/train.py sets it to get_device().
device = 'cpu'
