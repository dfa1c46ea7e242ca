// Host code the runtime cannot replay is rejected with a message.
// RUN: not dhs-compile %s --emit=manifest 2>&1 | FileCheck %s
// RUN: not dhs-compile %s --emit=manifest --step=missing 2>&1 | FileCheck %s --check-prefix=MISSING

// CHECK: error: 'memref.alloc' op is left in the step after code generation; the runtime only replays kernel launches
// MISSING: error: no step function @missing
func.func @step(%q: memref<1x1x4x576xbf16>, %rows: memref<1x1x16xi32>,
                %slots: memref<1x1x16xi32>, %start: memref<1xi64>,
                %len: memref<1xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                %out: memref<1x1x4x512xbf16>) {
  %copy = memref.alloc() : memref<1x1x4x576xbf16>
  dhs.sparse_attention queries(%copy : memref<1x1x4x576xbf16>)
      rows(%rows : memref<1x1x16xi32>) slots(%slots : memref<1x1x16xi32>)
      history(%start, %len : memref<1xi64>, memref<1xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<1x1x4x512xbf16>) scale = 0.5
  return
}
