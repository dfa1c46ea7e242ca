// The draft phase's KV bookkeeping for 4 requests: append a block of 5 new
// draft rows at each request's position into its window-bounded ring of 64
// tokens (MLA BF16 rows), then read the 32 newest rows back. dhs-draft-ring
// lowers both to ring-slot arithmetic and row copies; positions past the
// window wrap around.
//
//   dhs-compile examples/draft_ring_step.mlir -o /tmp/draft_ring
func.func @step(%ring: memref<4x64x1x1152xi8>, %new: memref<4x5x1x1152xi8>,
                %positions: memref<4xi32>, %ends: memref<4xi32>,
                %window: memref<4x32x1x1152xi8>) {
  dhs.draft ring(%ring : memref<4x64x1x1152xi8>) block = 5 {
    dhs.ring_append rows(%new : memref<4x5x1x1152xi8>)
        positions(%positions : memref<4xi32>) into(%ring : memref<4x64x1x1152xi8>)
    dhs.ring_read ring(%ring : memref<4x64x1x1152xi8>)
        positions(%ends : memref<4xi32>) into(%window : memref<4x32x1x1152xi8>)
  }
  return
}
