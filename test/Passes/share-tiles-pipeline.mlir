// dhs-compile --share-tiles end to end (kept out of share-tiles.mlir, whose
// --split-input-file chunks would otherwise run dhs-share-tiles over these
// split-file sections with nothing checking the result).
// The whole pipeline with --share-tiles: share_rows runs before the union of
// missing rows, the fetch and the attention read the ordered lists, and the
// runtime's step plan books the step's own selection arguments.
// RUN: rm -rf %t && split-file %s %t.dir
// RUN: dhs-compile %t.dir/staged.mlir --share-tiles --share-min-missing=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// RUN: rm -rf %t.off && dhs-compile %t.dir/staged.mlir -o %t.off
// RUN: FileCheck %s --check-prefix=OFF --implicit-check-not=share_rows --implicit-check-not=shared_tiles < %t.off/manifest.json
// The default (min-missing 32) leaves staged attention alone and gives the
// fused step's share_rows launch its threshold.
// RUN: rm -rf %t.staged && dhs-compile %t.dir/staged.mlir --share-tiles -o %t.staged
// RUN: FileCheck %s --check-prefix=OFF --implicit-check-not=share_rows --implicit-check-not=shared_tiles < %t.staged/manifest.json
// RUN: rm -rf %t.fused && dhs-compile %t.dir/fused.mlir --share-tiles -o %t.fused
// RUN: FileCheck %s --check-prefix=FUSED < %t.fused/manifest.json
// RUN: dhs-run %t.fused --link-only | FileCheck %s --check-prefix=LINK
// A step that takes the tile counts as an argument is refused when loaded:
// only the step itself can compute them.
// RUN: rm -rf %t.arg && dhs-compile %t.dir/argument.mlir -o %t.arg
// RUN: not dhs-run %t.arg --backend cpu 2>&1 | FileCheck %s --check-prefix=ARGUMENT

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
// The staged step whole, without an ordering or tile counts anywhere
// (--implicit-check-not).
// OFF: "op": "union_missing"
// OFF: "op": "fetch"
// OFF: "op": "attention"
// OFF: "op": "attention_combine"

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
