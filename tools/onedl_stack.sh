#!/usr/bin/env bash
# The OneDL stack beside the guard (issue 60, item 4): onedl-mmengine 0.10.12, onedl-mmcv 2.3.6
# compiled with its CPU ops, onedl-mmdetection 3.5.1 and mmdet3d 1.4.0, on torch 2.13 and
# Python 3.11, in VENV (default .venvs/onedl; not in CI: the compile takes 10 to 20 minutes on 2
# cores). Then: what imports, the guard's --version, the README's lines through MMEngine's
# Runner (tests/mmengine_forms/form_runs.py) and mmdet's RetinaNet under the guard
# (tests/mmengine_forms/onedl_detector.py). Figures: docs/compatibility.md.
# Usage: tools/onedl_stack.sh [VENV]
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venvs/onedl}
pip="$venv/bin/python -m pip --disable-pip-version-check"
if [ ! -x "$venv/bin/python" ]; then
  python3.11 -m venv "$venv"
  $pip install -q torch==2.13.0 numpy==1.26.4 setuptools==80.9.0 wheel ninja
  $pip install -q onedl-mmengine==0.10.12 opencv-python-headless
  MMCV_WITH_OPS=1 FORCE_CUDA=0 MAX_JOBS=2 $pip install -q --no-build-isolation onedl-mmcv==2.3.6
  $pip install -q onedl-mmdetection==3.5.1
  $pip install -q --no-deps mmdet3d==1.4.0
fi
$pip install -q --no-deps --force-reinstall .
$pip list 2>/dev/null | grep -iE '^(onedl|mmdet|torch |numpy)'
for module in mmengine mmcv mmcv.ops mmdet mmdet3d; do
  if "$venv/bin/python" -c "import $module" 2>/tmp/onedl_import.err; then
    echo "import $module: ok"
  else
    echo "import $module: $(tail -1 /tmp/onedl_import.err)"
  fi
done
"$venv/bin/python" -m mmdet3d_ddp_guard --version
workdir=$(mktemp -d)
cp -r tests demo "$workdir/"
(cd "$workdir" && PYTHONPATH=$workdir "$OLDPWD/$venv/bin/python" -m tests.mmengine_forms.form_runs \
  | grep 'FORM RESULT' | cut -c1-400)
(cd "$workdir" && PYTHONPATH=$workdir "$OLDPWD/$venv/bin/python" -m tests.mmengine_forms.onedl_detector \
  | grep 'ONEDL RETINANET')
rm -rf "$workdir"
