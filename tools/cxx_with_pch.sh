#!/usr/bin/env bash
# The C++ compiler that tools/make_venv.sh gives mmcv's build (torch's extension builder calls
# $CXX for every source). 63 of mmcv 2.1.0's 77 op sources start with
# #include "pytorch_cpp_helper.hpp", which pulls in all of ATen: parsing it is most of each
# source's compile. This wrapper lets gcc parse it once, into a precompiled header written
# beside the header, with the same flags as the source it was asked to compile; gcc then
# takes that .gch instead of the header for every source that includes it first. Flags differ
# or the header is missing: gcc ignores the .gch (-Winvalid-pch says so in the build log) and
# compiles as before, so the result never depends on this wrapper, only the time does.
set -euo pipefail
compiler=${DDP_GUARD_REAL_CXX:-c++}
command=("$@")
header=
pch_flags=()
# torch's ninja rule is: $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags. The header
# is compiled with everything but the dependency file, the source and the object.
while [ $# -gt 0 ]; do
  case $1 in
    -MMD) ;;
    -MF | -c | -o) shift ;;
    *)
      pch_flags+=("$1")
      case $1 in -I*/mmcv/ops/csrc/common) header=${1#-I}/pytorch_cpp_helper.hpp ;; esac
      ;;
  esac
  shift
done
if [ -n "$header" ] && [ -f "$header" ]; then
  # Two compile jobs start at once: the first writes the .gch, the other waits for it.
  exec 9>"$header.gch.lock"
  flock 9
  if [ ! -e "$header.gch" ]; then
    "$compiler" "${pch_flags[@]}" -x c++-header "$header" -o "$header.gch.partial"
    mv "$header.gch.partial" "$header.gch"
  fi
  flock -u 9
fi
exec "$compiler" -Winvalid-pch "${command[@]}"
