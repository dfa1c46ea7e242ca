//===- DhsAttrs.td - dhs attributes, enums and interfaces --*- tablegen -*-===//

#ifndef DHS_ATTRS_TD
#define DHS_ATTRS_TD

include "dialects/DhsDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Row formats
//===----------------------------------------------------------------------===//

def Dhs_RowFormatAttrInterface : AttrInterface<"RowFormatAttrInterface"> {
  let cppNamespace = "::mlir::dhs";
  let description = [{
    The byte layout of one KV row: one token of one layer. Kernels and the
    runtime see rows as bytes; the format says how many, and how keys and
    values are read out of them. The layouts and the names manifests give
    them are the compiler-runtime contract's (`runtime/abi/Contract.h`,
    `runtime/abi/RowFormats.def`); a format's mnemonic is its name there.
  }];
  let methods = [
    InterfaceMethod<"Bytes of one row.", "int64_t", "getRowBytes">,
    InterfaceMethod<"KV heads stored in a row (1 for MLA).", "int64_t",
                    "getKVHeads">,
    InterfaceMethod<"Key (and query) dims per head.", "int64_t", "getQKDim">,
    InterfaceMethod<"Value dims per head.", "int64_t", "getVDim">,
    InterfaceMethod<"Name in manifests and diagnostics.", "::llvm::StringRef",
                    "getFormatName">
  ];
}

class Dhs_RowFormat<string name, string formatMnemonic>
    : AttrDef<Dhs_Dialect, name, [
        DeclareAttrInterfaceMethods<Dhs_RowFormatAttrInterface>]> {
  let mnemonic = formatMnemonic;
}

def Dhs_MlaBf16Attr : Dhs_RowFormat<"MlaBf16", "mla_bf16"> {
  let summary = "MLA latent in bf16: 576 dims, 1152 bytes";
  let description = [{
    512 NoPE + 64 RoPE dims of the compressed latent in bf16. Keys are whole
    rows (576 dims), values the first 512 dims (MLA in absorbed form).
    Layout: `MlaBf16Row` in `runtime/abi/Contract.h`.
  }];
}

def Dhs_MlaFp8Attr : Dhs_RowFormat<"MlaFp8", "mla_fp8"> {
  let summary = "MLA latent in FP8 with scales: 656 bytes (DeepSeek-V3.2)";
  let description = [{
    The 512 NoPE dims in e4m3, four fp32 scales (one per 128 NoPE dims),
    then the 64 RoPE dims in bf16, unquantized. Keys are 576 dims, values
    the 512 dequantized NoPE dims. Byte offsets: `MlaFp8Row` in
    `runtime/abi/Contract.h`.
  }];
}

def Dhs_V41Fp8Attr : Dhs_RowFormat<"V41Fp8", "v41_fp8"> {
  let summary = "DeepSeek-V4.1 compressed entry: 528 bytes";
  let description = [{
    512 dims in e4m3 then 16 ue8m0 scales (a power of two each), one per 32
    dims. Keys and values are the same 512 dims. Layout: `V41Fp8Row` in
    `runtime/abi/Contract.h`.
  }];
}

def Dhs_GqaAttr : Dhs_RowFormat<"Gqa", "gqa"> {
  let summary = "Grouped-query attention rows: separate K and V per KV head";
  let description = [{
    `kv_heads` keys of `head_dim` elements, then `kv_heads` values of
    `head_dim` elements, all of `dtype`.

    ```mlir
    #dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>
    ```
  }];
  let parameters = (ins "int64_t":$kvHeads, "int64_t":$headDim,
                        "::mlir::Type":$dtype);
  let assemblyFormat = [{
    `<` `kv_heads` `=` $kvHeads `,` `head_dim` `=` $headDim `,`
        `dtype` `=` $dtype `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The element type as the contract names it (runtime/abi/Contract.h).
    ::dhs_abi::RowElement getRowElement() const;
  }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

/// A memory tier of a KV pool.
def Dhs_Tier : I32EnumAttr<"Tier", "memory tier of a KV pool", [
    I32EnumAttrCase<"hbm", 0>,
    I32EnumAttrCase<"host", 1>
  ]> {
  let cppNamespace = "::mlir::dhs";
}

/// How a pool's spare HBM slots are used beyond the protected working set.
/// Manifests spell the policies and replacements as the contract does
/// (runtime/abi/Residency.def).
def Dhs_ResidencyPolicy : I32EnumAttr<"ResidencyPolicy",
                                      "use of spare HBM slots", [
    // Recently selected rows stay while memory is spare; the optional budget
    // follows the load.
    I32EnumAttrCase<"adaptive", 0>,
    // A fixed hot buffer of `floor` slots per request (HiSparse).
    I32EnumAttrCase<"fixed", 1>
  ]> {
  let cppNamespace = "::mlir::dhs";
}

/// Which hot row gives up its slot.
def Dhs_Replacement : I32EnumAttr<"Replacement", "replacement policy", [
    I32EnumAttrCase<"clock", 0>,
    I32EnumAttrCase<"lru", 1>,
    // LRU with frequency (LRU-2): the oldest use before the last goes first.
    I32EnumAttrCase<"lru2", 2>
  ]> {
  let cppNamespace = "::mlir::dhs";
}

/// How a verify phase accepts drafted tokens.
def Dhs_AcceptRule : I32EnumAttr<"AcceptRule", "speculative acceptance rule", [
    // Accept while the target's argmax equals the drafted token.
    I32EnumAttrCase<"greedy", 0>,
    // Lossless speculative sampling: accept with min(1, p/q), resample from
    // norm(max(0, p - q)) at the first rejection.
    I32EnumAttrCase<"rejection_sampling", 1>
  ]> {
  let cppNamespace = "::mlir::dhs";
}

#endif // DHS_ATTRS_TD
