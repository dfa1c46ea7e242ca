//===- DhsOps.td - dhs operations --------------------------*- tablegen -*-===//

#ifndef DHS_OPS_TD
#define DHS_OPS_TD

include "dialects/DhsDialect.td"
include "dialects/DhsAttrs.td"
include "dialects/DhsTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonTypeConstraints.td"

//===----------------------------------------------------------------------===//
// Tiers
//===----------------------------------------------------------------------===//

def Dhs_PoolTierOp : Dhs_Op<"pool_tier", [Pure]> {
  let summary = "The rows of one tier of a KV pool, as a memref";
  let description = [{
    Views one tier of a KV pool as a `[capacity, row elements]` memref: the
    HBM slots or the host store (a device-mapped pinned buffer that kernels
    read directly). The dimension is `?` when the pool's capacity is chosen
    at run time.

    ```mlir
    %slots = dhs.pool_tier hbm of %pool
        : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<4096x576xbf16>
    ```
  }];
  let arguments = (ins Dhs_Tier:$tier, Dhs_KVPoolType:$pool);
  let results = (outs MemRefRankOf<[AnyType], [2]>:$rows);
  let assemblyFormat = [{
    $tier `of` $pool attr-dict `:` qualified(type($pool)) `->` type($rows)
  }];
  let hasVerifier = 1;
}

def Dhs_StepStatusOp : Dhs_Op<"step_status", [Pure]> {
  let summary = "The runtime-owned error word of the current step";
  let description = [{
    A device word the runtime zeroes before a step and reads after it.
    Kernels OR error bits into it when an input is invalid instead of reading
    out of bounds: 1 = a row id outside its request's history, 2 = a slot
    outside the HBM tier, 4 = a host row outside the host store.

    ```mlir
    %status = dhs.step_status : memref<1xi32>
    ```
  }];
  let results = (outs MemRefOf<[I32]>:$status);
  let assemblyFormat = "attr-dict `:` type($status)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Dhs_SparseAttentionOp : Dhs_Op<"sparse_attention"> {
  let summary = "Exact attention over selected KV rows, resident or on the host";
  let description = [{
    For each request `b`, query position `q` and head `h`, attends over the
    rows selected by `row_ids[b, q, :]` (top-k indices into the request's
    history; -1 = no row) with MLA-absorbed attention: keys are whole rows
    (`qk_dim` elements), values the first `v_dim` elements of the same rows.

    Each selected row is read from HBM slot `slots[b, q, k]` when that is
    >= 0, otherwise from the host store at `history_start[b] + row`. Both
    copies hold the same bytes, so the result does not depend on residency:

        s_k = softmax_scale * dot(queries[b, q, h, :], row_k)
        output[b, q, h, :] = sum_k softmax(s)_k * row_k[0 : v_dim]

    A row id outside `[0, history_len[b])`, a slot outside the HBM tier or a
    host row outside the store is an error reported through the step status,
    never read. Queries without any valid row produce zeros.

    ```mlir
    dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
        rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>)
        output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
    ```
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[BF16], [4]>, "queries [B, Q, H, qk_dim]", [MemRead]>:$queries,
    Arg<MemRefRankOf<[I32], [3]>, "selected row ids [B, Q, K]", [MemRead]>:$row_ids,
    Arg<MemRefRankOf<[I32], [3]>, "HBM slot of each selected row, or -1 [B, Q, K]", [MemRead]>:$slots,
    Arg<MemRefRankOf<[I64], [1]>, "first host row of each request [B]", [MemRead]>:$history_start,
    Arg<MemRefRankOf<[I32], [1]>, "history length of each request [B]", [MemRead]>:$history_len,
    Dhs_KVPoolType:$pool,
    Arg<MemRefRankOf<[BF16], [4]>, "attention output [B, Q, H, v_dim]", [MemWrite]>:$output,
    F32Attr:$softmax_scale
  );
  let assemblyFormat = [{
    `queries` `(` $queries `:` type($queries) `)`
    `rows` `(` $row_ids `:` type($row_ids) `)`
    `slots` `(` $slots `:` type($slots) `)`
    `history` `(` $history_start `,` $history_len `:`
        type($history_start) `,` type($history_len) `)`
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    `output` `(` $output `:` type($output) `)`
    `scale` `=` $softmax_scale attr-dict
  }];
  let hasVerifier = 1;
  // Folds memref.cast producers that only erase static shape information.
  let hasFolder = 1;
}

#endif // DHS_OPS_TD
