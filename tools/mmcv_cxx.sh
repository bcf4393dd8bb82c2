#!/usr/bin/env bash
# The C++ compiler that tools/make_venv.sh gives mmcv's build: torch's extension builder calls
# $CXX, through ninja, once per source. It changes two things, neither of them the result:
# - 63 of mmcv 2.1.0's 77 op sources start with #include "pytorch_cpp_helper.hpp", which pulls
#   in all of ATen, and parsing it is most of each source's compile. gcc parses it once here,
#   into a precompiled header beside the header, with the flags of the source that asked
#   first (every source has the same flags), and then takes that .gch for each source that
#   includes the header first. Should the flags differ, gcc ignores the .gch, says so
#   (-Winvalid-pch), and reads the header as before. ninja runs two compiles at once: while
#   one writes the .gch, the other compiles without it rather than wait (writing it takes
#   as long as about three sources), and the 14 sources that include the header later, where
#   gcc cannot use a .gch, never wait for it.
# - -g0: Python's own CFLAGS ask for -g; debug information about all of ATen made each object
#   and each compile's memory several times larger, for a library nobody debugs here.
set -euo pipefail
compiler=c++
command=("$@")
header=
source=
pch_flags=()
# torch's ninja rule: $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags ($cflags held
# a second -c when CFLAGS was set in the environment). The header takes all but the
# dependency file, the source, the object and -c.
while [ $# -gt 0 ]; do
  case $1 in
    -MF | -o) shift ;;
    -MMD | -c) ;;
    *.cpp | *.cc | *.cxx | *.c) source=$1 ;;
    *)
      pch_flags+=("$1")
      case $1 in -I*/mmcv/ops/csrc/common) header=${1#-I}/pytorch_cpp_helper.hpp ;; esac
      ;;
  esac
  shift
done
if [ -n "$header" ] && [ -f "$header" ] && [ ! -e "$header.gch" ] && [ -n "$source" ] &&
  [ "$(grep -m1 '^#include' "$source")" = '#include "pytorch_cpp_helper.hpp"' ]; then
  exec 9>"$header.gch.lock"
  # Not holding the lock: another compile is writing the .gch (as .partial, so gcc does not
  # see it yet), and this one goes on without it.
  if flock -n 9; then
    if [ ! -e "$header.gch" ]; then
      "$compiler" "${pch_flags[@]}" -g0 -x c++-header "$header" -o "$header.gch.partial"
      mv "$header.gch.partial" "$header.gch"
    fi
    flock -u 9
  fi
fi
exec "$compiler" "${command[@]}" -g0 -Winvalid-pch
