"""The OpenMMLab 1.x tests need mmcv-full 1.x and mmdet 2.x: they run in the version matrix's
``openmmlab1`` leg (tools/version_matrix.sh), and are not collected where MMEngine's stack
is installed instead (it has mmcv 2.x, without ``mmcv.parallel``)."""
from mmdet3d_ddp_guard.environment.frameworks import installed_frameworks

HERE_RUNS = 'mmcv-full' in installed_frameworks()
collect_ignore_glob = [] if HERE_RUNS else ['*']


def pytest_report_header(config):
    if not HERE_RUNS:
        return ('tests/openmmlab1: not collected (no mmcv-full 1.x here); '
                '`bash tools/version_matrix.sh openmmlab1` runs them')
    return None
