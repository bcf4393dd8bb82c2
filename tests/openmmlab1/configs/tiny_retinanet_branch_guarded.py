# The tiny branch RetinaNet with the guard: the one custom_imports line (it also names the
# test detector, which the base config imports the same way).
_base_ = ['./tiny_retinanet_branch.py']
custom_imports = dict(imports=['tests.openmmlab1.branch_detector', 'mmdet3d_ddp_guard'],
                      allow_failed_imports=False)
