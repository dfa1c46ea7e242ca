#!/usr/bin/env bash
# A generated kernel's machine code without a GPU: assembles a PTX file with
# ptxas and prints what the kernel work needs before a device call (registers,
# spills, the SASS instruction mix), so variants can be compared offline.
#
#   tools/sass.sh PTX [OUT]   ptxas -v's report, then the kernel's SASS
#                             instructions counted by opcode (most frequent
#                             first); the whole SASS goes to OUT (default
#                             PTX with .sass) for reading or diffing
#
# Options (environment): DHS_SASS_ARCH (default sm_90a), DHS_SASS_TOP (opcodes
# listed, default 30). ptxas comes from CUDA (PATH or /usr/local/cuda/bin);
# cuobjdump (and the nvdisasm it runs) from CUDA where it has them, else from
# NVIDIA's PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, fetched
# once into ~/.cache/dhs/cuobjdump (the toolkit on the build machine has
# ptxas but neither).
set -euo pipefail

ptx=${1:?usage: tools/sass.sh PTX [OUT]}
out=${2:-${ptx%.ptx}.sass}
arch=${DHS_SASS_ARCH:-sm_90a}

find_tool() { # NAME: its path, or nothing
  command -v "$1" 2>/dev/null || { [ -x "/usr/local/cuda/bin/$1" ] && echo "/usr/local/cuda/bin/$1"; } || true
}
ptxas=$(find_tool ptxas)
[ -n "$ptxas" ] || { echo "sass: ptxas not found (install the CUDA toolkit)" >&2; exit 1; }
cuobjdump=$(find_tool cuobjdump)
if [ -z "$cuobjdump" ]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/dhs/cuobjdump
  cuobjdump=$( (find "$cache" -type f -name cuobjdump 2>/dev/null || true) | head -n 1)
  if [ -z "$cuobjdump" ]; then
    echo "sass: fetching cuobjdump (PyPI nvidia-cuda-cuobjdump) into $cache" >&2
    mkdir -p "$cache"
    python3 -m pip download --quiet --no-deps --dest "$cache" nvidia-cuda-cuobjdump \
      nvidia-cuda-nvdisasm >&2
    for wheel in "$cache"/*.whl; do python3 -m zipfile -e "$wheel" "$cache/x"; done
    cuobjdump=$(find "$cache/x" -type f -name cuobjdump | head -n 1)
    [ -n "$cuobjdump" ] || { echo "sass: no cuobjdump in the wheel" >&2; exit 1; }
    find "$cache/x" -type f \( -name cuobjdump -o -name nvdisasm \) -exec chmod +x {} +
  fi
  PATH=$(dirname "$cuobjdump"):$PATH
  export PATH
fi

cubin=$(mktemp --suffix=.cubin)
trap 'rm -f "$cubin"' EXIT
"$ptxas" -arch="$arch" -O3 -v "$ptx" -o "$cubin" 2>&1 |
  grep -E "Compiling entry|Used [0-9]+ registers|spill" | sed -E 's/^ptxas info *: //; s/^ +//'
"$cuobjdump" -sass "$cubin" > "$out"
echo "SASS: $out ($(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$out") instructions)"
# Opcodes without their modifiers and predicates, counted.
grep -oE '^ +/\*[0-9a-f]{4}\*/ +[^;]+' "$out" |
  sed -E 's#^ +/\*[0-9a-f]+\*/ +##; s/^@!?U?P[0-9T] +//' |
  awk '{ sub(/\..*/, "", $1); print $1 }' | sort | uniq -c | sort -rn |
  head -n "${DHS_SASS_TOP:-30}" | awk '{ printf "%8d %s\n", $1, $2 }'
