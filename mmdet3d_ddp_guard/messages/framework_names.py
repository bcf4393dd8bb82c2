"""The names of the two frameworks the guard adapts to: the keys the package tells them by
(one per adapter: openmmlab2, openmmlab1) and the words a message names them with.

It imports nothing of the package, so that both the messages and the environment (which
finds out which framework is installed) read the names from here, one way.
"""
#: The frameworks, one per adapter: MMEngine (openmmlab2) and mmcv-full 1.x (openmmlab1).
MMENGINE, MMCV1 = 'mmengine', 'mmcv-full'

#: The frameworks as a message names them to a user.
FRAMEWORK_NAMES = {MMENGINE: 'MMEngine (OpenMMLab 2.x)',
                   MMCV1: 'mmcv-full 1.x (OpenMMLab 1.x: mmdet 2.x, mmdet3d 0.x)'}
