//===- DhsTypes.td - dhs types -----------------------------*- tablegen -*-===//

#ifndef DHS_TYPES_TD
#define DHS_TYPES_TD

include "dialects/DhsDialect.td"
include "dialects/DhsAttrs.td"
include "mlir/IR/AttrTypeBase.td"

def Dhs_KVPoolType : TypeDef<Dhs_Dialect, "KVPool"> {
  let mnemonic = "kv_pool";
  let summary = "The KV rows of one layer group in two tiers";
  let description = [{
    The KV rows of a layer group (`layers` layers that share one selection,
    as with IndexShare; 1 for models without it) in two tiers. The host
    store holds every row of every request (the backing store, `host`
    tokens); HBM holds `hbm` slots, each a copy of one token's rows for all
    layers of the group. A token's rows for the group are stored together in
    both tiers (`layers * row bytes` per token), so one fetch serves every
    layer of the group. Capacities are token counts, `?` when the runtime
    chooses them.

    ```mlir
    !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>
    ```
  }];
  let parameters = (ins
    "RowFormatAttrInterface":$format,
    "int64_t":$layers,
    "int64_t":$hbmSlots,
    "int64_t":$hostRows
  );
  let assemblyFormat = [{
    `<` $format `,` `layers` `=` $layers `,`
        `hbm` `=` custom<Capacity>($hbmSlots) `,`
        `host` `=` custom<Capacity>($hostRows) `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether the runtime chooses a tier's capacity.
    bool isDynamicHbm() const { return ::mlir::ShapedType::isDynamic(getHbmSlots()); }
    bool isDynamicHost() const { return ::mlir::ShapedType::isDynamic(getHostRows()); }
    /// Row capacity of a tier (ShapedType::kDynamic when chosen at run time).
    int64_t getCapacity(Tier tier) const;
    /// The memref through which kernels see a tier:
    /// [capacity, layers, row bytes] x i8.
    ::mlir::MemRefType getTierMemRefType(Tier tier) const;
  }];
}

#endif // DHS_TYPES_TD
