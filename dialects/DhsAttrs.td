//===- DhsAttrs.td - dhs enums and attributes --------------*- tablegen -*-===//

#ifndef DHS_ATTRS_TD
#define DHS_ATTRS_TD

include "dialects/DhsDialect.td"
include "mlir/IR/EnumAttr.td"

/// The byte layout of one KV row (one token of one layer).
def Dhs_RowFormat : I32EnumAttr<"RowFormat", "layout of one KV row", [
    // MLA latent in bf16: 576 dims (512 NoPE + 64 RoPE), 1152 bytes. Keys use
    // all 576 dims, values the first 512.
    I32EnumAttrCase<"mla_bf16", 0>
  ]> {
  let cppNamespace = "::mlir::dhs";
  let genSpecializedAttr = 0;
}
def Dhs_RowFormatAttr : EnumAttr<Dhs_Dialect, Dhs_RowFormat, "row_format">;

/// A memory tier of a KV pool.
def Dhs_Tier : I32EnumAttr<"Tier", "memory tier of a KV pool", [
    I32EnumAttrCase<"hbm", 0>,
    I32EnumAttrCase<"host", 1>
  ]> {
  let cppNamespace = "::mlir::dhs";
}

#endif // DHS_ATTRS_TD
