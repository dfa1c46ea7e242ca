#!/usr/bin/env bash
# Regenerates docs/ from the ODS definitions (dialect, passes, codegen
# passes) with mlir-tblgen. With --check, fails when docs/ is out of date
# instead (a ctest test runs that).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tblgen=${MLIR_TBLGEN:-/usr/lib/llvm-22/bin/mlir-tblgen}
out=$root/docs
[ "${1:-}" = --check ] && out=$(mktemp -d)
inc=(-I "$root" -I "$root/dialects" -I /usr/lib/llvm-22/include)
"$tblgen" -gen-dialect-doc -dialect=dhs "${inc[@]}" "$root/dialects/DhsOps.td" -o "$out/DhsDialect.md"
"$tblgen" -gen-pass-doc "${inc[@]}" "$root/passes/Passes.td" -o "$out/DhsPasses.md"
"$tblgen" -gen-pass-doc "${inc[@]}" "$root/codegen/Passes.td" -o "$out/DhsCodegenPasses.md"
if [ "${1:-}" = --check ]; then
  for f in DhsDialect.md DhsPasses.md DhsCodegenPasses.md; do
    diff -u "$root/docs/$f" "$out/$f" > /dev/null ||
      { echo "docs/$f is out of date: run tools/update-docs.sh" >&2; exit 1; }
  done
  rm -rf "$out"
  echo "docs/ is up to date"
fi
