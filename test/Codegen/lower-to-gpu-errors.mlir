// RUN: dhs-opt %s --dhs-lower-to-gpu --split-input-file --verify-diagnostics

func.func @dynamic_batch(%q: memref<?x1x16x576xbf16>, %rows: memref<?x1x64xi32>,
    %slots: memref<?x1x64xi32>, %start: memref<?xi64>, %len: memref<?xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>, %out: memref<?x1x16x512xbf16>) {
  // expected-error @below {{needs static shapes to generate a kernel, operand has type 'memref<?x1x16x576xbf16>'}}
  dhs.sparse_attention queries(%q : memref<?x1x16x576xbf16>)
      rows(%rows : memref<?x1x64xi32>) slots(%slots : memref<?x1x64xi32>)
      history(%start, %len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<?x1x16x512xbf16>) scale = 1.0
  return
}

// -----

func.func @topk_too_wide(%scores: memref<1x1x16384xf32>, %len: memref<1xi32>,
                         %rows: memref<1x1x8192xi32>) {
  // expected-error @below {{selects up to 4096 rows per query in one CTA, got 8192}}
  dhs.topk scores(%scores : memref<1x1x16384xf32>)
      history(%len : memref<1xi32>) into(%rows : memref<1x1x8192xi32>)
  return
}

// -----

// An op without a kernel is named, with the passes that remove it.
func.func @ring_append(%ring: memref<4x128x1x1152xi8>, %new: memref<4x5x1x1152xi8>,
                       %pos: memref<4xi32>) {
  // expected-error @below {{'dhs.ring_append' op has no GPU kernel yet; run the passes that remove it (dhs-fuse-retrieval, dhs-draft-ring) or drop it from the step}}
  dhs.ring_append rows(%new : memref<4x5x1x1152xi8>) positions(%pos : memref<4xi32>)
      into(%ring : memref<4x128x1x1152xi8>)
  return
}

// -----

func.func @sort_rows_too_long(%rows: memref<2x8193xi32>) {
  // expected-error @below {{sorts up to 8192 rows per request in shared memory, got 8193}}
  dhs.sort_rows rows(%rows : memref<2x8193xi32>) into(%rows : memref<2x8193xi32>)
  return
}
