// The whole pipeline to PTX; every kernel must assemble for sm_90a.
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=PTX < %t/sparse_attention.ptx
// RUN: FileCheck %s --check-prefix=PARTIALS --implicit-check-not=cvt.rn.bf16 < %t/sparse_attention.ptx
// RUN: FileCheck %s --check-prefix=COMBINE < %t/attention_combine.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/sparse_attention.ptx -o %t/sparse_attention.cubin %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/attention_combine.ptx -o %t/attention_combine.cubin %}
// The runtime links it with nvJitLink for sm_90a (no GPU needed) and finds
// the kernel in the cubin.
// RUN: dhs-run %t --link-only --arch sm_90a | FileCheck %s --check-prefix=LINK
// RUN: dhs-compile %s --emit=mlir | FileCheck %s --check-prefix=MLIR

// LINK: sparse_attention
// LINK: attention_combine

// PTX: .version 8.1
// PTX: .target sm_90a
// PTX: .visible .entry sparse_attention(
// PTX: .maxntid 512, 1, 1
// Bad input is reported through the step status.
// PTX: atom.global.or.b32
// Staging: 16-byte loads from HBM or the mapped host store, into shared memory.
// PTX-DAG: ld.global.v4.b32
// PTX-DAG: st.shared.v4.b32
// PTX: shfl.sync.bfly.b32
// PTX: ex2.approx
// PTX: }
// 4 queries x 1 block of heads: each query's 256 rows split over 8 CTAs,
// which store their softmax state in f32; the combine kernel rounds (no
// conversion to bf16 anywhere in the kernel: --implicit-check-not).
// PARTIALS: st.global.b32
// COMBINE: .visible .entry attention_combine(
// COMBINE: ex2.approx
// COMBINE: cvt.rn.bf16.f32
// COMBINE: ret;

// Host code stays for the manifest; the kernel module became PTX.
// MLIR-LABEL: func.func @step
// MLIR: gpu.launch_func @sparse_attention::@sparse_attention
// MLIR: gpu.binary @sparse_attention [#gpu.object<#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx81">, properties = {{.*}}, assembly = "
func.func @step(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
                %slots: memref<4x1x256xi32>, %start: memref<4xi64>,
                %len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>,
                %out: memref<4x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}
