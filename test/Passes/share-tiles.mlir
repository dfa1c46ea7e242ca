// RUN: dhs-opt %s --dhs-share-tiles --split-input-file | FileCheck %s
// RUN: dhs-opt %s --dhs-share-tiles=min-missing=0 --split-input-file \
// RUN:   | FileCheck %s --check-prefix=ALWAYS
// A negative count is refused (dhs.share_rows's min_missing counts rows).
// RUN: not dhs-opt %s --dhs-share-tiles=min-missing=-1 --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: error: dhs-share-tiles: min-missing must be 0 or more, got -1
// The whole pipeline with --share-tiles: share_rows runs before the union of
// missing rows, the fetch and the attention read the ordered lists, and the
// runtime's step plan books the step's own selection arguments.
// RUN: rm -rf %t && split-file %s %t.dir
// RUN: dhs-compile %t.dir/staged.mlir --share-tiles --share-min-missing=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// RUN: rm -rf %t.off && dhs-compile %t.dir/staged.mlir -o %t.off
// RUN: FileCheck %s --check-prefix=OFF < %t.off/manifest.json
// The default (min-missing 32) leaves staged attention alone and gives the
// fused step's share_rows launch its threshold.
// RUN: rm -rf %t.staged && dhs-compile %t.dir/staged.mlir --share-tiles -o %t.staged
// RUN: FileCheck %s --check-prefix=OFF < %t.staged/manifest.json
// RUN: rm -rf %t.fused && dhs-compile %t.dir/fused.mlir --share-tiles -o %t.fused
// RUN: FileCheck %s --check-prefix=FUSED < %t.fused/manifest.json
// RUN: dhs-run %t.fused --link-only | FileCheck %s --check-prefix=LINK
// A step that takes the tile counts as an argument is refused when loaded:
// only the step itself can compute them.
// RUN: rm -rf %t.arg && dhs-compile %t.dir/argument.mlir -o %t.arg
// RUN: not dhs-run %t.arg --backend cpu 2>&1 | FileCheck %s --check-prefix=ARGUMENT

// Staged attention reads its missing rows from the staging arena (HBM):
// shared only with min-missing = 0. Then every reader of a verify selection
// in the phase (the fetch and both layers' attention) reads the lists
// dhs.share_rows ordered, and the attention ops get the tile counts.
// CHECK-LABEL: func.func @verify_group
// CHECK-NOT: dhs.share_rows
// CHECK-NOT: shared(
// CHECK: return
// ALWAYS-LABEL: func.func @verify_group
// ALWAYS-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: memref<4x5x64x576xbf16>, %[[ROWS:[^:]*]]: memref<4x5x256xi32>, %[[SLOTS:[^:]*]]: memref<4x5x256xi32>, %[[START:[^:]*]]: memref<4xi64>, %[[LEN:[^:]*]]: memref<4xi32>
// ALWAYS: dhs.verify gamma = 4 {
// ALWAYS:   %[[STAGE:.*]] = dhs.scratch : memref<4x1280x2x656xi8>
// ALWAYS:   %[[ORDERED_ROWS:.*]] = dhs.scratch : memref<4x5x256xi32>
// ALWAYS:   %[[ORDERED_SLOTS:.*]] = dhs.scratch : memref<4x5x256xi32>
// ALWAYS:   %[[TILES:.*]] = dhs.scratch : memref<4xi32>
// ALWAYS:   dhs.share_rows rows(%[[ROWS]] : memref<4x5x256xi32>) slots(%[[SLOTS]] : memref<4x5x256xi32>) tile = 64 into(%[[ORDERED_ROWS]], %[[ORDERED_SLOTS]], %[[TILES]] : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
// ALWAYS:   dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ORDERED_ROWS]] : memref<4x5x256xi32>) slots(%[[ORDERED_SLOTS]] : memref<4x5x256xi32>) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE]] :
// ALWAYS:   dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) staging(%[[STAGE]] : {{.*}}) shared(%[[TILES]] : memref<4xi32>) pool({{.*}}) layer = 0
// ALWAYS:   dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) staging(%[[STAGE]] : {{.*}}) shared(%[[TILES]] : memref<4xi32>) pool({{.*}}) layer = 1
// ALWAYS-NOT: dhs.share_rows
func.func @verify_group(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>,
                        %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
                        %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                        %o0: memref<4x5x64x512xbf16>, %o1: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    %stage = dhs.scratch : memref<4x1280x2x656xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>) into(%stage : memref<4x1280x2x656xi8>)
    dhs.attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        staging(%stage : memref<4x1280x2x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 0 output(%o0 : memref<4x5x64x512xbf16>) scale = 0.0416666679
    dhs.attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        staging(%stage : memref<4x1280x2x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 1 output(%o1 : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// Fused attention reads missing rows from the host itself: shared where at
// least min-missing prefix rows of a request are missing (the attribute is
// printed only when not 0).
// CHECK-LABEL: func.func @verify_fused
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: memref<4x5x64x576xbf16>, %[[ROWS:[^:]*]]: memref<4x5x256xi32>, %[[SLOTS:[^:]*]]: memref<4x5x256xi32>
// CHECK: dhs.verify gamma = 4 {
// CHECK:   %[[ORDERED_ROWS:.*]] = dhs.scratch : memref<4x5x256xi32>
// CHECK:   %[[ORDERED_SLOTS:.*]] = dhs.scratch : memref<4x5x256xi32>
// CHECK:   %[[TILES:.*]] = dhs.scratch : memref<4xi32>
// CHECK:   dhs.share_rows rows(%[[ROWS]] : memref<4x5x256xi32>) slots(%[[SLOTS]] : memref<4x5x256xi32>) tile = 64 min_missing = 32 into(%[[ORDERED_ROWS]], %[[ORDERED_SLOTS]], %[[TILES]] : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
// CHECK:   dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) history({{.*}}) shared(%[[TILES]] : memref<4xi32>) pool({{.*}}) layer = 0
// ALWAYS-LABEL: func.func @verify_fused
// ALWAYS:   dhs.share_rows rows({{.*}}) slots({{.*}}) tile = 64 into(
// ALWAYS:   dhs.sparse_attention {{.*}} shared(
func.func @verify_fused(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                        %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
                        %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                        %o: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// Left alone: attention outside a verify phase, 16 heads (no tensor-core
// kernel), and a sliding window.
// CHECK-LABEL: func.func @not_shared
// CHECK-NOT: dhs.share_rows
// CHECK-NOT: shared(
// CHECK: return
// ALWAYS-LABEL: func.func @not_shared
// ALWAYS-NOT: dhs.share_rows
// ALWAYS-NOT: shared(
// ALWAYS: return
func.func @not_shared(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                      %q: memref<4x5x64x576xbf16>, %q16: memref<4x5x16x576xbf16>,
                      %rows: memref<4x5x256xi32>, %slots: memref<4x5x256xi32>,
                      %start: memref<4xi64>, %len: memref<4xi32>,
                      %o: memref<4x5x64x512xbf16>, %o16: memref<4x5x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
      rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
      layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q16 : memref<4x5x16x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o16 : memref<4x5x16x512xbf16>) scale = 0.0416666679
  }
  return
}

//--- staged.mlir
func.func @step(%q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
                %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                %o: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    %stage = dhs.scratch : memref<4x1280x1x656xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>) into(%stage : memref<4x1280x1x656xi8>)
    dhs.attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        staging(%stage : memref<4x1280x1x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}
// MANIFEST: "op": "share_rows"
// MANIFEST: "op": "union_missing"
// MANIFEST: "op": "fetch"
// MANIFEST: "op": "attention"
// MANIFEST: "role": "shared_tiles"
// LINK: link: OK
// OFF-NOT: share_rows
// OFF-NOT: shared_tiles

//--- fused.mlir
func.func @fused_step(%q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
                %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                %o: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}
// FUSED: "min_missing": 32,
// FUSED-NEXT: "op": "share_rows"
// FUSED: "op": "sparse_attention"
// FUSED: "role": "shared_tiles"

//--- argument.mlir
func.func @argument_step(%q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
                         %slots: memref<4x5x256xi32>, %start: memref<4xi64>,
                         %len: memref<4xi32>, %tiles: memref<4xi32>,
                         %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                         %o: memref<4x5x64x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
      rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>) shared(%tiles : memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
      layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  return
}
// ARGUMENT: argument 5 is a shared_tiles list, which only the step can compute
