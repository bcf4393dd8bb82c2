# mmdet3d_0x_branch_guarded.py with mmdet3d 0.x's NaiveSyncBatchNorm2d in the refiner that only
# rank 0 runs (tests/openmmlab1/sync_bn_branch_detector.py), and a short stall timeout.
_base_ = ['./mmdet3d_0x_branch_guarded.py']
custom_imports = dict(imports=['tests.openmmlab1.sync_bn_branch_detector', 'mmdet3d_ddp_guard'],
                      allow_failed_imports=False)
model = dict(type='SyncBNBranchRetinaNet')
ddp_guard = dict(stall_timeout=3.0)
