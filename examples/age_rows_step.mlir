// The appends between two steps replayed on the device (dhs.age_rows): up to
// 64 appends of one layer group whose slot tables have 5000 slots; a
// dhs.place_rows of the same list would carry them out.
// AgeRowsKernelTest runs it against the host reference (planAgeRows).
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %appends: memref<64x4xi64>, %hot: memref<5000xi64>, %cleared: memref<5000xi32>,
                %free: memref<5000xi32>, %control: memref<8xi32>,
                %rows: memref<128xi64>, %slots: memref<128xi32>) {
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      appends(%appends : memref<64x4xi64>) hot(%hot : memref<5000xi64>)
      cleared(%cleared : memref<5000xi32>) free(%free : memref<5000xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<128xi64>, memref<128xi32>)
  return
}
