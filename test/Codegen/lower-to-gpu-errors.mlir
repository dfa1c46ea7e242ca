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

// An op without a kernel is named, with the pass that removes it.
func.func @ring_append(%ring: memref<4x128x1x1152xi8>, %new: memref<4x5x1x1152xi8>,
                       %pos: memref<4xi32>) {
  // expected-error @below {{'dhs.ring_append' op has no GPU kernel yet; run dhs-draft-ring, which lowers it to dhs.ring_index and dhs.copy_rows, or drop it from the step}}
  dhs.ring_append rows(%new : memref<4x5x1x1152xi8>) positions(%pos : memref<4xi32>)
      into(%ring : memref<4x128x1x1152xi8>)
  return
}

// -----

// One that no pass removes (dhs-lower-to-gpu makes it for grouped launches).
func.func @group_bindings() {
  // expected-error @below {{'dhs.group_bindings' op has no GPU kernel yet; no pass removes it: drop it from the step}}
  %bindings = dhs.group_bindings : memref<?x?xi64>
  return
}

// -----

func.func @sort_rows_too_long(%rows: memref<2x8193xi32>) {
  // expected-error @below {{sorts up to 8192 rows per request in shared memory, got 8193}}
  dhs.sort_rows rows(%rows : memref<2x8193xi32>) into(%rows : memref<2x8193xi32>)
  return
}

// -----

// Kernels with nothing to do are refused: an empty list is a shape error
// in the step, not a launch of zero CTAs.
func.func @age_rows_no_appends(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %appends: memref<0x4xi64>, %hot: memref<64xi64>, %cleared: memref<64xi32>,
    %free: memref<64xi32>, %control: memref<8xi32>, %rows: memref<0xi64>, %slots: memref<0xi32>) {
  // expected-error @below {{'dhs.age_rows' op has no appends to replay}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      appends(%appends : memref<0x4xi64>) hot(%hot : memref<64xi64>)
      cleared(%cleared : memref<64xi32>) free(%free : memref<64xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<0xi64>, memref<0xi32>)
  return
}

// -----

func.func @plan_promotions_no_rows(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %fetched: memref<4x0xi32>, %start: memref<4xi64>, %hot: memref<64xi64>,
    %cleared: memref<64xi32>, %free: memref<64xi32>, %control: memref<8xi32>,
    %rows: memref<0xi64>, %slots: memref<0xi32>) {
  // expected-error @below {{'dhs.plan_promotions' op has no fetched rows to plan}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<4x0xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<64xi64>) cleared(%cleared : memref<64xi32>)
      free(%free : memref<64xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<0xi64>, memref<0xi32>) replacement = clock
  return
}

// -----

func.func @sort_rows_no_rows(%rows: memref<2x0xi32>, %sorted: memref<2x0xi32>) {
  // expected-error @below {{'dhs.sort_rows' op has no rows to sort}}
  dhs.sort_rows rows(%rows : memref<2x0xi32>) into(%sorted : memref<2x0xi32>)
  return
}

// -----

func.func @share_rows_no_selections(%rows: memref<4x5x0xi32>, %slots: memref<4x5x0xi32>,
    %shared_rows: memref<4x5x0xi32>, %shared_slots: memref<4x5x0xi32>, %tiles: memref<4xi32>) {
  // expected-error @below {{'dhs.share_rows' op has no selections to share}}
  dhs.share_rows rows(%rows : memref<4x5x0xi32>) slots(%slots : memref<4x5x0xi32>) tile = 64
      into(%shared_rows, %shared_slots, %tiles
           : memref<4x5x0xi32>, memref<4x5x0xi32>, memref<4xi32>)
  return
}

// -----

// 5 x 4096 selections need a hash table of 65536 entries (kept at most half
// full); shared memory holds 32768.
func.func @union_too_wide(%rows: memref<1x5x4096xi32>, %slots: memref<1x5x4096xi32>,
    %missing: memref<1x20480xi32>, %remap: memref<1x5x4096xi32>) {
  // expected-error @below {{'dhs.union_missing' op unions up to 16384 selections per request in shared memory, got 20480}}
  dhs.union_missing rows(%rows : memref<1x5x4096xi32>) slots(%slots : memref<1x5x4096xi32>)
      into(%missing, %remap : memref<1x20480xi32>, memref<1x5x4096xi32>)
  return
}

// -----

// 2^31 tokens: the greedy kernel's token ids are i32.
func.func @accept_vocabulary(%draft: memref<1x1xi32>, %target: memref<1x2x2147483648xf32>,
    %seeds: memref<1xi64>, %counter: memref<1xi64>, %accepted: memref<1xi32>,
    %next: memref<1xi32>) {
  // expected-error @below {{'dhs.accept' op vocabulary too large for i32 token ids}}
  dhs.accept greedy draft(%draft : memref<1x1xi32>)
      target(%target : memref<1x2x2147483648xf32>)
      seeds(%seeds : memref<1xi64>) step(%counter : memref<1xi64>)
      into(%accepted, %next : memref<1xi32>, memref<1xi32>)
  return
}

// -----

// 65536 requests x 32768 positions = 2^31 (request, position) pairs: more
// than an i32 grid index counts.
func.func @too_many_pairs(%q: memref<65536x32768x16x576xbf16>,
    %rows: memref<65536x32768x64xi32>, %slots: memref<65536x32768x64xi32>,
    %start: memref<65536xi64>, %len: memref<65536xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
    %out: memref<65536x32768x16x512xbf16>) {
  // expected-error @below {{'dhs.sparse_attention' op too many (request, position) pairs for a grid}}
  dhs.sparse_attention queries(%q : memref<65536x32768x16x576xbf16>)
      rows(%rows : memref<65536x32768x64xi32>) slots(%slots : memref<65536x32768x64xi32>)
      history(%start, %len : memref<65536xi64>, memref<65536xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<65536x32768x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// A verify step's position clusters (`shared`) do not store rows back yet.
func.func @write_back_shared(%q: memref<4x2x64x576xbf16>, %rows: memref<4x2x256xi32>,
    %slots: memref<4x2x256xi32>, %entries: memref<4x2x256xi32>, %start: memref<4xi64>,
    %len: memref<4xi32>, %tiles: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>,
    %out: memref<4x2x64x512xbf16>) {
  // expected-error @below {{writes rows back without a shared prefix only (the position clusters of `shared` do not store rows back yet)}}
  dhs.sparse_attention queries(%q : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x256xi32>) slots(%slots : memref<4x2x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      write_back(%entries : memref<4x2x256xi32>) shared(%tiles : memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x2x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// A GQA row holds every KV head; a CTA reads its own head's part.
func.func @write_back_gqa(%q: memref<2x1x8x128xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %entries: memref<2x1x64xi32>, %start: memref<2xi64>,
    %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.gqa<kv_heads = 2, head_dim = 128, dtype = bf16>, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x8x128xbf16>) {
  // expected-error @below {{writes rows back for MLA row formats only, not gqa}}
  dhs.sparse_attention queries(%q : memref<2x1x8x128xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      write_back(%entries : memref<2x1x64xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.gqa<kv_heads = 2, head_dim = 128, dtype = bf16>, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x8x128xbf16>) scale = 0.088
  return
}

// -----

// max-heads-per-block outside [1, 32] (a CTA's warps, one per head) is
// refused; the run above, with the default 16, lowers this op.
// RUN: not dhs-opt %s --dhs-lower-to-gpu=max-heads-per-block=0 --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=HEADS0
// RUN: not dhs-opt %s --dhs-lower-to-gpu=max-heads-per-block=33 --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=HEADS33
// HEADS0: lower-to-gpu-errors.mlir:[[# @LINE + 6]]:3: error: 'dhs.sparse_attention' op max-heads-per-block must be in [1, 32], got 0
// HEADS33: lower-to-gpu-errors.mlir:[[# @LINE + 5]]:3: error: 'dhs.sparse_attention' op max-heads-per-block must be in [1, 32], got 33
func.func @heads_option(%q: memref<1x1x16x576xbf16>, %rows: memref<1x1x64xi32>,
    %slots: memref<1x1x64xi32>, %start: memref<1xi64>, %len: memref<1xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
    %out: memref<1x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<1x1x16x576xbf16>)
      rows(%rows : memref<1x1x64xi32>) slots(%slots : memref<1x1x64xi32>)
      history(%start, %len : memref<1xi64>, memref<1xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<1x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// Every kernel other than sparse_attention's (AttentionConfig, above) checks
// its shapes itself.
func.func @fetch_dynamic(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
    %rows: memref<2x1x?xi32>, %slots: memref<2x1x?xi32>, %start: memref<2xi64>,
    %len: memref<2xi32>, %stage: memref<2x?x1x1152xi8>) {
  // expected-error @below {{'dhs.fetch' op needs static shapes to generate a kernel (fold a serving configuration into a step written for any shape: dhs-compile --requests, --positions, --heads, --topk and --hbm-slots, or dhs-specialize)}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x?xi32>) slots(%slots : memref<2x1x?xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%stage : memref<2x?x1x1152xi8>)
  return
}

// -----

func.func @attention_dynamic(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
    %q: memref<2x1x16x576xbf16>, %rows: memref<2x1x32xi32>, %slots: memref<2x1x32xi32>,
    %stage: memref<2x?x1x1152xi8>, %out: memref<2x1x16x512xbf16>) {
  // expected-error @below {{'dhs.attention' op needs static shapes to generate a kernel, operand has type 'memref<2x?x1x1152xi8>'}}
  dhs.attention queries(%q : memref<2x1x16x576xbf16>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      staging(%stage : memref<2x?x1x1152xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @union_dynamic(%rows: memref<?x5x64xi32>, %slots: memref<?x5x64xi32>,
    %missing: memref<?x320xi32>, %remap: memref<?x5x64xi32>) {
  // expected-error @below {{'dhs.union_missing' op needs static shapes to generate a kernel}}
  dhs.union_missing rows(%rows : memref<?x5x64xi32>) slots(%slots : memref<?x5x64xi32>)
      into(%missing, %remap : memref<?x320xi32>, memref<?x5x64xi32>)
  return
}

// -----

func.func @resolve_dynamic(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
    %rows: memref<?x2x256xi32>, %start: memref<?xi64>, %len: memref<?xi32>,
    %slots: memref<?x2x256xi32>) {
  // expected-error @below {{'dhs.resolve' op needs static shapes to generate a kernel}}
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      rows(%rows : memref<?x2x256xi32>)
      history(%start, %len : memref<?xi64>, memref<?xi32>) into(%slots : memref<?x2x256xi32>)
  return
}

// -----

func.func @place_rows_dynamic(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %rows: memref<?xi64>, %slots: memref<?xi32>) {
  // expected-error @below {{'dhs.place_rows' op needs static shapes to generate a kernel}}
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<?xi64>) slots(%slots : memref<?xi32>)
  return
}

// -----

func.func @topk_dynamic(%scores: memref<1x1x?xf32>, %len: memref<1xi32>,
                        %rows: memref<1x1x64xi32>) {
  // expected-error @below {{'dhs.topk' op needs static shapes to generate a kernel}}
  dhs.topk scores(%scores : memref<1x1x?xf32>) history(%len : memref<1xi32>)
      into(%rows : memref<1x1x64xi32>)
  return
}

// -----

func.func @ring_index_dynamic(%pos: memref<?xi32>, %slots: memref<?x5xi32>) {
  // expected-error @below {{'dhs.ring_index' op needs static shapes to generate a kernel}}
  dhs.ring_index positions(%pos : memref<?xi32>) offset = 0 window = 128
      into(%slots : memref<?x5xi32>)
  return
}

// -----

func.func @copy_rows_dynamic(%src: memref<4x?x1x1152xi8>, %dst: memref<4x128x1x1152xi8>,
                             %index: memref<4x?xi32>) {
  // expected-error @below {{'dhs.copy_rows' op needs static shapes to generate a kernel}}
  dhs.copy_rows src(%src : memref<4x?x1x1152xi8>) dst(%dst : memref<4x128x1x1152xi8>)
      dst_index(%index : memref<4x?xi32>)
  return
}

// -----

func.func @sort_rows_dynamic(%rows: memref<?x64xi32>, %sorted: memref<?x64xi32>) {
  // expected-error @below {{'dhs.sort_rows' op needs static shapes to generate a kernel}}
  dhs.sort_rows rows(%rows : memref<?x64xi32>) into(%sorted : memref<?x64xi32>)
  return
}

// -----

func.func @share_rows_dynamic(%rows: memref<?x5x64xi32>, %slots: memref<?x5x64xi32>,
    %shared_rows: memref<?x5x64xi32>, %shared_slots: memref<?x5x64xi32>, %tiles: memref<?xi32>) {
  // expected-error @below {{'dhs.share_rows' op needs static shapes to generate a kernel}}
  dhs.share_rows rows(%rows : memref<?x5x64xi32>) slots(%slots : memref<?x5x64xi32>) tile = 64
      into(%shared_rows, %shared_slots, %tiles
           : memref<?x5x64xi32>, memref<?x5x64xi32>, memref<?xi32>)
  return
}

// -----

func.func @accept_dynamic(%draft: memref<?x4xi32>, %target: memref<?x5x32000xf32>,
    %seeds: memref<?xi64>, %counter: memref<1xi64>, %accepted: memref<?xi32>,
    %next: memref<?xi32>) {
  // expected-error @below {{'dhs.accept' op needs static shapes to generate a kernel}}
  dhs.accept greedy draft(%draft : memref<?x4xi32>)
      target(%target : memref<?x5x32000xf32>)
      seeds(%seeds : memref<?xi64>) step(%counter : memref<1xi64>)
      into(%accepted, %next : memref<?xi32>, memref<?xi32>)
  return
}

// -----

func.func @age_rows_dynamic(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %appends: memref<?x4xi64>, %hot: memref<64xi64>, %cleared: memref<64xi32>,
    %free: memref<64xi32>, %control: memref<8xi32>, %rows: memref<?xi64>, %slots: memref<?xi32>) {
  // expected-error @below {{'dhs.age_rows' op needs static shapes to generate a kernel}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      appends(%appends : memref<?x4xi64>) hot(%hot : memref<64xi64>)
      cleared(%cleared : memref<64xi32>) free(%free : memref<64xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<?xi64>, memref<?xi32>)
  return
}

// -----

func.func @plan_promotions_dynamic(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %fetched: memref<4x?xi32>, %start: memref<4xi64>, %hot: memref<64xi64>,
    %cleared: memref<64xi32>, %free: memref<64xi32>, %control: memref<8xi32>,
    %rows: memref<?xi64>, %slots: memref<?xi32>) {
  // expected-error @below {{'dhs.plan_promotions' op needs static shapes to generate a kernel}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<4x?xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<64xi64>) cleared(%cleared : memref<64xi32>)
      free(%free : memref<64xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<?xi64>, memref<?xi32>) replacement = clock
  return
}

// -----

// Dhs ops at module level have no step to belong to (they crashed the
// pass); the first is named.
// expected-error @below {{'dhs.scratch' op is outside a function: a step's ops belong to its func.func}}
%len = dhs.scratch : memref<1xi32>
%scores = dhs.scratch : memref<1x1x64xf32>
%rows = dhs.scratch : memref<1x1x8xi32>
dhs.topk scores(%scores : memref<1x1x64xf32>) history(%len : memref<1xi32>) into(%rows : memref<1x1x8xi32>)
