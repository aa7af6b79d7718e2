"""TMA tensor maps (the driver's ``cuTensorMapEncodeTiled``) for the kernels that copy their operand
tiles with ``cp.async.bulk.tensor`` (rung 10): a 2-D float32 view and the box one copy moves,
encoded per pointer.  Encodings are kept for the last pointers seen, so a repeated call on the same
arrays encodes nothing."""

from __future__ import annotations

import ctypes
import functools

from .runtime import bound, check


def encoder(rows: int, cols: int, ld: int, box_rows: int, box_cols: int, swizzle: int = 0,
            device: int | None = None):
    """``encode(ptr) -> bytes``: the 128-byte tensor map of the rows x cols float32 view at ``ptr``
    (row stride ``ld`` elements, columns contiguous) copied in boxes of box_rows x box_cols, each box
    row's 16-byte chunks permuted in shared memory by ``swizzle`` (0, 64 or 128: the swizzle span in
    bytes); elements outside the view read as zeros.  ``ptr`` must be 16-byte aligned and ``ld`` a
    multiple of 4.  ``device``: whose context an encoding from a thread without one binds (runtime.bound;
    None: none is bound, the error is raised)."""
    from cuda.bindings import driver as drv

    ld = ld if rows > 1 else -(-cols // 4) * 4  # one row: its stride is never used
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    dims, strides = [u64(max(cols, 1)), u64(max(rows, 1))], [u64(4 * ld)]
    box, unit = [u32(min(box_cols, 256)), u32(min(box_rows, 256))], [u32(1), u32(1)]
    sw = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}[swizzle]

    @functools.lru_cache(maxsize=32)
    def encode(ptr: int) -> bytes:
        err, tmap = bound(device, lambda: drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, ptr, dims, strides, box, unit,
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, getattr(drv.CUtensorMapSwizzle, sw),
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
        check(err, f"cuTensorMapEncodeTiled({rows} x {cols}, ld {ld}, box {box_rows} x {box_cols})")
        return ctypes.string_at(tmap.getPtr(), 128)

    return encode
