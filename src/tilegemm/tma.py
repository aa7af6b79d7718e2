"""TMA tensor maps (the driver's ``cuTensorMapEncodeTiled``) for the kernels that copy their operand
tiles with ``cp.async.bulk.tensor`` (rung 10): a 2-D float32 view and the box one copy moves,
encoded per pointer.  Encodings are kept for the last pointers seen, so a repeated call on the same
arrays encodes nothing."""

from __future__ import annotations

import ctypes
import functools

from .runtime import check


def _tiled(ptr: int, cols: int, rows: int, stride: int, box_cols: int, box_rows: int, swizzle: int, what: str) -> bytes:
    """The 128-byte map of a rows x cols float32 tensor at ``ptr`` (rows ``stride`` bytes apart, columns
    contiguous) in boxes of box_rows x box_cols, each box row's 16-byte chunks permuted in shared memory
    by ``swizzle`` (0, 64 or 128: the swizzle span in bytes); elements outside read as zeros."""
    from cuda.bindings import driver as drv

    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    sw = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}[swizzle]
    err, tmap = drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, ptr, [u64(cols), u64(rows)], [u64(stride)],
        [u32(box_cols), u32(box_rows)], [u32(1), u32(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, getattr(drv.CUtensorMapSwizzle, sw),
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    check(err, f"cuTensorMapEncodeTiled({what}, box {box_rows} x {box_cols})")
    return ctypes.string_at(tmap.getPtr(), 128)


def encoder(rows: int, cols: int, ld: int, box_rows: int, box_cols: int, swizzle: int = 0):
    """``encode(ptr) -> bytes``: the 128-byte tensor map of the rows x cols float32 view at ``ptr``
    (row stride ``ld`` elements, columns contiguous) copied in boxes of box_rows x box_cols, each box
    row's 16-byte chunks permuted in shared memory by ``swizzle`` (``_tiled``); elements outside the
    view read as zeros.  ``ptr`` must be 16-byte aligned and ``ld`` a multiple of 4."""
    ld = ld if rows > 1 else -(-cols // 4) * 4  # one row: its stride is never used
    box = min(box_rows, 256), min(box_cols, 256)

    @functools.lru_cache(maxsize=32)
    def encode(ptr: int) -> bytes:
        return _tiled(ptr, max(cols, 1), max(rows, 1), 4 * ld, box[1], box[0], swizzle, f"{rows} x {cols}, ld {ld}")

    return encode


def row_class_geometry(ptr: int, r: int, rows: int, cols: int, ld: int) -> tuple[int, int, int, int]:
    """(base address, column shift, columns, rows) of the tensor map of rows r, r + 4, r + 8, ... of the
    rows x cols float32 view at ``ptr`` (row stride ``ld`` elements, any ``ld``; ``ptr`` 4-byte aligned):
    the base is row r's first element rounded down to 16 bytes, and its columns are shifted right by
    the floats rounded off (0..3: the kernel adds the shift to its column coordinates, tg_tma_rows.cuh);
    its row stride is 4 ld elements.  A class with no row keeps one (never read)."""
    first = ptr + 4 * r * ld
    shift = (first & 15) // 4
    return first - 4 * shift, shift, cols + shift, max(1, -(-(rows - r) // 4))


def row_class_encoder(rows: int, cols: int, ld: int, box_rows: int, box_cols: int):
    """For gemm.cu's B read by TMA by k mod 4 (tg_tma_rows.cuh): ``encode(ptr) -> bytes``, the four
    classes' tensor maps (512 bytes, class r at 128 r), each that of ``row_class_geometry`` copied in
    boxes of box_rows x box_cols (at most 256 each: TMA's limit, which access.tma_rows_config keeps);
    elements outside read as zeros."""
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise ValueError(f"a TMA box has 1 to 256 rows and columns, not {box_rows} x {box_cols}")

    @functools.lru_cache(maxsize=32)
    def encode(ptr: int) -> bytes:
        maps = []
        for r in range(4):
            base, _, n_cols, n_rows = row_class_geometry(ptr, r, rows, cols, ld)
            maps.append(_tiled(base, n_cols, n_rows, 16 * ld, box_cols, box_rows, 0,
                               f"rows {r} mod 4 of {rows} x {cols}, ld {ld}"))
        return b"".join(maps)

    return encode
