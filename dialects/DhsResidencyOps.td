//===- DhsResidencyOps.td - residency decisions on the device -*- tablegen -*-===//
//
// Ops that make the residency controller's decisions over the device state
// (issue 10). Included from DhsOps.td (one op library, one generated file).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RESIDENCY_OPS_TD
#define DHS_RESIDENCY_OPS_TD

def Dhs_PlanPromotionsOp : Dhs_Op<"plan_promotions", [AttrSizedOperandSegments]> {
  let summary = "A step's promotion decisions, made over the device residency state";
  let description = [{
    Decides, for one layer group at a step's end, which HBM slot each row the
    step fetched from the host store is promoted into, in the data-parallel
    form of the residency controller's rule (adaptive policy, no floor;
    `ParallelPromotionTest` holds the controller to it). The fetched rows are
    ranked lanes first, then as listed (`fetched[b, :]`: row ids of lane b's
    request, ascending, distinct, not resident; the first -1 ends the list;
    at most `promotions` of each lane when given). Promotion i takes

    - while i < min(budget, free count): the i-th slot the free stack hands
      out (`free[count - 1 - i]`);
    - then victim i - that, where the victims are the candidates (hot slots,
      `hot[s] >= 0`, not used this step: last use < the step, word 0 of the
      pool's step log) in CLOCK hand order from `control[hand]`, the
      unreferenced ones (last use == `cleared[s]`) first and then the
      referenced ones (the hand's second lap);
    - beyond the candidates, nothing (the row stays on the host).

    It writes the decisions as a list for `dhs.place_rows`
    (`PromotionPlanLayout` in `runtime/abi/Contract.h`): entry i is promotion
    i's (host row = `history_start[b]` + row, slot) or (-1, -1), entry
    B x N + v eviction v's (evicted host row, -1) or (-1, -1). It updates the
    state as the controller would: `hot` of every filled slot (its new host
    row), `cleared` (filled slots referenced, -1; the referenced candidates
    the hand passed lose their reference), and `control`: the new hand, the
    free count left, the rows promoted and the hot rows released, the rows
    listed before the cap, the excess (hot rows above the floor: + the
    promotions into free slots) and the controller's noVictimStep memo (the
    step when victims were wanted and the candidates ran out; a memo equal
    to the step on entry finds no victims), which the host reads back. LRU
    and LRU-2 orders are not generated yet (the verifier refuses them). Bad
    control words (a hand outside the slots, a free count beyond the stack)
    or a free-stack slot outside the slots are reported (`BadSlot`) and
    nothing is promoted for them.

    The launch reads the step's status word at entry: when a launch before
    it in the step failed (non-zero), it plans nothing (every count 0, every
    list entry (-1, -1), the state and the other control words untouched),
    so the `dhs.place_rows` after it does nothing.

    With `sources(%fetched_sources) into(%sources)`, each fetched row's
    write-back ring entry (`fetched_sources[b, j]` beside `fetched[b, j]`)
    goes to the list beside its promotion: `sources[i]` is the entry of
    promotion i's row, -1 for evictions and empty entries, so that
    `dhs.place_rows` copies the row from the ring.

    Before, the residency state and the step's fetched rows; after lowering
    (`dhs-lower-to-gpu`) one launch of one CTA:

    ```mlir
    dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        fetched(%fetched : memref<8x256xi32>) history(%start : memref<8xi64>)
        hot(%hot : memref<65536xi64>) cleared(%cleared : memref<65536xi32>)
        free(%free : memref<65536xi32>) control(%control : memref<8xi32>)
        into(%rows, %slots : memref<4096xi64>, memref<4096xi32>) replacement = clock
    dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        rows(%rows : memref<4096xi64>) slots(%slots : memref<4096xi32>)
    ```
    ```mlir
    %recency = dhs.pool_recency of %pool : ... -> memref<?x2xi32>
    %log = dhs.pool_log of %pool : ... -> memref<?xi32>
    gpu.launch_func @plan_promotions::@plan_promotions blocks in (%c1, %c1, %c1)
        threads in (%c1024, %c1, %c1) args(%fetched : memref<8x256xi32>, ...,
        %recency : memref<?x2xi32>, %log : memref<?xi32>, %status : memref<1xi32>)
        {dhs.op = "plan_promotions", dhs.roles = ["fetched_rows", ...]}
    ```
  }];
  let arguments = (ins Dhs_KVPoolType:$pool,
      Arg<MemRefRankOf<[I32], [2]>, "fetched row ids [B, N], -1 ends a lane", [MemRead]>:$fetched,
      Arg<MemRefRankOf<[I64], [1]>, "first host row per request [B]", [MemRead]>:$history_start,
      Arg<MemRefRankOf<[I64], [1]>,
          "host row of each hot slot [slots], -1 = not hot", [MemRead, MemWrite]>:$hot,
      Arg<MemRefRankOf<[I32], [1]>,
          "last use the CLOCK hand cleared [slots]", [MemRead, MemWrite]>:$cleared,
      Arg<MemRefRankOf<[I32], [1]>, "free stack [slots], the next slot last", [MemRead]>:$free,
      Arg<MemRefRankOf<[I32], [1]>,
          "hand, free count, budget, excess, memo; counts out [8]", [MemRead, MemWrite]>:$control,
      Arg<MemRefRankOf<[I64], [1]>, "host rows to place or release [2 B N]", [MemWrite]>:$rows,
      Arg<MemRefRankOf<[I32], [1]>, "their slots [2 B N], -1 = released", [MemWrite]>:$slots,
      Arg<Optional<MemRefRankOf<[I32], [2]>>,
          "write-back ring entry of each fetched row, -1 = none [B, N]",
          [MemRead]>:$fetched_sources,
      Arg<Optional<MemRefRankOf<[I32], [1]>>,
          "ring entry of each listed row [2 B N], -1 = the host store", [MemWrite]>:$sources,
      Dhs_Replacement:$replacement,
      OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$promotions);
  let assemblyFormat = [{
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    `fetched` `(` $fetched `:` type($fetched) `)`
    `history` `(` $history_start `:` type($history_start) `)`
    `hot` `(` $hot `:` type($hot) `)`
    `cleared` `(` $cleared `:` type($cleared) `)`
    `free` `(` $free `:` type($free) `)`
    `control` `(` $control `:` type($control) `)`
    `into` `(` $rows `,` $slots `:` type($rows) `,` type($slots) `)`
    (`sources` `(` $fetched_sources^ `:` type($fetched_sources) `)`
        `into` `(` $sources `:` type($sources) `)`)?
    `replacement` `=` $replacement (`promotions` `=` $promotions^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_SortRowsOp : Dhs_Op<"sort_rows", [AttrSizedOperandSegments]> {
  let summary = "Each request's row ids in ascending order, -1 last";
  let description = [{
    Sorts each request's list of row ids (`rows[b, :]`) in ascending order
    into `sorted[b, :]`, every -1 (no row) after the row ids; repeats stay
    (no deduplication). In the decision step it puts the distinct missing
    rows of `dhs.union_missing` (listed in order of first appearance) into
    the ascending order in which the residency controller promotes them,
    the fetched rows of `dhs.plan_promotions`. `sorted` may be `rows`
    itself (each request's list is read whole before it is written).

    With `carry(%values) into(%sorted_values)`, each row's value (its
    write-back ring entry, in the decision step) moves with it:
    `sorted_values[b, j]` is the value of the row at `sorted[b, j]` (for
    repeated rows, one of their values; -1 after the rows).

    ```mlir
    dhs.sort_rows rows(%union : memref<16x8192xi32>)
        into(%sorted : memref<16x8192xi32>)
    ```

    After lowering (`dhs-lower-to-gpu`) one launch, a CTA per request that
    sorts its list in shared memory (bitonic, up to 8192 rows a request).
  }];
  let arguments = (ins Arg<MemRefRankOf<[I32], [2]>, "row ids [B, N], -1 = none", [MemRead]>:$rows,
      Arg<MemRefRankOf<[I32], [2]>, "the same rows ascending, -1 last [B, N]", [MemWrite]>:$sorted,
      Arg<Optional<MemRefRankOf<[I32], [2]>>, "a value per row [B, N]", [MemRead]>:$values,
      Arg<Optional<MemRefRankOf<[I32], [2]>>,
          "the values in the rows' sorted order [B, N]", [MemWrite]>:$sorted_values);
  let assemblyFormat = [{
    `rows` `(` $rows `:` type($rows) `)` `into` `(` $sorted `:` type($sorted) `)`
    (`carry` `(` $values^ `:` type($values) `)`
        `into` `(` $sorted_values `:` type($sorted_values) `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

def Dhs_AgeRowsOp : Dhs_Op<"age_rows"> {
  let summary = "The appends between steps, replayed over the device residency state";
  let description = [{
    Replays, in call order and with one CTA of 1024 threads, the appends the
    host recorded for one layer group between two steps (`appends[i]`: the
    host row leaving its request's newest window or -1, the new host row (-1:
    padding, skipped), and the request's host range [begin, end);
    `AgeRowsLayout` in `runtime/abi/Contract.h`), as the residency
    controller's append does them (adaptive policy, CLOCK, no floor). Per
    append:

    - the aged row's slot (`map[aged]`) becomes hot (`hot[s] = aged`); when no
      hot row lies in the request's range it is the request's first, which
      resets the victim-search memo (`control[no_victim_step] = 0`) if it
      holds the step (a memo of an earlier step decides nothing and stays);
    - one more optional row: the budget word (optional budget - excess)
      drops by one, the excess word grows by one; below 0 the group is over
      its budget: unless the memo holds the step (word 0 of the pool's step
      log), a CLOCK search from `control[hand]` over the slots takes the
      first candidate (hot, last use < the step) that is unreferenced (last
      use == `cleared[s]`), clearing the references it passes, two laps at
      most; a failed search sets the memo to the step. The victim, or else
      the aged row itself, leaves: its map entry becomes -1, its slot is
      pushed on the free stack, the words go back by one;
    - the new row takes the free stack's top: the map, `[step, 0]` in the
      replacement state, a reference (`cleared = -1`).

    It writes the list for `dhs.place_rows` (`into`, [2 x N]): entry i is
    (append i's new row, its slot after the list) or (-1, -1) when it left HBM
    again in the list, entry N + i (the row append i released, -1) or (-1, -1):
    distinct rows, so place_rows copies the rows and repeats the map writes.
    Bad control words, an aged row without a slot, or an empty free stack are
    reported (`BadSlot`), a host row outside the map `BadHostRow`; that
    append is skipped.

    The kernel keeps the per-append work independent of the table's size
    where it can: whether a request holds a hot row is a count per append
    (built over the hot rows at the launch's first check that needs one,
    kept current after each append), the CLOCK search examines 1024
    slots a trip, and a search is not walked when no slot is a candidate
    (a count of them, built at the launch's first search and kept current:
    such a search would clear nothing and fail). At most 512 appends a
    launch (the runtime splits longer lists).

    ```mlir
    dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        appends(%appends : memref<64x4xi64>) hot(%hot : memref<65536xi64>)
        cleared(%cleared : memref<65536xi32>) free(%free : memref<65536xi32>)
        control(%control : memref<8xi32>)
        into(%rows, %slots : memref<128xi64>, memref<128xi32>)
    dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        rows(%rows : memref<128xi64>) slots(%slots : memref<128xi32>)
    ```
  }];
  let arguments = (ins
    Dhs_KVPoolType:$pool,
    Arg<MemRefRankOf<[I64], [2]>, "recorded appends [N, 4] (AgeRowsLayout)", [MemRead]>:$appends,
    Arg<MemRefRankOf<[I64], [1]>, "host row of each hot slot [slots], -1 = not hot",
        [MemRead, MemWrite]>:$hot,
    Arg<MemRefRankOf<[I32], [1]>, "last use the CLOCK hand cleared [slots]",
        [MemRead, MemWrite]>:$cleared,
    Arg<MemRefRankOf<[I32], [1]>, "free stack [slots], the next slot last",
        [MemRead, MemWrite]>:$free,
    Arg<MemRefRankOf<[I32], [1]>, "hand, free count, budget, memo, excess [8]",
        [MemRead, MemWrite]>:$control,
    Arg<MemRefRankOf<[I64], [1]>, "host rows to place or release [2 N]", [MemWrite]>:$rows,
    Arg<MemRefRankOf<[I32], [1]>, "their slots [2 N], -1 = released", [MemWrite]>:$slots
  );
  let assemblyFormat = [{
    `pool` `(` $pool `:` qualified(type($pool)) `)`
    `appends` `(` $appends `:` type($appends) `)`
    `hot` `(` $hot `:` type($hot) `)`
    `cleared` `(` $cleared `:` type($cleared) `)`
    `free` `(` $free `:` type($free) `)`
    `control` `(` $control `:` type($control) `)`
    `into` `(` $rows `,` $slots `:` type($rows) `,` type($slots) `)` attr-dict
  }];
  let hasVerifier = 1;
}

#endif // DHS_RESIDENCY_OPS_TD
