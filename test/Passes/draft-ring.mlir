// RUN: dhs-opt %s --dhs-draft-ring | FileCheck %s

// Appends land at position mod W; reads gather the N newest positions.
// CHECK-LABEL: func.func @draft
// CHECK-SAME: (%[[RING:[^:]*]]: memref<4x128x1x1152xi8>, %[[NEW:[^:]*]]: memref<4x5x1x1152xi8>, %[[POS:[^:]*]]: memref<4xi32>, %[[WINDOW:[^:]*]]: memref<4x64x1x1152xi8>)
// CHECK: dhs.draft ring(%[[RING]] : memref<4x128x1x1152xi8>) block = 5 {
// CHECK-NOT: dhs.ring_
// CHECK:   %[[A:.*]] = dhs.scratch : memref<4x5xi32>
// CHECK:   dhs.ring_index positions(%[[POS]] : memref<4xi32>) offset = 0 window = 128 into(%[[A]] : memref<4x5xi32>)
// CHECK:   dhs.copy_rows src(%[[NEW]] : memref<4x5x1x1152xi8>) dst(%[[RING]] : memref<4x128x1x1152xi8>) dst_index(%[[A]] : memref<4x5xi32>)
// CHECK-NOT: dhs.ring_append
// CHECK:   %[[R:.*]] = dhs.scratch : memref<4x64xi32>
// CHECK:   dhs.ring_index positions(%[[POS]] : memref<4xi32>) offset = -64 window = 128 into(%[[R]] : memref<4x64xi32>)
// CHECK:   dhs.copy_rows src(%[[RING]] : memref<4x128x1x1152xi8>) dst(%[[WINDOW]] : memref<4x64x1x1152xi8>) src_index(%[[R]] : memref<4x64xi32>)
// CHECK-NOT: dhs.ring_append
// CHECK-NOT: dhs.ring_read
// CHECK: return
func.func @draft(%ring: memref<4x128x1x1152xi8>, %new: memref<4x5x1x1152xi8>,
                 %pos: memref<4xi32>, %window: memref<4x64x1x1152xi8>) {
  dhs.draft ring(%ring : memref<4x128x1x1152xi8>) block = 5 {
    dhs.ring_append rows(%new : memref<4x5x1x1152xi8>) positions(%pos : memref<4xi32>)
        into(%ring : memref<4x128x1x1152xi8>)
    dhs.ring_read ring(%ring : memref<4x128x1x1152xi8>) positions(%pos : memref<4xi32>)
        into(%window : memref<4x64x1x1152xi8>)
  }
  return
}
