#!/usr/bin/env bash
# Checks that a change to the compiler leaves its output alone: compiles every
# step with two compilers and compares the PTX files and manifests byte for
# byte.
#
#   tools/compare-ptx.sh snapshot BUILD OUT  compile every step with BUILD (a
#                                            configured build tree) into OUT
#   tools/compare-ptx.sh compare OLD NEW     compare two snapshots: every PTX
#                                            file and manifest of OLD must be
#                                            in NEW, byte-identical
#   tools/compare-ptx.sh builds BUILD_A BUILD_B
#                                            snapshot both builds, compare
#   tools/compare-ptx.sh revs REV_A [REV_B]  build the compiler at two git
#                                            revisions (REV_B: the working
#                                            tree) in temporary worktrees,
#                                            snapshot both, compare
#
# The steps, and where a snapshot keeps them:
#   examples/<name>/                  every examples/*.mlir
#   build/test/unit/compiled-steps/   the unit tests' steps and layer-group
#   build/test/unit/group-steps/      steps, compiled by BUILD's own targets
#                                     (test/unit/CMakeLists.txt)
#   gpu-check/                        the benchmark's and tools/gpu-check.sh's
#                                     steps (`gpu-check.sh steps`)
# Step sources (examples/, bench/, gpu-check's variants) come from this
# checkout for both compilers; the unit tests' steps from each build's tree.
# Options (environment): DHS_COMPARE_MANIFESTS=0 compares PTX only (for a
# change of the manifest format, which a test must then cover);
# DHS_CMAKE_ARGS adds arguments to the configure step of `revs`.
# Exit status: 0 when everything OLD has is in NEW and identical, else 1.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "compare-ptx: $*" >&2; exit 2; }

# The options between the step's path and `-o` in the dhs-compile command
# its header comment shows.
header_options() {
  awk '/^\/\/ +dhs-compile / { on = 1 }
       on { line = $0; sub(/^\/\/ */, "", line); continued = sub(/\\$/, "", line)
            command = command " " line; if (!continued) exit }
       END { print command }' "$1" |
    sed -E 's/^ *dhs-compile +[^ ]+//; s/ -o .*$//'
}

snapshot() {
  local build=$1 out=$2
  [ -x "$build/bin/dhs-compile" ] || die "$build/bin/dhs-compile does not exist: build it first"
  rm -rf "$out" && mkdir -p "$out/examples" "$out/build/test/unit"
  local failed=0
  for source in "$root"/examples/*.mlir; do
    local name; name=$(basename "$source" .mlir)
    # Each example's header shows how to compile it
    # (`//   dhs-compile examples/NAME.mlir OPTIONS -o DIR`, `\` continuing
    # a line); the steps written with `?` dims take the serving
    # configuration given there (dhs-compile specializes them).
    local options=()
    read -ra options < <(header_options "$source")
    "$build/bin/dhs-compile" "$source" "${options[@]}" -o "$out/examples/$name" ||
      { echo "compare-ptx: dhs-compile failed on examples/$name.mlir" >&2; failed=1; }
  done
  # The unit tests' steps, as the build compiles them.
  ninja -C "$build" dhs-unittest-steps dhs-unittest-group-steps >/dev/null ||
    die "building the unit tests' steps in $build failed"
  for dir in compiled-steps group-steps; do
    [ -d "$build/test/unit/$dir" ] && cp -r "$build/test/unit/$dir" "$out/build/test/unit/"
  done
  DHS_BUILD_DIR=$build bash "$root/tools/gpu-check.sh" steps "$out/gpu-check" >/dev/null ||
    { echo "compare-ptx: gpu-check.sh steps failed" >&2; failed=1; }
  echo "compare-ptx: $(find "$out" -name '*.ptx' | wc -l) PTX files," \
       "$(find "$out" -name manifest.json | wc -l) manifests in $out"
  return $failed
}

# (A PTX file's `// dhs.launch:` lines, the launches its kernels were
# compiled for, are the manifest's business: the kernels are compared
# without them, so revisions before and after they were added compare.)
compare() {
  local old=$1 new=$2
  [ -d "$old" ] && [ -d "$new" ] || die "compare needs two snapshot directories"
  local pattern=(-name '*.ptx')
  [ "${DHS_COMPARE_MANIFESTS:-1}" = 1 ] && pattern=(-name '*.ptx' -o -name manifest.json)
  local same=0 differ=0 missing=0 added=0
  while IFS= read -r file; do
    if [ ! -f "$new/$file" ]; then
      echo "MISSING $file"; missing=$((missing + 1))
    elif cmp -s <(grep -v '^// dhs\.launch: ' "$old/$file") <(grep -v '^// dhs\.launch: ' "$new/$file"); then
      same=$((same + 1))
    else
      echo "DIFFERS $file"; differ=$((differ + 1))
    fi
  done < <(cd "$old" && find . -type f \( "${pattern[@]}" \) | sed 's|^\./||' | sort)
  while IFS= read -r file; do
    [ -f "$old/$file" ] || added=$((added + 1))
  done < <(cd "$new" && find . -type f \( "${pattern[@]}" \) | sed 's|^\./||' | sort)
  echo "compare-ptx: $same identical, $differ differ, $missing missing" \
       "($added only in $new)"
  [ $differ -eq 0 ] && [ $missing -eq 0 ]
}

# Configures and builds the compiler and the unit tests' steps of revision $1
# (a worktree at $2; "" = this checkout's working tree, copied).
build_revision() {
  local rev=$1 tree=$2
  if [ -n "$rev" ]; then
    git -C "$root" worktree add --detach "$tree" "$rev" >/dev/null 2>&1 ||
      die "cannot check out $rev"
  else
    mkdir -p "$tree"
    (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$tree")
  fi
  # shellcheck disable=SC2086
  cmake -G Ninja -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DCUDA_TOOLKIT_ROOT=${CUDA_TOOLKIT_ROOT:-/usr/local/cuda} ${DHS_CMAKE_ARGS:-} >/dev/null ||
    die "configuring $tree failed"
  nice ninja -C "$tree/build" dhs-compile >/dev/null || die "building dhs-compile in $tree failed"
}

case "${1:-}" in
  snapshot) [ $# -eq 3 ] || die "usage: snapshot BUILD OUT"; snapshot "$2" "$3" ;;
  compare) [ $# -eq 3 ] || die "usage: compare OLD NEW"; compare "$2" "$3" ;;
  builds)
    [ $# -eq 3 ] || die "usage: builds BUILD_A BUILD_B"
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    snapshot "$2" "$tmp/a" && snapshot "$3" "$tmp/b" && compare "$tmp/a" "$tmp/b" ;;
  revs)
    [ $# -ge 2 ] || die "usage: revs REV_A [REV_B]"
    tmp=$(mktemp -d)
    trap 'git -C "$root" worktree remove --force "$tmp/a" 2>/dev/null;
          git -C "$root" worktree remove --force "$tmp/b" 2>/dev/null; rm -rf "$tmp"' EXIT
    build_revision "$2" "$tmp/a" && build_revision "${3:-}" "$tmp/b" &&
      snapshot "$tmp/a/build" "$tmp/snap-a" && snapshot "$tmp/b/build" "$tmp/snap-b" &&
      compare "$tmp/snap-a" "$tmp/snap-b" ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
