//===- DhsOps.td - dhs operations --------------------------*- tablegen -*-===//
//
// Ops of one decode step. Data lives in memrefs, written in destination-
// passing style (`into(...)`); the KV pool is a typed value whose tiers are
// viewed as byte memrefs; step-local buffers come from `dhs.scratch`, which
// the plan-staging pass places in the runtime's staging arena.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_OPS_TD
#define DHS_OPS_TD

include "dialects/DhsDialect.td"
include "dialects/DhsAttrs.td"
include "dialects/DhsTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/OpBase.td"

/// Byte memrefs that hold rows: [..., layers, row bytes] x i8.
def Dhs_RowBytes : MemRefOf<[I8]>;

//===----------------------------------------------------------------------===//
// Tiers and buffers
//===----------------------------------------------------------------------===//

def Dhs_PoolTierOp : Dhs_Op<"pool_tier", [Pure]> {
  let summary = "The rows of one tier of a KV pool, as a byte memref";
  let description = [{
    Views one tier of a KV pool as a `[capacity, layers, row bytes]` memref
    of i8: the HBM slots or the host store (a device-mapped pinned buffer
    that kernels read directly). The capacity is `?` when the pool's is.

    ```mlir
    %slots = dhs.pool_tier hbm of %pool
        : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>
          -> memref<4096x1x1152xi8>
    ```
  }];
  let arguments = (ins Dhs_Tier:$tier, Dhs_KVPoolType:$pool);
  let results = (outs MemRefRankOf<[I8], [3]>:$rows);
  let assemblyFormat = [{
    $tier `of` $pool attr-dict `:` qualified(type($pool)) `->` type($rows)
  }];
  let hasVerifier = 1;
}

def Dhs_PoolMapOp : Dhs_Op<"pool_map", [Pure]> {
  let summary = "A KV pool's residency map: the HBM slot of each host row";
  let description = [{
    Views the runtime-owned device table of a pool that gives, for every row
    of the host store, the HBM slot holding a copy of it, or -1. Kernels that
    place rows (`dhs.place_rows`) keep it up to date; kernels can look
    selections up in it without the host. Its size is the host capacity.

    ```mlir
    %map = dhs.pool_map of %pool
        : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>
          -> memref<?xi32>
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool);
  let results = (outs MemRefRankOf<[I32], [1]>:$map);
  let assemblyFormat = [{
    `of` $pool attr-dict `:` qualified(type($pool)) `->` type($map)
  }];
  let hasVerifier = 1;
}

def Dhs_PoolRecencyOp : Dhs_Op<"pool_recency", [Pure]> {
  let summary = "A KV pool's replacement state: when each HBM slot was used";
  let description = [{
    Views the runtime-owned device table that holds, for every HBM slot of
    the pool, `[last use, previous use]`: the steps in which the slot's row
    was last and next-to-last selected (or placed; 0 = never). It is the
    state LRU and LRU with frequency order victims by, and CLOCK's reference
    bits are derived from it; the kernels keep it on the device:
    `dhs.resolve` stamps every slot its selections hit (one atomic exchange
    per hit) and `dhs.place_rows` stamps every slot it fills. The residency
    controller mirrors it from the step log (`dhs.pool_log`), so its victim
    choices never wait for a copy of the selections.

    ```mlir
    %recency = dhs.pool_recency of %pool
        : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>
          -> memref<4096x2xi32>
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool);
  let results = (outs MemRefRankOf<[I32], [2]>:$recency);
  let assemblyFormat = [{
    `of` $pool attr-dict `:` qualified(type($pool)) `->` type($recency)
  }];
  let hasVerifier = 1;
}

def Dhs_PoolLogOp : Dhs_Op<"pool_log", [Pure]> {
  let summary = "A KV pool's step log: what this step's selections hit and missed";
  let description = [{
    Views the runtime-owned device buffer in which `dhs.resolve` records,
    for the residency controller, what a step's selections found, so that
    the host books the step from a short list instead of the selections: a
    header (the step number, which the runtime writes before the step, then
    the counts of distinct slots hit, of selections that missed and of
    valid selections), the slots hit, each once, and the misses as (lane,
    row id) pairs, both in no particular order. The words are laid out as
    `StepLogLayout` in `runtime/abi/Contract.h` says: for `N` selections the
    log has room for `N` hits and `N` misses.

    Counts go on past a short buffer (entries that do not fit are dropped,
    which the runtime reports); an empty buffer (size 0) records nothing, so
    a runtime that runs one resolve per layer books each group once.

    ```mlir
    %log = dhs.pool_log of %pool
        : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>
          -> memref<?xi32>
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool);
  let results = (outs MemRefRankOf<[I32], [1]>:$log);
  let assemblyFormat = [{
    `of` $pool attr-dict `:` qualified(type($pool)) `->` type($log)
  }];
}

def Dhs_PoolWriteBackOp : Dhs_Op<"pool_write_back", [Pure]> {
  let summary = "A KV pool's write-back ring: the host rows a step read, kept for its promotions";
  let description = [{
    Views the runtime-owned HBM buffer into which the attentions of a step
    write the missing rows they read from the host store, so that the
    step's promotions (`dhs.place_rows` with `sources`) copy them from HBM
    instead of reading the host store a second time. It has a token's rows
    per entry, `[entries, layers, row_bytes]` bytes like the tiers; entry
    `w` holds the row of the `w`-th miss `dhs.resolve` booked in the step
    log, for the layers whose attentions ran. The runtime chooses the number
    of entries (0 is allowed: then nothing is written back); misses past
    the last entry are read from the host store again.

    ```mlir
    %ring = dhs.pool_write_back of %pool
        : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>
          -> memref<?x4x656xi8>
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool);
  let results = (outs MemRefRankOf<[I8], [3]>:$ring);
  let assemblyFormat = [{
    `of` $pool attr-dict `:` qualified(type($pool)) `->` type($ring)
  }];
  let hasVerifier = 1;
}

def Dhs_StepStatusOp : Dhs_Op<"step_status", [Pure]> {
  let summary = "The runtime-owned error word of the current step";
  let description = [{
    A device word the runtime zeroes before a step and reads after it.
    Kernels OR an error bit into it when an input is invalid instead of
    reading out of bounds (`BadRowId`: a row id outside its request's
    history, `BadSlot`, `BadHostRow`, `BadStagingIndex`,
    `HistoryBeyondScores`, `BadWindowTokens`). The bits and the runtime's
    messages for them are defined once, in `runtime/abi/StatusBits.def`.

    ```mlir
    %status = dhs.step_status : memref<1xi32>
    ```
  }];
  let results = (outs MemRefOf<[I32]>:$status);
  let assemblyFormat = "attr-dict `:` type($status)";
  let hasVerifier = 1;
}

def Dhs_GroupBindingsOp : Dhs_Op<"group_bindings", [Pure]> {
  let summary = "The runtime-owned table of a grouped launch";
  let description = [{
    A kernel that one CTA runs for a layer group (`dhs.plan_promotions`,
    `dhs.age_rows`) takes this table as its last parameter, so that the
    runtime can run it over several groups in one launch: CTA `z` of the
    grid works on the `z`-th group, whose buffer for the kernel's parameter
    `p` lies `table[z, p]` bytes from the buffer the launch passes (a
    multiple of the element size; 0 for the launch's own group). The
    runtime fills the table once per set of groups and sets the grid's z
    size; a launch of one group passes a row of zeros. Created by
    dhs-lower-to-gpu.

    ```mlir
    %bindings = dhs.group_bindings : memref<?x?xi64>
    ```
  }];
  let results = (outs MemRefRankOf<[I64], [2]>:$table);
  let assemblyFormat = "attr-dict `:` type($table)";
  let hasVerifier = 1;
}

def Dhs_ScratchOp : Dhs_Op<"scratch", [
    MemoryEffects<[MemAlloc<DefaultResource>]>]> {
  let summary = "A step-local buffer in the runtime's staging arena";
  let description = [{
    A buffer that lives for part of one step: fetched rows, union lists,
    index maps. The runtime owns one staging arena per step; the plan-staging
    pass gives every scratch buffer its `offset` (bytes into the arena) and,
    for double-buffered staging, its `slot`. The contents on entry are
    undefined.

    ```mlir
    %stage = dhs.scratch : memref<4x2048x4x656xi8>
    %stage = dhs.scratch {offset = 0 : i64, slot = 1 : i64} : memref<...>
    ```
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<I64Attr>:$slot);
  let results = (outs AnyStaticShapeMemRef:$buffer);
  let assemblyFormat = "attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Selection and residency
//===----------------------------------------------------------------------===//

def Dhs_TopKOp : Dhs_Op<"topk"> {
  let summary = "Top-k rows of the indexer's scores, causally bounded";
  let description = [{
    For each request `b` and query position `q`, writes into `rows[b, q, :]`
    the ids of the `K` highest-scoring rows among those the query may see:
    query `q` of `Q` sees rows `[0, history_len[b] - (Q - 1 - q))` (the last
    position sees the whole history). Scores are the lightning indexer's
    output, one per history row. Ties go to the lower row id; slots past the
    valid rows hold -1. Ids come out in descending score order. A history
    longer than the `N` scored rows (or negative) is reported through the
    step status (`HistoryBeyondScores`) and selection stays within the
    scored rows.

    ```mlir
    dhs.topk scores(%s : memref<4x1x8192xf32>) history(%len : memref<4xi32>)
        into(%rows : memref<4x1x2048xi32>)
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[F32], [3]>, "indexer scores [B, Q, N]", [MemRead]>:$scores,
    Arg<MemRefRankOf<[I32], [1]>, "history length [B]", [MemRead]>:$history_len,
    Arg<MemRefRankOf<[I32], [3]>, "selected row ids [B, Q, K]", [MemWrite]>:$rows
  );
  let assemblyFormat = [{
    `scores` `(` $scores `:` type($scores) `)`
    `history` `(` $history_len `:` type($history_len) `)`
    `into` `(` $rows `:` type($rows) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_ResidencyOp : Dhs_Op<"residency"> {
  let summary = "The protected working set of a pool and hints for the rest";
  let description = [{
    Tells the runtime how to keep the pool's HBM tier. The **protected
    working set** of every admitted request is always resident: its `newest`
    tokens (which include the tokens a verify phase attends from) and a
    floor of `floor` hot slots. The rest of HBM is **optional residency**,
    steered by hints the runtime follows as the load allows: the `policy`
    (`adaptive`: recently selected rows stay while memory is spare and are
    released when requests arrive; `fixed`: a HiSparse-style hot buffer of
    `floor` slots per request), the `replacement` of hot rows (CLOCK, LRU,
    or LRU with frequency, `lru2`: the row whose use before the last is
    oldest goes first; by default CLOCK for adaptive and LRU for fixed) and
    at most
    `promotions` rows copied into HBM per request and step (no limit when
    absent). It is recorded in the step's manifest; no kernel runs it.

    ```mlir
    dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 65536, host = ?>)
        newest = 128 floor = 64 policy = adaptive replacement = clock
    ```
  }];
  let arguments = (ins
    Dhs_KVPoolType:$pool,
    ConfinedAttr<I64Attr, [IntPositive]>:$newest,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$floor,
    Dhs_ResidencyPolicy:$policy,
    OptionalAttr<Dhs_Replacement>:$replacement,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$promotions
  );
  let assemblyFormat = [{
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    `newest` `=` $newest (`floor` `=` $floor^)? `policy` `=` $policy
    (`replacement` `=` $replacement^)? (`promotions` `=` $promotions^)?
    attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The replacement in effect: the given one, else CLOCK for adaptive and
    /// LRU for fixed residency.
    Replacement getEffectiveReplacement();
  }];
}

def Dhs_ResolveOp : Dhs_Op<"resolve"> {
  let summary = "Map selected row ids to resident HBM slots, or -1";
  let description = [{
    `slots[b, q, k] = map[history_start[b] + rows[b, q, k]]`: the HBM slot
    that holds the row, read from the pool's residency map (`dhs.pool_map`,
    kept on the device by `dhs.place_rows`), or -1 when the row is only on
    the host (and -1 for absent rows). Selections never go through the host.
    Row ids outside `[0, history_len[b])`, or host rows outside the store,
    are reported through the step status (`BadRowId`) and resolve to -1.

    It also books the step on the device for the residency controller
    (unless the pool's step log is empty): every slot hit is stamped with
    the step number in the pool's replacement state (`dhs.pool_recency`:
    last use, and the previous last use on the slot's first hit of the
    step), and the step log (`dhs.pool_log`) receives the distinct slots
    hit, the misses as (lane, row id) and the count of valid selections. A
    slot outside the recency table is reported (`BadSlot`).

    With `write_back`, a booking resolve also gives each missing selection
    its entry in the pool's write-back ring (`dhs.pool_write_back`): the
    index of its miss in the step log when the ring has that many entries,
    else -1 (and -1 for every other selection). The attentions that read the
    row from the host store write it there, and the step's promotions copy
    it from there (`dhs.union_missing` with `write_back` carries it along).
    A resolve with an empty log leaves `write_back` as it is.

    ```mlir
    dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        rows(%rows : memref<4x1x2048xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        into(%slots : memref<4x1x2048xi32>)
        write_back(%ring_entries : memref<4x1x2048xi32>)
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool,
      Arg<MemRefRankOf<[I32], [3]>, "selected row ids [B, Q, K]", [MemRead]>:$rows,
      Arg<MemRefRankOf<[I64], [1]>, "first host row per request [B]", [MemRead]>:$history_start,
      Arg<MemRefRankOf<[I32], [1]>, "history length [B]", [MemRead]>:$history_len,
      Arg<MemRefRankOf<[I32], [3]>, "slot per selected row [B, Q, K]", [MemWrite]>:$slots,
      Arg<Optional<MemRefRankOf<[I32], [3]>>,
          "write-back ring entry per selected row, -1 = none [B, Q, K]", [MemWrite]>:$write_back);
  let assemblyFormat = [{
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    `rows` `(` $rows `:` type($rows) `)`
    `history` `(` $history_start `,` $history_len `:`
        type($history_start) `,` type($history_len) `)`
    `into` `(` $slots `:` type($slots) `)`
    (`write_back` `(` $write_back^ `:` type($write_back) `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_PlaceRowsOp : Dhs_Op<"place_rows"> {
  let summary = "Copy host rows into HBM slots and record them in the pool's map";
  let description = [{
    The residency controller's decisions, carried out on the device in one
    launch: for each `i` with `rows[i] >= 0` (a host-store row; -1 pads the
    list), when `slots[i] >= 0` the token's rows for every layer of the group
    are copied from the host store into HBM slot `slots[i]` and the pool's
    residency map records `map[rows[i]] = slots[i]`; when `slots[i] == -1`
    only the map changes (`map[rows[i]] = -1`: the row left HBM). A filled
    slot's replacement state (`dhs.pool_recency`) becomes `[step, 0]`, the
    step number read from the pool's step log (word 0; an empty log stamps
    nothing). Rows must
    be distinct within one op. A host row outside the store (`BadHostRow`)
    or a slot outside the HBM tier (`BadSlot`) is reported and nothing is
    written for it. The runtime places promoted, appended and admitted rows,
    and releases evicted ones, this way after the step that read them.

    With `sources`, a row whose `sources[i] >= 0` is copied from that entry
    of the pool's write-back ring (`dhs.pool_write_back`: HBM to HBM; the
    step's attentions wrote it there when they read it from the host store)
    instead of from the host store. An entry outside the ring is reported
    (`BadSlot`) and nothing is written for the row.

    ```mlir
    dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        rows(%rows : memref<4096xi64>) slots(%slots : memref<4096xi32>)
        sources(%sources : memref<4096xi32>)
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool,
      Arg<MemRefRankOf<[I64], [1]>, "host-store rows [N], -1 = none", [MemRead]>:$rows,
      Arg<MemRefRankOf<[I32], [1]>, "HBM slot of each row [N], -1 = released", [MemRead]>:$slots,
      Arg<Optional<MemRefRankOf<[I32], [1]>>,
          "write-back ring entry holding each row [N], -1 = the host store", [MemRead]>:$sources);
  let assemblyFormat = [{
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    `rows` `(` $rows `:` type($rows) `)`
    `slots` `(` $slots `:` type($slots) `)`
    (`sources` `(` $sources^ `:` type($sources) `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Retrieval
//===----------------------------------------------------------------------===//

def Dhs_FetchOp : Dhs_Op<"fetch", [AttrSizedOperandSegments]> {
  let summary = "Copy the missing selected rows of a layer group into staging";
  let description = [{
    For every listed row `rows[b, i...]` that is not resident (its slot is -1,
    or every listed row when `slots` is absent), copies the token's rows for
    all layers of the group from the host store into `staging[b, i]`, where
    `i` is the flattened position in the list. Resident and absent (-1)
    entries leave their staging rows untouched. One fetch serves every layer
    of the group: it is the group's miss plan.

    With `ready` (cleared to 0 by the runtime before the fetch), the fetch
    runs beside the attention that reads its staging (`dhs.attention` with
    the same `ready`) and copies the list a tile of 64 entries at a time,
    from the first tiles of each request on: it claims tile `t` of request
    `b` (`ready[b, t]` 0 -> 2) and marks it staged once copied (1). A tile
    the attention reached first (it took the flag: 3) is skipped: the
    attention reads those rows from the host store itself.

    With `write_back(%entries)` (decision steps: `dhs.resolve` gives the
    entries, shaped like `rows`), each token copied is also written into the
    pool's write-back ring (`dhs.pool_write_back`) at its selection's entry
    unless that is -1, so the step's promotions copy it from HBM instead of
    reading the host store again. An entry outside the ring is reported
    (`BadSlot`) and not written.

    ```mlir
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        into(%stage : memref<4x4096x4x656xi8>)
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
        write_back(%entries : memref<4x2x2048xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        into(%stage : memref<4x4096x4x656xi8>)
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool,
      Arg<MemRefOf<[I32]>, "row ids [B, ...]", [MemRead]>:$rows,
      Arg<Optional<MemRefOf<[I32]>>, "slots, shaped like rows", [MemRead]>:$slots,
      Arg<Optional<MemRefOf<[I32]>>,
          "write-back ring entry per listed row, -1 = none; shaped like rows", [MemRead]>:$write_back,
      Arg<MemRefRankOf<[I64], [1]>, "first host row per request [B]", [MemRead]>:$history_start,
      Arg<MemRefRankOf<[I32], [1]>, "history length [B]", [MemRead]>:$history_len,
      Arg<MemRefRankOf<[I8], [4]>, "staging [B, N, layers, row bytes]", [MemWrite]>:$staging,
      Arg<Optional<MemRefRankOf<[I32], [2]>>,
          "ready flags [B, N / 64]: who copies a tile of 64 listed rows, and whether it is staged",
          [MemRead, MemWrite]>:$ready);
  let assemblyFormat = [{
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    `rows` `(` $rows `:` type($rows) `)`
    (`slots` `(` $slots^ `:` type($slots) `)`)?
    (`write_back` `(` $write_back^ `:` type($write_back) `)`)?
    `history` `(` $history_start `,` $history_len `:`
        type($history_start) `,` type($history_len) `)`
    `into` `(` $staging `:` type($staging) `)`
    (`ready` `(` $ready^ `:` type($ready) `)`)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The attention ops that read this fetch's staged rows in selection
    /// order (same selection and slots, no staging index), or failure when
    /// the staging buffer has any other user.
    ::mlir::FailureOr<::llvm::SmallVector<AttentionOp>> getSelectionOrderReaders();
  }];
}

def Dhs_UnionMissingOp : Dhs_Op<"union_missing", [AttrSizedOperandSegments]> {
  let summary = "Distinct missing rows of a request's queries, and a remap";
  let description = [{
    For each request, the distinct row ids that some query position selected
    and that are not resident (slot -1), in order of first appearance, into
    `union[b, :]` (padded with -1); and for each selection its position in
    that list (`remap[b, q, k]`, -1 for resident or absent rows). A row that
    several verify positions select is listed once.

    With `write_back(%entries) sources(%sources)`, each listed row's
    write-back ring entry comes along: `sources[b, i]` is `entries[b, q, k]`
    of the selection that lists row `union[b, i]` (-1 past the list), so the
    promotions can copy the row from the ring (`dhs.resolve` gives the
    entries; every selection of a row that several positions select reads
    the same bytes).

    ```mlir
    dhs.union_missing rows(%rows : memref<4x5x2048xi32>)
        slots(%slots : memref<4x5x2048xi32>)
        into(%union, %remap : memref<4x10240xi32>, memref<4x5x2048xi32>)
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[I32], [3]>, "row ids [B, Q, K]", [MemRead]>:$rows,
      Arg<MemRefRankOf<[I32], [3]>, "slots [B, Q, K]", [MemRead]>:$slots,
      Arg<MemRefRankOf<[I32], [2]>, "distinct missing rows [B, Q*K]", [MemWrite]>:$missing,
      Arg<MemRefRankOf<[I32], [3]>, "position in union [B, Q, K]", [MemWrite]>:$remap,
      Arg<Optional<MemRefRankOf<[I32], [3]>>,
          "write-back ring entry per selection, -1 = none [B, Q, K]", [MemRead]>:$write_back,
      Arg<Optional<MemRefRankOf<[I32], [2]>>,
          "ring entry of each listed row, -1 = none [B, Q*K]", [MemWrite]>:$sources);
  let assemblyFormat = [{
    `rows` `(` $rows `:` type($rows) `)`
    `slots` `(` $slots `:` type($slots) `)`
    `into` `(` $missing `,` $remap `:` type($missing) `,` type($remap) `)`
    (`write_back` `(` $write_back^ `:` type($write_back) `)`
        `sources` `(` $sources `:` type($sources) `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_ShareRowsOp : Dhs_Op<"share_rows"> {
  let summary = "Each request's selections reordered: a shared prefix of tiles first";
  let description = [{
    Reorders each query position's selections (`rows[b, q, :]` with their
    `slots[b, q, :]`) so that the positions of a request start with the same
    rows, in whole tiles of `tile` rows: the attention of a verify step can
    then gather (and dequantize) each row of that shared prefix once for all
    its positions.

    For request b, a row id r >= 0 is *common* when every position's list
    `rows[b, q, :]` holds it. C = the common rows, each once, in the order
    of their first occurrence in position 0's list; T = floor(|C| / tile);
    the prefix P = the first T x tile rows of C. For each position q:

    - `shared_rows[b, q, 0 : T x tile]` = P, and `shared_slots[b, q, i]` =
      `slots[b, q, k]` where k is the first occurrence of P[i] in position
      q's list;
    - `shared_rows/shared_slots[b, q, T x tile :]` = the rest of position
      q's entries (every entry but the first occurrence of each prefix row,
      -1 entries and repeats included) in their original order, each with
      its own slot;

    and `tiles[b]` = T when at least `min_missing` rows of P are missing
    from HBM (their slot in position 0 is negative: read from the host),
    else 0. The order does not depend on `min_missing`: a request whose
    prefix is resident keeps the same lists and its positions gather every
    tile alone (sharing pays for host rows, each read once instead of once
    per position; with every row in HBM the cluster's broadcasts cost more
    than the gathers they save). Each output list is a permutation of its
    input (row, slot) pairs, and the first `tiles[b] x tile` entries are the
    same rows in every position of request b. Q = 1 is allowed (every row id
    >= 0 is common). Row ids are not checked against the histories (attention
    reports bad ids): any i32 works; negative ids are never common.

    The outputs must be buffers distinct from `rows` and `slots` (the kernel
    reads the inputs while it writes the outputs; memrefs do not let the
    verifier check this).

    ```mlir
    dhs.share_rows rows(%rows : memref<4x5x256xi32>)
        slots(%slots : memref<4x5x256xi32>) tile = 64 min_missing = 32
        into(%shared_rows, %shared_slots, %tiles
             : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
    ```

    After lowering (`dhs-lower-to-gpu`) one launch, a CTA per request that
    looks the request's selections up in a hash table in shared memory
    (Q <= 8 positions, a portable cluster; Q x K <= 16384 selections).
  }];
  let arguments =
      (ins Arg<MemRefRankOf<[I32], [3]>, "row ids [B, Q, K], -1 = none", [MemRead]>:$rows,
          Arg<MemRefRankOf<[I32], [3]>, "slots [B, Q, K], -1 = host", [MemRead]>:$slots,
          ConfinedAttr<I64Attr, [IntPositive]>:$tile,
          DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$min_missing,
          Arg<MemRefRankOf<[I32], [3]>,
              "the rows, shared prefix first [B, Q, K]", [MemWrite]>:$shared_rows,
          Arg<MemRefRankOf<[I32], [3]>, "their slots [B, Q, K]", [MemWrite]>:$shared_slots,
          Arg<MemRefRankOf<[I32], [1]>, "tiles of the shared prefix [B]", [MemWrite]>:$tiles);
  let assemblyFormat = [{
    `rows` `(` $rows `:` type($rows) `)`
    `slots` `(` $slots `:` type($slots) `)`
    `tile` `=` $tile (`min_missing` `=` $min_missing^)?
    `into` `(` $shared_rows `,` $shared_slots `,` $tiles `:` type($shared_rows) `,`
        type($shared_slots) `,` type($tiles) `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Query positions of a request the op shares rows among at most (a
    /// portable cluster's CTAs).
    static constexpr int64_t kMaxPositions = 8;
    /// Selections of a request (Q x K) at most: the kernel sorts them as
    /// 8-byte keys in shared memory.
    static constexpr int64_t kMaxSelections = 16384;
  }];
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Dhs_AttentionOp : Dhs_Op<"attention", [AttrSizedOperandSegments]> {
  let summary = "Exact sparse attention over resident and staged rows";
  let description = [{
    Attention of layer `layer` of the pool's group for each request, query
    position and head over the selected rows (-1 = none): a row with a slot
    is read from HBM, any other from `staging[b, i]` where `i` is
    `index[b, q, k]` when an index is given, else the flattened position
    `q * K + k` (staging filled by a `dhs.fetch` of the same rows). With
    `ready` (the fetch's flags; no index) and `history` the attention runs
    while the fetch stages the rows, and the two share the tiles of 64
    entries of the flattened list: before it reads a missing row of tile `t`
    the attention takes `ready[b, t]` if nobody has (then it reads the tile's
    missing rows from the host store at `history_start[b] + id` itself, and
    the fetch skips the tile), waits for it if the fetch is copying the
    tile, and reads staging once the tile is staged. Either way the bytes,
    and so the outputs, are the same.
    Keys and values come out of the row format (dequantized for FP8); the
    math, including an optional sliding window (`window(...) size = W`) and
    a shared prefix (`shared(...)`), is that of `dhs.sparse_attention`.

    ```mlir
    dhs.attention queries(%q : memref<4x2x64x576xbf16>)
        rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
        staging(%stage : memref<4x4096x4x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        layer = 2 output(%out : memref<4x2x64x512xbf16>) scale = 0.0416666679
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16], [4]>,
                           "queries [B, Q, H, qk_dim]", [MemRead]>:$queries,
      Arg<MemRefRankOf<[I32], [3]>, "selected row ids [B, Q, K]", [MemRead]>:$row_ids,
      Arg<MemRefRankOf<[I32], [3]>, "slots [B, Q, K]", [MemRead]>:$slots,
      Arg<MemRefRankOf<[I8], [4]>, "staged rows [B, N, layers, row bytes]", [MemRead]>:$staging,
      Arg<Optional<MemRefRankOf<[I32], [3]>>, "staging index [B, Q, K]", [MemRead]>:$staging_index,
      Arg<Optional<MemRefRankOf<[I32], [1]>>,
          "tiles of 64 selections every query position of a request shares [B]",
          [MemRead]>:$shared_tiles,
      Dhs_KVPoolType:$pool,
      Arg<Optional<MemRefRankOf<[I8], [4]>>,
          "sliding-window ring [B, R, layers, row bytes]", [MemRead]>:$window,
      Arg<Optional<MemRefRankOf<[I32], [1]>>,
          "raw tokens of each request [B]", [MemRead]>:$window_tokens,
      Arg<MemRefRankOf<[BF16], [4]>, "output [B, Q, H, v_dim]", [MemWrite]>:$output,
      Arg<Optional<MemRefRankOf<[I32], [2]>>,
          "ready flags of the fetch that stages the rows [B, Q * K / 64]",
          [MemRead, MemWrite]>:$ready,
      Arg<Optional<MemRefRankOf<[I64], [1]>>,
          "first host row per request [B] (with ready)", [MemRead]>:$history_start,
      Arg<Optional<MemRefRankOf<[I32], [1]>>,
          "history length [B] (with ready)", [MemRead]>:$history_len,
      ConfinedAttr<I64Attr, [IntNonNegative]>:$layer, F32Attr:$softmax_scale,
      OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window_size);
  let assemblyFormat = [{
    `queries` `(` $queries `:` type($queries) `)`
    `rows` `(` $row_ids `:` type($row_ids) `)`
    `slots` `(` $slots `:` type($slots) `)`
    `staging` `(` $staging `:` type($staging) `)`
    (`ready` `(` $ready^ `:` type($ready) `)`)?
    (`history` `(` $history_start^ `,` $history_len `:`
        type($history_start) `,` type($history_len) `)`)?
    (`index` `(` $staging_index^ `:` type($staging_index) `)`)?
    (`shared` `(` $shared_tiles^ `:` type($shared_tiles) `)`)?
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    (`window` `(` $window^ `,` $window_tokens `:` type($window) `,`
        type($window_tokens) `)` `size` `=` $window_size)?
    `layer` `=` $layer
    `output` `(` $output `:` type($output) `)`
    `scale` `=` $softmax_scale attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_SparseAttentionOp : Dhs_Op<"sparse_attention",
                                     [AttrSizedOperandSegments]> {
  let summary = "Exact attention with fused retrieval of missing rows";
  let description = [{
    For each request `b`, query position `q` and head `h`, attends over the
    rows selected by `row_ids[b, q, :]` (top-k indices into the request's
    history; -1 = no row) of layer `layer` of the pool's group: keys are
    whole rows (`qk_dim` elements), values the first `v_dim` elements (MLA
    in absorbed form; FP8 formats dequantized).

    Each selected row is read from HBM slot `slots[b, q, k]` when that is
    >= 0, otherwise directly from the host store at `history_start[b] + row`
    (retrieval fused into the kernel). Both copies hold the same bytes, so
    the result does not depend on residency:

        s_k = softmax_scale * dot(queries[b, q, h, :], key_k)
        output[b, q, h, :] = sum_k softmax(s)_k * value_k

    A row id outside `[0, history_len[b])`, a slot outside the HBM tier or a
    host row outside the store is an error reported through the step status,
    never read. Queries without any valid row produce zeros.

    **Write-back** (decision steps): with `write_back(%entries)`, a row read
    from the host store for selection `[b, q, k]` is also written, as read,
    into entry `entries[b, q, k]` of the pool's write-back ring
    (`dhs.pool_write_back`; layer `layer`'s part of the token) when that is
    >= 0, so that the step's promotions copy it from HBM (`dhs.resolve`
    gives the entries, `dhs.place_rows` reads them). MLA rows only; the
    attention stays fused (no staging of its missing rows) and without
    `shared`; with several CTAs a query (128 heads) the first head block's
    CTA writes the rows.

    ```mlir
    dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
        rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
    ```

    **Sliding window** (DeepSeek-V4.1): with `window(%ring, %tokens) size =
    W`, each query also attends, in the same softmax, to the rows of the `W`
    newest raw tokens it may see, which stay resident in HBM beside the
    selected (compressed) rows. `ring[b, p mod R]` holds the rows of raw
    token `p` for all layers of the group (R >= W + Q - 1 tokens, so that
    every query position finds its whole window), and `tokens[b]` counts the
    raw tokens of request `b`. Query `q` of `Q` is token `tokens[b] - Q + q`
    and sees tokens `[max(0, e - W), e)` with `e = tokens[b] - (Q - 1 - q)`.
    A negative token count is reported through the step status
    (`BadWindowTokens`).

    **Shared prefix** (verify steps): with `shared(%tiles)`, the first
    `64 * tiles[b]` row ids of every query position of request `b` are the
    same, in the same order (`dhs.share_rows` orders them so). The tensor-core kernel then runs the `Q` position CTAs of a
    request as a cluster that gathers and dequantizes each shared row once
    for all of them; the result is that of the op without `shared`. A count
    outside `[0, K / 64]` or positions whose prefixes differ are reported
    through the step status (`BadSharedRows`); at most 8 positions (a
    cluster) may share.

    ```mlir
    dhs.sparse_attention queries(%q : memref<8x5x64x512xbf16>)
        rows(%rows : memref<8x5x512xi32>) slots(%slots : memref<8x5x512xi32>)
        history(%start, %len : memref<8xi64>, memref<8xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
        window(%ring, %tokens : memref<8x132x1x528xi8>, memref<8xi32>) size = 128
        layer = 0 output(%out : memref<8x5x64x512xbf16>) scale = 0.0441941724
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16], [4]>,
                           "queries [B, Q, H, qk_dim]", [MemRead]>:$queries,
      Arg<MemRefRankOf<[I32], [3]>, "selected row ids [B, Q, K]", [MemRead]>:$row_ids,
      Arg<MemRefRankOf<[I32], [3]>,
          "HBM slot of each selected row, or -1 [B, Q, K]", [MemRead]>:$slots,
      Arg<MemRefRankOf<[I64], [1]>, "first host row of each request [B]", [MemRead]>:$history_start,
      Arg<MemRefRankOf<[I32], [1]>, "history length of each request [B]", [MemRead]>:$history_len,
      Arg<Optional<MemRefRankOf<[I32], [3]>>,
          "write-back ring entry of each selected row, -1 = none [B, Q, K]", [MemRead]>:$write_back,
      Arg<Optional<MemRefRankOf<[I32], [1]>>,
          "tiles of 64 selections every query position of a request shares [B]",
          [MemRead]>:$shared_tiles,
      Dhs_KVPoolType:$pool,
      Arg<Optional<MemRefRankOf<[I8], [4]>>,
          "sliding-window ring [B, R, layers, row bytes]", [MemRead]>:$window,
      Arg<Optional<MemRefRankOf<[I32], [1]>>,
          "raw tokens of each request [B]", [MemRead]>:$window_tokens,
      Arg<MemRefRankOf<[BF16], [4]>, "attention output [B, Q, H, v_dim]", [MemWrite]>:$output,
      ConfinedAttr<I64Attr, [IntNonNegative]>:$layer, F32Attr:$softmax_scale,
      OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window_size);
  let assemblyFormat = [{
    `queries` `(` $queries `:` type($queries) `)`
    `rows` `(` $row_ids `:` type($row_ids) `)`
    `slots` `(` $slots `:` type($slots) `)`
    `history` `(` $history_start `,` $history_len `:`
        type($history_start) `,` type($history_len) `)`
    (`write_back` `(` $write_back^ `:` type($write_back) `)`)?
    (`shared` `(` $shared_tiles^ `:` type($shared_tiles) `)`)?
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    (`window` `(` $window^ `,` $window_tokens `:` type($window) `,`
        type($window_tokens) `)` `size` `=` $window_size)?
    `layer` `=` $layer
    `output` `(` $output `:` type($output) `)`
    `scale` `=` $softmax_scale attr-dict
  }];
  let hasVerifier = 1;
  // Folds memref.cast producers that only erase static shape information.
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Speculative decoding: phases, draft ring, acceptance
//===----------------------------------------------------------------------===//

def Dhs_VerifyOp : Dhs_Op<"verify", [NoTerminator, SingleBlock,
                                      RecursiveMemoryEffects]> {
  let summary = "The verify phase: gamma + 1 query positions per request";
  let description = [{
    The target model checks `gamma` drafted tokens in one step: every
    selection and attention op inside works on `gamma + 1` query positions
    per request (the last accepted token and the drafts). Passes use the
    phase to share retrieval across those positions.

    ```mlir
    dhs.verify gamma = 4 {
      dhs.fetch ... rows(%rows : memref<4x5x2048xi32>) ...
      dhs.attention queries(%q : memref<4x5x64x576xbf16>) ...
    }
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$gamma);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`gamma` `=` $gamma attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def Dhs_DraftOp : Dhs_Op<"draft", [NoTerminator, SingleBlock,
                                    RecursiveMemoryEffects]> {
  let summary = "The draft phase, with the drafter's KV in a bounded ring";
  let description = [{
    The drafter proposes `block` tokens per request. Its KV lives in a ring of
    `window` tokens per request (`ring`: [B, window, layers, row bytes]),
    never in the target's pools, so drafting neither grows memory with the
    sequence nor pollutes the target's residency. Ring ops inside name this
    ring.

    ```mlir
    dhs.draft ring(%ring : memref<4x128x1x1152xi8>) block = 5 {
      dhs.ring_append ...
    }
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[I8], [4]>, "draft KV ring">:$ring,
                       ConfinedAttr<I64Attr, [IntPositive]>:$block);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `ring` `(` $ring `:` type($ring) `)` `block` `=` $block
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def Dhs_RingAppendOp : Dhs_Op<"ring_append"> {
  let summary = "Append draft KV rows to a request's ring";
  let description = [{
    `ring[b, (positions[b] + i) mod W] = rows[b, i]` for each of the `N`
    new rows: the logical positions `positions[b] .. positions[b] + N - 1`
    land in the ring modulo its window `W`. Needs `N <= W`.

    ```mlir
    dhs.ring_append rows(%kv : memref<4x5x1x1152xi8>)
        positions(%pos : memref<4xi32>) into(%ring : memref<4x128x1x1152xi8>)
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [4]>, "new rows [B, N, layers, bytes]", [MemRead]>:$rows,
    Arg<MemRefRankOf<[I32], [1]>, "first logical position [B]", [MemRead]>:$positions,
    Arg<MemRefRankOf<[I8], [4]>, "ring [B, W, layers, bytes]", [MemRead, MemWrite]>:$ring
  );
  let assemblyFormat = [{
    `rows` `(` $rows `:` type($rows) `)`
    `positions` `(` $positions `:` type($positions) `)`
    `into` `(` $ring `:` type($ring) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_RingReadOp : Dhs_Op<"ring_read"> {
  let summary = "Read the newest rows of a request's draft ring";
  let description = [{
    `rows[b, i] = ring[b, (positions[b] - N + i) mod W]`: the `N` rows at
    logical positions `positions[b] - N .. positions[b] - 1`, oldest first.
    Needs `N <= W` (older positions have been overwritten).

    ```mlir
    dhs.ring_read ring(%ring : memref<4x128x1x1152xi8>)
        positions(%pos : memref<4xi32>) into(%kv : memref<4x128x1x1152xi8>)
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [4]>, "ring [B, W, layers, bytes]", [MemRead]>:$ring,
    Arg<MemRefRankOf<[I32], [1]>, "end position (exclusive) [B]", [MemRead]>:$positions,
    Arg<MemRefRankOf<[I8], [4]>, "rows read [B, N, layers, bytes]", [MemWrite]>:$rows
  );
  let assemblyFormat = [{
    `ring` `(` $ring `:` type($ring) `)`
    `positions` `(` $positions `:` type($positions) `)`
    `into` `(` $rows `:` type($rows) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_RingIndexOp : Dhs_Op<"ring_index"> {
  let summary = "Ring slots of consecutive logical positions";
  let description = [{
    `slots[b, i] = (positions[b] + offset + i) mod window`, non-negative: the
    index arithmetic the draft-ring pass gives ring appends (`offset` = 0)
    and reads (`offset` = -N).

    ```mlir
    dhs.ring_index positions(%pos : memref<4xi32>) offset = -5 window = 128
        into(%slots : memref<4x5xi32>)
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I32], [1]>, "logical positions [B]", [MemRead]>:$positions,
    I64Attr:$offset,
    ConfinedAttr<I64Attr, [IntPositive]>:$window,
    Arg<MemRefRankOf<[I32], [2]>, "ring slots [B, N]", [MemWrite]>:$slots
  );
  let assemblyFormat = [{
    `positions` `(` $positions `:` type($positions) `)`
    `offset` `=` $offset `window` `=` $window
    `into` `(` $slots `:` type($slots) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_CopyRowsOp : Dhs_Op<"copy_rows", [AttrSizedOperandSegments]> {
  let summary = "Move whole rows between row buffers by index";
  let description = [{
    For each request `b` and `i`: `dst[b, dst_index[b, i]] = src[b, i]` when
    `dst_index` is given (a scatter), or `dst[b, i] = src[b, src_index[b, i]]`
    when `src_index` is (a gather). Exactly one index is given. Rows are
    `[layers, row bytes]` byte blocks.

    ```mlir
    dhs.copy_rows src(%kv : memref<4x5x1x1152xi8>)
        dst(%ring : memref<4x128x1x1152xi8>) dst_index(%slots : memref<4x5xi32>)
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[I8], [4]>, "source rows [B, N, layers, bytes]", [MemRead]>:$src,
    Arg<MemRefRankOf<[I8], [4]>, "destination rows [B, M, layers, bytes]", [MemWrite]>:$dst,
    Arg<Optional<MemRefRankOf<[I32], [2]>>, "gather index [B, M]", [MemRead]>:$src_index,
    Arg<Optional<MemRefRankOf<[I32], [2]>>, "scatter index [B, N]", [MemRead]>:$dst_index
  );
  let assemblyFormat = [{
    `src` `(` $src `:` type($src) `)` `dst` `(` $dst `:` type($dst) `)`
    (`src_index` `(` $src_index^ `:` type($src_index) `)`)?
    (`dst_index` `(` $dst_index^ `:` type($dst_index) `)`)?
    attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_AcceptOp : Dhs_Op<"accept"> {
  let summary = "Accept a prefix of the drafted tokens by the drafter's rule";
  let description = [{
    For each request: `draft[b, 0 .. gamma-1]` are the drafted tokens and
    `target[b, 0 .. gamma]` the target model's distributions at the
    `gamma + 1` verified positions (probabilities over the vocabulary).
    `greedy` accepts while `argmax target[b, i] == draft[b, i]`;
    `rejection_sampling` accepts token `i` with probability
    `min(1, p_i(x) / q_i(x))` (`q` = `draft_probs`) and at the first
    rejection samples from `norm(max(0, p - q))`; after `gamma` acceptances
    it samples the bonus token from `target[b, gamma]`. A request's block may
    be shorter than gamma (per-request gamma): a `-1` in `draft[b]` ends it,
    and the rows after it are not read for acceptance; after its last draft
    is accepted the bonus token comes from that position's `target`. Writes
    the number of
    accepted drafts and the next token. Random numbers come from a
    counter-based generator keyed by (`seeds[b]`, `step`, position), so a run
    is reproducible.

    ```mlir
    dhs.accept rejection_sampling draft(%tok : memref<4x4xi32>)
        target(%p : memref<4x5x32000xf32>) draft_probs(%q : memref<4x4x32000xf32>)
        seeds(%seed : memref<4xi64>) step(%step : memref<1xi64>)
        into(%n, %next : memref<4xi32>, memref<4xi32>)
    ```
  }];
  let arguments = (ins
    Dhs_AcceptRule:$rule,
    Arg<MemRefRankOf<[I32], [2]>, "drafted tokens [B, gamma]", [MemRead]>:$draft,
    Arg<MemRefRankOf<[F32], [3]>, "target probabilities [B, gamma+1, V]", [MemRead]>:$target,
    Arg<Optional<MemRefRankOf<[F32], [3]>>, "draft probabilities [B, gamma, V]", [MemRead]>:$draft_probs,
    Arg<MemRefRankOf<[I64], [1]>, "per-request seed [B]", [MemRead]>:$seeds,
    Arg<MemRefRankOf<[I64], [1]>, "step counter [1]", [MemRead]>:$step,
    Arg<MemRefRankOf<[I32], [1]>, "accepted drafts [B]", [MemWrite]>:$accepted,
    Arg<MemRefRankOf<[I32], [1]>, "next token [B]", [MemWrite]>:$next_token
  );
  let assemblyFormat = [{
    $rule `draft` `(` $draft `:` type($draft) `)`
    `target` `(` $target `:` type($target) `)`
    (`draft_probs` `(` $draft_probs^ `:` type($draft_probs) `)`)?
    `seeds` `(` $seeds `:` type($seeds) `)`
    `step` `(` $step `:` type($step) `)`
    `into` `(` $accepted `,` $next_token `:` type($accepted) `,`
        type($next_token) `)` attr-dict
  }];
  let hasVerifier = 1;
}

include "dialects/DhsResidencyOps.td"

#endif // DHS_OPS_TD
