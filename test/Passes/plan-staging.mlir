// RUN: dhs-opt %s --dhs-plan-staging --split-input-file | FileCheck %s
// RUN: dhs-opt %s --dhs-plan-staging="double-buffer=false" --split-input-file | FileCheck %s --check-prefix=SINGLE

// Three layer groups of a verify step, each: union of missing rows, one fetch
// (the group's miss plan, 2 layers), attention per layer. Staged rows
// alternate between two slots; group 2 reuses group 0's slot. Union lists
// and remaps go past the slots, reusing space once dead.
//
// Staged rows: 2 x 128 x 2 x 656 = 335872 bytes. Union list: 2 x 128 x 4 =
// 1024. Remap: 2 x 2 x 64 x 4 = 1024.

// CHECK-LABEL: func.func @three_groups
// CHECK-SAME: dhs.staging_plan = {arena_bytes = 673792 : i64,
// The plan's buffers, in order of definition: bytes, live span (ops in
// program order), offset, and slot for staged rows. Group 1's union list
// and remap reuse group 0's offsets (their spans do not overlap).
// CHECK-SAME: buffers = [{bytes = 335872 : i64, live = array<i64: 2, 8>, offset = 0 : i64, slot = 0 : i64},
// CHECK-SAME: {bytes = 1024 : i64, live = array<i64: 3, 6>, offset = 671744 : i64},
// CHECK-SAME: {bytes = 1024 : i64, live = array<i64: 4, 8>, offset = 672768 : i64},
// CHECK-SAME: {bytes = 335872 : i64, live = array<i64: 9, 14>, offset = 335872 : i64, slot = 1 : i64},
// CHECK-SAME: {bytes = 1024 : i64, live = array<i64: 10, 16>, offset = 671744 : i64},
// CHECK-SAME: {bytes = 1024 : i64, live = array<i64: 11, 17>, offset = 672768 : i64},
// CHECK-SAME: {bytes = 335872 : i64, live = array<i64: 15, 17>, offset = 0 : i64, slot = 0 : i64}],
// CHECK-SAME: slot_bytes = array<i64: 335872, 335872>
// CHECK: dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x128x2x656xi8>
// CHECK: dhs.scratch {offset = 671744 : i64} : memref<2x128xi32>
// CHECK: dhs.scratch {offset = 672768 : i64} : memref<2x2x64xi32>
// CHECK: dhs.scratch {offset = 335872 : i64, slot = 1 : i64} : memref<2x128x2x656xi8>
// CHECK: dhs.scratch {offset = 671744 : i64} : memref<2x128xi32>
// CHECK: dhs.scratch {offset = 672768 : i64} : memref<2x2x64xi32>
// CHECK: dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x128x2x656xi8>

// Without double buffering every group's rows share slot 0.
// SINGLE-LABEL: func.func @three_groups
// SINGLE-SAME: dhs.staging_plan = {arena_bytes = 337920 : i64,
// SINGLE-SAME: slot_bytes = array<i64: 335872, 0>
// SINGLE: dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x128x2x656xi8>
// SINGLE: dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x128x2x656xi8>
// SINGLE: dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x128x2x656xi8>
func.func @three_groups(
    %p0: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
    %p1: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
    %p2: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
    %q: memref<2x2x16x576xbf16>, %rows: memref<2x2x64xi32>, %slots: memref<2x2x64xi32>,
    %start: memref<2xi64>, %len: memref<2xi32>, %out: memref<2x2x16x512xbf16>) {
  dhs.verify gamma = 1 {
    %s0 = dhs.scratch : memref<2x128x2x656xi8>
    %m0 = dhs.scratch : memref<2x128xi32>
    %r0 = dhs.scratch : memref<2x2x64xi32>
    dhs.union_missing rows(%rows : memref<2x2x64xi32>) slots(%slots : memref<2x2x64xi32>)
        into(%m0, %r0 : memref<2x128xi32>, memref<2x2x64xi32>)
    dhs.fetch pool(%p0 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
        rows(%m0 : memref<2x128xi32>) history(%start, %len : memref<2xi64>, memref<2xi32>)
        into(%s0 : memref<2x128x2x656xi8>)
    dhs.attention queries(%q : memref<2x2x16x576xbf16>) rows(%rows : memref<2x2x64xi32>)
        slots(%slots : memref<2x2x64xi32>) staging(%s0 : memref<2x128x2x656xi8>)
        index(%r0 : memref<2x2x64xi32>)
        pool(%p0 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
        layer = 0 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679
    dhs.attention queries(%q : memref<2x2x16x576xbf16>) rows(%rows : memref<2x2x64xi32>)
        slots(%slots : memref<2x2x64xi32>) staging(%s0 : memref<2x128x2x656xi8>)
        index(%r0 : memref<2x2x64xi32>)
        pool(%p0 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
        layer = 1 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679

    %s1 = dhs.scratch : memref<2x128x2x656xi8>
    %m1 = dhs.scratch : memref<2x128xi32>
    %r1 = dhs.scratch : memref<2x2x64xi32>
    dhs.union_missing rows(%rows : memref<2x2x64xi32>) slots(%slots : memref<2x2x64xi32>)
        into(%m1, %r1 : memref<2x128xi32>, memref<2x2x64xi32>)
    dhs.fetch pool(%p1 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
        rows(%m1 : memref<2x128xi32>) history(%start, %len : memref<2xi64>, memref<2xi32>)
        into(%s1 : memref<2x128x2x656xi8>)
    dhs.attention queries(%q : memref<2x2x16x576xbf16>) rows(%rows : memref<2x2x64xi32>)
        slots(%slots : memref<2x2x64xi32>) staging(%s1 : memref<2x128x2x656xi8>)
        index(%r1 : memref<2x2x64xi32>)
        pool(%p1 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
        layer = 0 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679

    %s2 = dhs.scratch : memref<2x128x2x656xi8>
    dhs.fetch pool(%p2 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
        rows(%m1 : memref<2x128xi32>) history(%start, %len : memref<2xi64>, memref<2xi32>)
        into(%s2 : memref<2x128x2x656xi8>)
    dhs.attention queries(%q : memref<2x2x16x576xbf16>) rows(%rows : memref<2x2x64xi32>)
        slots(%slots : memref<2x2x64xi32>) staging(%s2 : memref<2x128x2x656xi8>)
        index(%r1 : memref<2x2x64xi32>)
        pool(%p2 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
        layer = 1 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// The same group's miss plan fetched once per layer: the second fetch is
// replayed from the first (its attention reads the first staging buffer).
// CHECK-LABEL: func.func @replay
// CHECK: %[[S:.*]] = dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x32x2x656xi8>
// CHECK: dhs.fetch
// CHECK-NOT: dhs.fetch
// CHECK: dhs.attention {{.*}} staging(%[[S]] : {{.*}}) {{.*}} layer = 0
// CHECK-NOT: dhs.fetch
// CHECK: dhs.attention {{.*}} staging(%[[S]] : {{.*}}) {{.*}} layer = 1
// CHECK-NOT: dhs.fetch
// CHECK: return
func.func @replay(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
                  %q: memref<2x1x16x576xbf16>, %rows: memref<2x1x32xi32>,
                  %slots: memref<2x1x32xi32>, %start: memref<2xi64>,
                  %len: memref<2xi32>, %o0: memref<2x1x16x512xbf16>,
                  %o1: memref<2x1x16x512xbf16>) {
  %a = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%a : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%a : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 0 output(%o0 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  %b = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%b : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%b : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 1 output(%o1 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// The slots are resolved again between the two fetches: the selection may
// have changed, so the second fetch is not replayed and each attention
// reads its own staged rows (in alternating slots).
// CHECK-LABEL: func.func @replay_blocked_by_resolve
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[O0:[^:]*]]: {{.*}}, %[[O1:[^:]*]]: memref<2x1x16x512xbf16>)
// CHECK-NEXT: %[[A:.*]] = dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x32x2x656xi8>
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[A]] :
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[A]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[O0]] :
// CHECK-NEXT: dhs.resolve pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[SLOTS]] :
// CHECK-NEXT: %[[B:.*]] = dhs.scratch {offset = 83968 : i64, slot = 1 : i64} : memref<2x32x2x656xi8>
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[B]] :
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[B]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 1 output(%[[O1]] :
// CHECK-NEXT: return
func.func @replay_blocked_by_resolve(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
                  %q: memref<2x1x16x576xbf16>, %rows: memref<2x1x32xi32>,
                  %slots: memref<2x1x32xi32>, %start: memref<2xi64>,
                  %len: memref<2xi32>, %o0: memref<2x1x16x512xbf16>,
                  %o1: memref<2x1x16x512xbf16>) {
  %a = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%a : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%a : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 0 output(%o0 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%slots : memref<2x1x32xi32>)
  %b = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%b : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%b : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 1 output(%o1 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// A call declares no memory effects: it may write the selection or the
// staged rows, so the second fetch is not replayed either.
// CHECK-LABEL: func.func @replay_blocked_by_call
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[O0:[^:]*]]: {{.*}}, %[[O1:[^:]*]]: memref<2x1x16x512xbf16>)
// CHECK-NEXT: %[[A:.*]] = dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x32x2x656xi8>
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[A]] :
// CHECK-NEXT: dhs.attention {{.*}} staging(%[[A]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[O0]] :
// CHECK-NEXT: call @opaque() : () -> ()
// CHECK-NEXT: %[[B:.*]] = dhs.scratch {offset = 83968 : i64, slot = 1 : i64} : memref<2x32x2x656xi8>
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[B]] :
// CHECK-NEXT: dhs.attention {{.*}} staging(%[[B]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 1 output(%[[O1]] :
// CHECK-NEXT: return
func.func private @opaque()
func.func @replay_blocked_by_call(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
                  %q: memref<2x1x16x576xbf16>, %rows: memref<2x1x32xi32>,
                  %slots: memref<2x1x32xi32>, %start: memref<2xi64>,
                  %len: memref<2xi32>, %o0: memref<2x1x16x512xbf16>,
                  %o1: memref<2x1x16x512xbf16>) {
  %a = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%a : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%a : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 0 output(%o0 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  func.call @opaque() : () -> ()
  %b = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%b : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%b : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 1 output(%o1 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// Three groups fetched before any is read: all three staging buffers are
// live at once. The third one's slot (0) still holds the first group's
// rows, so it is placed past the slots like any other buffer. Each buffer
// is 2 x 32 x 2 x 656 = 83968 bytes (a multiple of 256).
// CHECK-LABEL: func.func @slot_collision
// CHECK-SAME: (%[[P0:[^:]*]]: {{.*}}, %[[P1:[^:]*]]: {{.*}}, %[[P2:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[OUT:[^:]*]]: memref<2x1x16x512xbf16>)
// CHECK-SAME: attributes {dhs.staging_plan = {arena_bytes = 251904 : i64, buffers = [
// CHECK-SAME: {bytes = 83968 : i64, live = array<i64: 1, 7>, offset = 0 : i64, slot = 0 : i64},
// CHECK-SAME: {bytes = 83968 : i64, live = array<i64: 2, 8>, offset = 83968 : i64, slot = 1 : i64},
// CHECK-SAME: {bytes = 83968 : i64, live = array<i64: 3, 9>, offset = 167936 : i64}],
// CHECK-SAME: slot_bytes = array<i64: 83968, 83968>}}
// CHECK-NEXT: %[[S0:.*]] = dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x32x2x656xi8>
// CHECK-NEXT: %[[S1:.*]] = dhs.scratch {offset = 83968 : i64, slot = 1 : i64} : memref<2x32x2x656xi8>
// CHECK-NEXT: %[[S2:.*]] = dhs.scratch {offset = 167936 : i64} : memref<2x32x2x656xi8>
// CHECK-NEXT: dhs.fetch pool(%[[P0]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[S0]] :
// CHECK-NEXT: dhs.fetch pool(%[[P1]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[S1]] :
// CHECK-NEXT: dhs.fetch pool(%[[P2]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[S2]] :
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) staging(%[[S0]] : {{.*}}) pool(%[[P0]] : {{.*}}) layer = 0 output(%[[OUT]] :
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) staging(%[[S1]] : {{.*}}) pool(%[[P1]] : {{.*}}) layer = 0 output(%[[OUT]] :
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) staging(%[[S2]] : {{.*}}) pool(%[[P2]] : {{.*}}) layer = 0 output(%[[OUT]] :
// CHECK-NEXT: return
// Without double buffering the second and third both collide with slot 0.
// SINGLE-LABEL: func.func @slot_collision
// SINGLE-SAME: attributes {dhs.staging_plan = {arena_bytes = 251904 : i64, buffers = [
// SINGLE-SAME: {bytes = 83968 : i64, live = array<i64: 1, 7>, offset = 0 : i64, slot = 0 : i64},
// SINGLE-SAME: {bytes = 83968 : i64, live = array<i64: 2, 8>, offset = 83968 : i64},
// SINGLE-SAME: {bytes = 83968 : i64, live = array<i64: 3, 9>, offset = 167936 : i64}],
// SINGLE-SAME: slot_bytes = array<i64: 83968, 0>}}
// SINGLE-NEXT: dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x32x2x656xi8>
// SINGLE-NEXT: dhs.scratch {offset = 83968 : i64} : memref<2x32x2x656xi8>
// SINGLE-NEXT: dhs.scratch {offset = 167936 : i64} : memref<2x32x2x656xi8>
func.func @slot_collision(
    %p0: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
    %p1: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
    %p2: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
    %q: memref<2x1x16x576xbf16>, %rows: memref<2x1x32xi32>, %slots: memref<2x1x32xi32>,
    %start: memref<2xi64>, %len: memref<2xi32>, %out: memref<2x1x16x512xbf16>) {
  %s0 = dhs.scratch : memref<2x32x2x656xi8>
  %s1 = dhs.scratch : memref<2x32x2x656xi8>
  %s2 = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%p0 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%s0 : memref<2x32x2x656xi8>)
  dhs.fetch pool(%p1 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%s1 : memref<2x32x2x656xi8>)
  dhs.fetch pool(%p2 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>) into(%s2 : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%s0 : memref<2x32x2x656xi8>)
      pool(%p0 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x16x512xbf16>) scale = 0.0416666679
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%s1 : memref<2x32x2x656xi8>)
      pool(%p1 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x16x512xbf16>) scale = 0.0416666679
  dhs.attention queries(%q : memref<2x1x16x576xbf16>) rows(%rows : memref<2x1x32xi32>)
      slots(%slots : memref<2x1x32xi32>) staging(%s2 : memref<2x32x2x656xi8>)
      pool(%p2 : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}
