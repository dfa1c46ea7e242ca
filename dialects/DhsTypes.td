//===- DhsTypes.td - dhs types -----------------------------*- tablegen -*-===//

#ifndef DHS_TYPES_TD
#define DHS_TYPES_TD

include "dialects/DhsDialect.td"
include "dialects/DhsAttrs.td"
include "mlir/IR/AttrTypeBase.td"

def Dhs_KVPoolType : TypeDef<Dhs_Dialect, "KVPool"> {
  let mnemonic = "kv_pool";
  let summary = "A two-tier KV pool: HBM slots plus a pinned host store";
  let description = [{
    One layer's KV rows in two tiers. The host store holds every row of every
    request (the backing store, `host` rows); HBM holds `hbm` slots, each a
    copy of some host row. Capacities are row counts, `?` when the runtime
    chooses them. All rows share one row format.

    ```mlir
    !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>
    ```
  }];
  let parameters = (ins
    EnumParameter<Dhs_RowFormat>:$format,
    "int64_t":$hbmSlots,
    "int64_t":$hostRows
  );
  let assemblyFormat = [{
    `<` $format `,` `hbm` `=` custom<Capacity>($hbmSlots) `,`
        `host` `=` custom<Capacity>($hostRows) `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of elements in one row.
    int64_t getRowElements() const;
    /// Bytes in one row.
    int64_t getRowBytes() const;
    /// Key (and query) dimension of the row format.
    int64_t getQKDim() const;
    /// Value dimension: values are the first `getVDim()` elements of a row.
    int64_t getVDim() const;
    /// Element type rows are stored in.
    ::mlir::Type getElementType() const;
    /// Row capacity of a tier (ShapedType::kDynamic when chosen at run time).
    int64_t getCapacity(Tier tier) const;
    /// The memref type through which kernels see one tier.
    ::mlir::MemRefType getTierMemRefType(Tier tier) const;
  }];
}

#endif // DHS_TYPES_TD
