//===- Passes.td - dhs -> dhs transformations --------------*- tablegen -*-===//
//
// The transformations the system is known for, on dhs IR: share retrieval
// across verify positions, fuse retrieval into attention, plan staging across
// layer groups, put draft KV in a window-bounded ring, and specialize a
// model configuration into static shapes.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_PASSES_TD
#define DHS_PASSES_TD

include "mlir/Pass/PassBase.td"

def DhsShareRetrieval : Pass<"dhs-share-retrieval", "::mlir::func::FuncOp"> {
  let summary = "Fetch each missing row once for all verify positions";
  let description = [{
    Inside a `dhs.verify` phase the `gamma + 1` query positions of a request
    select overlapping rows. A fetch of their selections copies a row once
    per position that selected it. This pass replaces such a fetch by the
    union of the request's distinct missing rows (`dhs.union_missing`), one
    fetch of that union, and a per-selection remap that the attention ops
    read their staged rows through.

    Before:
    ```mlir
    dhs.verify gamma = 1 {
      dhs.fetch pool(%pool : ...) rows(%rows : memref<4x2x64xi32>)
          slots(%slots : memref<4x2x64xi32>) history(...)
          into(%stage : memref<4x128x1x1152xi8>)
      dhs.attention ... staging(%stage : memref<4x128x1x1152xi8>) pool(...) ...
    }
    ```
    After:
    ```mlir
    dhs.verify gamma = 1 {
      %missing = dhs.scratch : memref<4x128xi32>
      %remap = dhs.scratch : memref<4x2x64xi32>
      dhs.union_missing rows(%rows : ...) slots(%slots : ...)
          into(%missing, %remap : memref<4x128xi32>, memref<4x2x64xi32>)
      dhs.fetch pool(%pool : ...) rows(%missing : memref<4x128xi32>)
          history(...) into(%stage : memref<4x128x1x1152xi8>)
      dhs.attention ... staging(%stage : ...) index(%remap : ...) pool(...) ...
    }
    ```
  }];
  let dependentDialects = ["::mlir::dhs::DhsDialect"];
  let statistics = [
    Statistic<"numShared", "shared-fetches",
              "Fetches turned into one fetch of the union of missing rows">
  ];
}

def DhsShareTiles : Pass<"dhs-share-tiles", "::mlir::func::FuncOp"> {
  let summary = "Let a verify step's positions gather the rows they all selected once";
  let description = [{
    Inside a `dhs.verify` phase the `gamma + 1` query positions of a request
    select mostly the same rows, and the tensor-core attention kernel
    gathers and dequantizes every row of every position. This pass orders
    each selection of such attention ops with `dhs.share_rows` (the rows all
    positions of a request selected first, in whole tiles of 64, the same
    order everywhere) into scratch buffers, makes every reader of the
    selection in the phase (fetches, unions, attention) read the ordered one,
    and gives the attention ops the tile counts (`shared(...)`), so that the
    kernel runs a request's positions as a cluster that gathers each shared
    row once. Sharing pays for rows read from the host (once instead of once
    per position), not for resident ones (the cluster's broadcasts cost more
    than the gathers they save): `dhs.share_rows` gives a request its tiles
    only when at least `min-missing` of its prefix rows are missing from HBM
    in the step, else 0 tiles, and the positions gather alone; the order
    is the same either way, so the results do not change, to the bit
    (each list is a permutation of its selections). With `min-missing` > 0
    only fused attention (`dhs.sparse_attention`, which reads missing rows
    from the host itself) is shared: staged attention reads them from the
    staging arena in HBM, as resident ones; `min-missing = 0` shares both.
    Only attention the tensor-core kernel computes is rewritten: MLA rows
    of 576 / 512 dims, heads in multiples of 64, K in multiples of 64, no
    sliding window, at most 8 positions and Q x K <= 16384.

    Before:
    ```mlir
    dhs.verify gamma = 4 {
      dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
          rows(%rows : memref<4x5x2048xi32>) slots(%slots : memref<4x5x2048xi32>)
          history(%start, %len : ...) pool(%pool : ...) layer = 0
          output(%out : ...) scale = 0.04
    }
    ```
    After:
    ```mlir
    dhs.verify gamma = 4 {
      %shared_rows = dhs.scratch : memref<4x5x2048xi32>
      %shared_slots = dhs.scratch : memref<4x5x2048xi32>
      %tiles = dhs.scratch : memref<4xi32>
      dhs.share_rows rows(%rows : memref<4x5x2048xi32>) slots(%slots : memref<4x5x2048xi32>)
          tile = 64 min_missing = 32 into(%shared_rows, %shared_slots, %tiles : ...)
      dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
          rows(%shared_rows : ...) slots(%shared_slots : ...)
          history(%start, %len : ...) shared(%tiles : memref<4xi32>)
          pool(%pool : ...) layer = 0 output(%out : ...) scale = 0.04
    }
    ```
  }];
  let dependentDialects = ["::mlir::dhs::DhsDialect"];
  let options = [Option<"minMissing", "min-missing", "int64_t", /*default=*/"32",
                        "Prefix rows of a request missing from HBM from which its positions "
                        "share tiles (0: always)">];
  let statistics = [Statistic<"numOrdered", "ordered-selections",
                              "Selections ordered for shared tiles (dhs.share_rows)">,
                    Statistic<"numSharing", "sharing-attentions",
                              "Attention ops given shared tiles">];
}

def DhsFuseRetrieval : Pass<"dhs-fuse-retrieval", "::mlir::func::FuncOp"> {
  let summary = "Fuse a fetch and the attention that reads it";
  let description = [{
    A `dhs.fetch` whose staged rows are read only by `dhs.attention` ops over
    the same selection (no staging index) is folded into those ops: each
    becomes a `dhs.sparse_attention` whose kernel reads missing rows straight
    from the device-mapped host store, so the staging copy and its launch
    disappear. Fetches shared across verify positions (read through an
    index) stay: one fetch there serves every position and layer, which is
    what sharing is for.

    Before:
    ```mlir
    %stage = dhs.scratch : memref<4x256x1x1152xi8>
    dhs.fetch pool(%pool : ...) rows(%rows : memref<4x1x256xi32>)
        slots(%slots : ...) history(%start, %len : ...) into(%stage : ...)
    dhs.attention queries(%q : ...) rows(%rows : ...) slots(%slots : ...)
        staging(%stage : ...) pool(%pool : ...) layer = 0 output(%o : ...) scale = 0.04
    ```
    After:
    ```mlir
    dhs.sparse_attention queries(%q : ...) rows(%rows : ...) slots(%slots : ...)
        history(%start, %len : ...) pool(%pool : ...) layer = 0 output(%o : ...) scale = 0.04
    ```
  }];
  let dependentDialects = ["::mlir::dhs::DhsDialect"];
  let statistics = [
    Statistic<"numFused", "fused-attentions",
              "Attention ops that now read missing rows themselves">,
    Statistic<"numFetchesRemoved", "removed-fetches", "Fetches removed">
  ];
}

def DhsPlanStaging : Pass<"dhs-plan-staging", "::mlir::func::FuncOp"> {
  let summary = "Place every step-local buffer in one reused staging arena";
  let description = [{
    Plans the runtime's staging arena for a step:
    - fetches of the same rows of the same pool (per-layer fetches of one
      layer group) become one: the group's miss plan is computed once and
      replayed for each of its layers;
    - buffers written by fetches (staged rows) alternate between two slots
      in fetch order, so the fetch of group g + 1 can run while group g
      computes; each slot is as large as the largest buffer it holds;
    - every other `dhs.scratch` buffer (union lists, remaps, ring indices)
      gets the lowest offset past the slots that does not overlap a buffer
      live at the same time (first fit over live ranges).
    Offsets are 256-byte aligned. Each scratch op gets its `offset` (and
    `slot`), and the function a `dhs.staging_plan` attribute with the arena
    size, the slot sizes and each buffer's offset, size and live range.

    Before:
    ```mlir
    %a = dhs.scratch : memref<4x256x4x656xi8>   // group 0
    dhs.fetch ... into(%a : ...)
    %b = dhs.scratch : memref<4x256x4x656xi8>   // group 1
    dhs.fetch ... into(%b : ...)
    ```
    After:
    ```mlir
    %a = dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<4x256x4x656xi8>
    %b = dhs.scratch {offset = 2686976 : i64, slot = 1 : i64} : memref<4x256x4x656xi8>
    func.func @step(...) attributes {dhs.staging_plan = {arena_bytes = 5373952 : i64, ...}}
    ```
  }];
  let options = [
    Option<"doubleBuffer", "double-buffer", "bool", /*default=*/"true",
           "Alternate staged rows between two arena slots so that a group's "
           "fetch overlaps the previous group's attention">
  ];
  let dependentDialects = ["::mlir::dhs::DhsDialect"];
  let statistics = [
    Statistic<"numReplayed", "replayed-fetches",
              "Fetches replaced by an earlier fetch of the same group">,
    Statistic<"arenaBytes", "arena-bytes", "Bytes of the planned arena">
  ];
}

def DhsDraftRing : Pass<"dhs-draft-ring", "::mlir::func::FuncOp"> {
  let summary = "Lower draft KV ring appends and reads to index arithmetic";
  let description = [{
    A draft ring holds the drafter's KV for the last `W` positions of each
    request. Appends and reads become a `dhs.ring_index` (slot = position
    modulo `W`) into a scratch index buffer and a `dhs.copy_rows` that
    scatters into or gathers from the ring.

    Before:
    ```mlir
    dhs.ring_append rows(%kv : memref<4x5x1x1152xi8>)
        positions(%pos : memref<4xi32>) into(%ring : memref<4x128x1x1152xi8>)
    ```
    After:
    ```mlir
    %slots = dhs.scratch : memref<4x5xi32>
    dhs.ring_index positions(%pos : memref<4xi32>) offset = 0 window = 128
        into(%slots : memref<4x5xi32>)
    dhs.copy_rows src(%kv : memref<4x5x1x1152xi8>)
        dst(%ring : memref<4x128x1x1152xi8>) dst_index(%slots : memref<4x5xi32>)
    ```
  }];
  let dependentDialects = ["::mlir::dhs::DhsDialect"];
  let statistics = [
    Statistic<"numLowered", "ring-ops", "Ring appends and reads lowered">
  ];
}

def DhsSpecialize : Pass<"dhs-specialize", "::mlir::func::FuncOp"> {
  let summary = "Fold a serving configuration into static shapes";
  let description = [{
    A step written once for a model leaves the serving configuration open:
    requests in the batch, query positions (1 for decode, gamma + 1 for
    verify), heads, top-k and tier capacities as `?`. Code generation needs
    static kernels. This pass sets every dynamic dimension of the step's
    arguments from the configuration, by what the dimension means to the ops
    that use it (dimension 0 of every batched operand is the request, the
    dimensions of queries, selections and outputs are positions, heads and
    top-k; a decision step's union and fetched lists are [requests, Q x K],
    its slot tables [HBM slots] and its plan list [2 x requests x Q x K]; an
    aging step's appends are [requests, 4], one recorded append per request
    at most, its slot tables [HBM slots] and its list [2 x requests]), and
    fixes the pools' capacities. An operand shared by two ops (a list
    written by plan_promotions or age_rows and read by place_rows) takes
    the dimensions the ops give it: place_rows gives none, and two ops that
    give different sizes are an error. A dimension the configuration leaves
    open (0) stays dynamic; a static dimension that disagrees with the
    configuration is an error.

    Before (`--dhs-specialize="requests=8 positions=5 heads=64 topk=2048"`):
    ```mlir
    func.func @step(%q: memref<?x?x?x576xbf16>, %rows: memref<?x?x?xi32>, ...)
    ```
    After:
    ```mlir
    func.func @step(%q: memref<8x5x64x576xbf16>, %rows: memref<8x5x2048xi32>, ...)
    ```
  }];
  let options = [
    Option<"requests", "requests", "int64_t", /*default=*/"0",
           "Requests per step (B)">,
    Option<"positions", "positions", "int64_t", /*default=*/"0",
           "Query positions per request (Q: 1, or gamma + 1)">,
    Option<"heads", "heads", "int64_t", /*default=*/"0", "Query heads (H)">,
    Option<"topk", "topk", "int64_t", /*default=*/"0",
           "Selected rows per query (K)">,
    Option<"hbmSlots", "hbm-slots", "int64_t", /*default=*/"0",
           "HBM slots of every pool">
  ];
  let dependentDialects = ["::mlir::dhs::DhsDialect"];
  let statistics = [
    Statistic<"numDims", "dims", "Dynamic dimensions made static">
  ];
}

#endif // DHS_PASSES_TD
