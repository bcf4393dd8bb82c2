#!/usr/bin/env bash
# The three ways MMEngine arrives without the `mmengine` distribution (issue 60), each in a
# folder of its own under VENV/forms, which tests/mmengine_forms puts first on PYTHONPATH:
#   lite/    mmengine-lite 0.10.7 (the same module without its heavy extras), with its dist-info
#   onedl/   onedl-mmengine 0.10.12 (the fork released after MMEngine's last release)
#   source/  MMEngine 0.10.7's package folder alone, no dist-info: a source tree or vendored copy
# Their runtime dependencies are the leg's stack. Usage: tools/mmengine_forms.sh VENV
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$1
forms="$venv/forms"
stamp=$(sha256sum tools/mmengine_forms.sh | cut -c1-16)
if [ "$(cat "$forms/.stamp" 2>/dev/null)" = "$stamp" ]; then exit 0; fi
rm -rf "$forms"
mkdir -p "$forms"
pip="$venv/bin/python -m pip --disable-pip-version-check"
$pip install -q --no-compile --no-deps --target "$forms/lite" mmengine-lite==0.10.7
$pip install -q --no-compile --no-deps --target "$forms/onedl" onedl-mmengine==0.10.12
wheels=$(mktemp -d)
$pip download -q --no-deps -d "$wheels" mmengine==0.10.7
mkdir "$forms/source"
"$venv/bin/python" -m zipfile -e "$wheels"/mmengine-0.10.7-*.whl "$forms/source"
rm -rf "$forms/source"/mmengine-*.dist-info "$wheels"
echo "$stamp" >"$forms/.stamp"
