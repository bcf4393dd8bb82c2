#!/usr/bin/env bash
# mmdet3d 0.x (the generation of BEVFormer, PETR, DETR3D: mmcv-full 1.x, mmdet 2.x) into an
# openmmlab1 venv, for tests only (tests/openmmlab1/test_mmdet3d_0x.py).
#
# Its sdist lists CUDA sources for its ops with no CPU-only path (and this machine's nvcc is
# not torch's), so the install is NOT a user's install:
#   1. the sdist is downloaded (pip download, --no-binary);
#   2. its setup.py loses ext_modules and cmdclass (no compiled op is built);
#   3. each compiled extension module its ops import (11: sparse_conv_ext, iou3d_cuda,
#      voxel_layer, ...) becomes a stub module whose every function raises when called;
#   4. its spconv layers are no longer registered in mmcv's CONV_LAYERS (mmcv >= 1.4.7
#      registers its own SparseConv2d...: "KeyError: 'SparseConv2d is already registered in
#      conv layer'"); mmcv's registered ones stay, and mmdet3d's classes stay importable;
#   5. the upper bound of mmcv its __init__ asserts (1.4.0 for 0.17.1, 1.5.0 for 0.18.1) is
#      raised to the installed mmcv-full's version (1.7.2 in the leg);
#   6. it is installed with --no-deps, then the few of its dependencies that its imports need
#      (numba 0.48.0 for its `numba.errors`, with llvmlite 0.31.0; mmsegmentation 0.30.0, which
#      its train_model and build_model import; nuscenes-devkit and lyft_dataset_sdk, which its
#      datasets import at their top, without their own dependencies; ...), with
#      torch, numpy and mmcv-full held where they are.
# Its pure-Python code (apis.train_model, models, datasets, ops.norm's NaiveSyncBatchNorm,
# .mim/tools/train.py) is the release's own, unchanged.
#
# Usage: tools/mmdet3d_0x.sh VENV
#   MMDET3D_0X_VERSION: 0.17.1 by default (what BEVFormer, PETR and DETR3D pin); 0.18.1, the
#   last 0.x, installs and passes the same way (measured 2026-12-02).
# Prints the seconds of each step (about 45 s on 2 busy cores, nothing in pip's cache). Leaves
# the venv's torch, numpy, mmcv-full and mmdet as they were.
set -euo pipefail
venv=$(readlink -f "${1:?usage: tools/mmdet3d_0x.sh VENV}")
version=${MMDET3D_0X_VERSION:-0.17.1}
python="$venv/bin/python"
pip="$python -m pip --disable-pip-version-check"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step_start=$SECONDS
step() { echo "mmdet3d_0x [$((SECONDS - step_start)) s]: $*" >&2; step_start=$SECONDS; }

# What stays where it is: pip may not move these while it installs the dependencies.
"$python" - >"$work/held.txt" <<'EOF'
import importlib.metadata as md
for name in ('torch', 'numpy', 'mmcv-full', 'mmdet', 'torchvision', 'setuptools', 'matplotlib',
             'scipy'):
    try:
        print(f'{name}=={md.version(name)}')
    except md.PackageNotFoundError:
        pass
EOF

$pip download -q --no-deps --no-binary :all: "mmdet3d==$version" -d "$work"
tar xzf "$work/mmdet3d-$version.tar.gz" -C "$work"
src="$work/mmdet3d-$version"
step "downloaded and unpacked the sdist of mmdet3d $version"

"$python" - "$src" <<'EOF'
import glob
import importlib.metadata as md
import os.path as osp
import re
import sys

src = sys.argv[1]


def edit(path, old, new, count=1):
    with open(path) as f:
        text = f.read()
    if isinstance(old, re.Pattern):
        text, n = old.subn(new, text)
    else:
        n = text.count(old)
        text = text.replace(old, new)
    if n != count and count is not None:
        sys.exit(f'mmdet3d_0x: {path}: expected {count} of {old!r}, found {n}')
    with open(path, 'w') as f:
        f.write(text)
    return n


# 2. No compiled extension: ext_modules=[...] and cmdclass out of setup(...).
setup_py = osp.join(src, 'setup.py')
with open(setup_py) as f:
    text = f.read()
start = text.index('ext_modules=[')
end = text.index("cmdclass={'build_ext': BuildExtension},", start)
names = re.findall(r"name='(\w+)',\s*module='([\w.]+)'", text[start:end])
text = text[:start] + text[end + len("cmdclass={'build_ext': BuildExtension},"):]
with open(setup_py, 'w') as f:
    f.write(text)

# 3. A stub for each extension module, where its op imports it.
STUB = '''"""Stub of mmdet3d's compiled extension `{module}.{name}`: not built in this test
environment (tools/mmdet3d_0x.sh). Every function of it raises when called."""


def __getattr__(attribute):
    if attribute.startswith('__'):
        raise AttributeError(attribute)

    def not_compiled(*args, **kwargs):
        raise RuntimeError(
            "mmdet3d's {module}.{name}." + attribute + " is not compiled here "
            '(tools/mmdet3d_0x.sh installs mmdet3d 0.x without its CUDA ops)')

    return not_compiled
'''
for name, module in names:
    path = osp.join(src, *module.split('.'), name + '.py')
    with open(path, 'w') as f:
        f.write(STUB.format(module=module, name=name))
print(f'mmdet3d_0x: {len(names)} extension modules stubbed: '
      + ', '.join(name for name, _ in names), file=sys.stderr)

# 4. Its spconv layers not registered in mmcv's CONV_LAYERS (mmcv >= 1.4.7 has its own).
conv = osp.join(src, 'mmdet3d', 'ops', 'spconv', 'conv.py')
n = edit(conv, re.compile(r'^@CONV_LAYERS\.register_module\(\)\n', re.M), '', count=None)
print(f'mmdet3d_0x: {n} spconv layers left out of mmcv CONV_LAYERS', file=sys.stderr)

# 5. The asserted mmcv range up to the installed mmcv-full.
mmcv = md.version('mmcv-full')
init = osp.join(src, 'mmdet3d', '__init__.py')
edit(init, re.compile(r"^mmcv_maximum_version = '[\d.]+'$", re.M),
     f"mmcv_maximum_version = '{mmcv}'  # raised by tools/mmdet3d_0x.sh")
EOF
step "setup.py without its extensions; stubs; spconv unregistered; mmcv bound raised"

$pip install -q --no-compile --no-deps --no-build-isolation "$src"
step "built and installed mmdet3d $version (--no-deps, no compiled op)"

# 6. What its imports need (import mmdet3d.apis, .datasets, .models; tools/train.py).
# (Its data converters' scikit-image, plyfile, networkx and its tensorboard are left out: no
# module that these imports load needs them.)
$pip install -q --no-compile -c "$work/held.txt" numba==0.48.0 llvmlite==0.31.0 \
  'trimesh>=2.35.39,<2.35.40' pyquaternion 'shapely<2' prettytable scikit-learn tqdm \
  cachetools pandas
$pip install -q --no-compile --no-deps -c "$work/held.txt" mmsegmentation==0.30.0 nuscenes-devkit==1.1.11 \
  lyft_dataset_sdk==0.0.8
step "installed its runtime dependencies (numba 0.48.0, mmsegmentation 0.30.0, ...)"

"$python" -c 'import mmdet3d, mmdet3d.apis, mmdet3d.datasets, mmdet3d.models, mmdet3d.ops
print("mmdet3d_0x: import mmdet3d", mmdet3d.__version__, "works")'
step "checked"
