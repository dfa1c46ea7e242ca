// RUN: dhs-opt %s --dhs-draft-ring --split-input-file --verify-diagnostics

// dhs-draft-ring turns ring positions into slot indices (position mod W)
// and sizes the index buffer by the row count: both must be static.

func.func @append_dynamic_ring(%ring: memref<4x?x1x1152xi8>, %new: memref<4x5x1x1152xi8>,
                               %pos: memref<4xi32>) {
  // expected-error @below {{'dhs.ring_append' op needs a static ring and row count to lower}}
  dhs.ring_append rows(%new : memref<4x5x1x1152xi8>) positions(%pos : memref<4xi32>)
      into(%ring : memref<4x?x1x1152xi8>)
  return
}

// -----

func.func @append_dynamic_rows(%ring: memref<4x128x1x1152xi8>, %new: memref<4x?x1x1152xi8>,
                               %pos: memref<4xi32>) {
  dhs.draft ring(%ring : memref<4x128x1x1152xi8>) block = 5 {
    // expected-error @below {{'dhs.ring_append' op needs a static ring and row count to lower}}
    dhs.ring_append rows(%new : memref<4x?x1x1152xi8>) positions(%pos : memref<4xi32>)
        into(%ring : memref<4x128x1x1152xi8>)
  }
  return
}

// -----

func.func @read_dynamic_batch(%ring: memref<?x128x1x1152xi8>, %pos: memref<?xi32>,
                              %window: memref<?x64x1x1152xi8>) {
  // expected-error @below {{'dhs.ring_read' op needs a static ring and row count to lower}}
  dhs.ring_read ring(%ring : memref<?x128x1x1152xi8>) positions(%pos : memref<?xi32>)
      into(%window : memref<?x64x1x1152xi8>)
  return
}

// -----

func.func @read_dynamic_rows(%ring: memref<4x128x1x1152xi8>, %pos: memref<4xi32>,
                             %window: memref<4x?x1x1152xi8>) {
  dhs.draft ring(%ring : memref<4x128x1x1152xi8>) block = 5 {
    // expected-error @below {{'dhs.ring_read' op needs a static ring and row count to lower}}
    dhs.ring_read ring(%ring : memref<4x128x1x1152xi8>) positions(%pos : memref<4xi32>)
        into(%window : memref<4x?x1x1152xi8>)
  }
  return
}
