#!/usr/bin/env bash
# The C++ compiler that tools/make_venv.sh gives mmcv's build: torch's extension builder calls
# $CXX, through ninja, once per source. It changes two things, neither of them the result:
# - 63 of mmcv 2.1.0's 77 op sources start with #include "pytorch_cpp_helper.hpp", which pulls
#   in all of ATen, and parsing it is most of each source's compile. gcc parses it once here,
#   into a precompiled header beside the header, with the flags of the source that asked
#   first (every source has the same flags), and then takes that .gch for each source that
#   includes the header first. Should the flags differ, gcc ignores the .gch, says so
#   (-Winvalid-pch), and reads the header as before.
# - -g0: Python's own CFLAGS ask for -g; debug information about all of ATen made each object
#   and each compile's memory several times larger, for a library nobody debugs here.
set -euo pipefail
compiler=c++
command=("$@")
header=
pch_flags=()
# torch's ninja rule: $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags ($cflags held
# a second -c when CFLAGS was set in the environment). The header takes all but the
# dependency file, the source, the object and -c.
while [ $# -gt 0 ]; do
  case $1 in
    -MF | -o) shift ;;
    -MMD | -c | *.cpp | *.cc | *.cxx | *.c) ;;
    *)
      pch_flags+=("$1")
      case $1 in -I*/mmcv/ops/csrc/common) header=${1#-I}/pytorch_cpp_helper.hpp ;; esac
      ;;
  esac
  shift
done
if [ -n "$header" ] && [ -f "$header" ]; then
  # ninja starts two compiles at once: the first writes the .gch, the other waits for it.
  exec 9>"$header.gch.lock"
  flock 9
  if [ ! -e "$header.gch" ]; then
    "$compiler" "${pch_flags[@]}" -g0 -x c++-header "$header" -o "$header.gch.partial"
    mv "$header.gch.partial" "$header.gch"
  fi
  flock -u 9
fi
exec "$compiler" "${command[@]}" -g0 -Winvalid-pch
