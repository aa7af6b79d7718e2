"""The launches a program is made of besides the family's own: the split-K reduction, the copies of an
operand into the workspace (pack.cu: into aligned rows, or transposed), and the Hopper kernels' TMA
launch (rung 10's kernel and wgmma_tf32.cu, their operands as tensor maps).  Each returns a ``Step``
with every argument fixed but the pointers; dispatch.py puts them together."""

from __future__ import annotations

from . import hopper
from .errors import UnsupportedOperands
from .launch import PACK, PACK_T, REDUCE, WGMMA, WGMMA_TF32, A, B, C, D, W, Step, packer, reducer, transposer
from .access import aligned_cols, vector_width


def reduce_step(p, g, device, at, offs, splits, ldw, beta, alpha=None) -> Step:
    """D = alpha * (the sum of W's ``splits`` planes, rows of ldw floats) + beta * C; splits = 0
    gives beta * C (K = 0).  float4 accesses where N, D (and C, when read) allow them."""
    sc, sd = g.strides[2:]
    fn = reducer(device)
    ops = [(at[D], g.ldd, sd)] + ([(at[C], g.ldc, sc)] if beta != 0.0 else [])
    vec = 4 if g.N % 4 == 0 and ldw % 4 == 0 and vector_width(*ops) == 4 else 1
    grid = (max(1, -(-(g.N // vec) // 256)), max(1, min(g.M * g.count, 65535)), 1)
    args = REDUCE.values(M=g.M, N=g.N, batches=g.count, splits=splits, W=0, ldw=ldw, C=0, ldc=g.ldc, sC=sc,
                         D=0, ldd=g.ldd, sD=sd, alpha=p.alpha if alpha is None else alpha, beta=beta, vec=vec)
    ptrs = ((REDUCE.slot("C"), C, offs[C]), (REDUCE.slot("D"), D, offs[D])) + (
        ((REDUCE.slot("W"), W, 0),) if splits else ())
    return Step(fn.prepare(grid, p.pdl), tuple(args), ptrs)


def tma_step(p, g, fn, grid, at, offs, vec, splits=1, k_split=None, out=D, ldd=None, sD=0, alpha=1.0,
              beta=0.0, src=None) -> Step:
    """A launch of rung 10's kernel: D = alpha A B + beta C into ``out`` (D, or the split-K workspace W
    with planes sD apart); its operands as tensor maps, encoded per launch from the pointers (tma.py;
    TMA reads 16-byte aligned rows only), or with tg_tma = 0 as pointers its producer copies from.
    ``src``: where each operand is read, ((pointer, byte offset, leading dimension) for A, then B):
    by default the call's operands, else a copy in the workspace (``pack_step``)."""
    from .tma import encoder

    tma = fn.params["tg_tma"]
    if tma and vec != 4:
        raise UnsupportedOperands(f"kernel={p.kernel!r} copies its operands with TMA, which needs them 16-byte aligned "
                         f"with leading dimensions (and batch strides) a multiple of 4 floats; pass such "
                         f"arrays (e.g. contiguous ones with a column count a multiple of 4) or another kernel")
    sa, sb, sc, sd = g.strides
    (wa, oa, lda), (wb, ob, ldb) = src or ((A, offs[A], g.lda), (B, offs[B], g.ldb))
    bm, bn = fn.spec.tile(fn.params)
    bk = fn.params["bk"]
    # the view each map describes: rows x cols with row stride ld (tg_common.cuh's layouts); A's boxes
    # swizzled as 10_wgmma_tf32x3.cu's a_at reads them
    d = fn.device
    ea = encoder(g.M, g.K, lda, bm, bk, 4 * bk, d) if g.layout[0] == "N" else encoder(g.K, g.M, lda, bk, 32, 128, d)
    eb = encoder(g.K, g.N, ldb, bk, bn, 0, d) if g.layout[1] == "N" else encoder(g.N, g.K, ldb, bn, bk, 0, d)
    args = WGMMA.values(M=g.M, N=g.N, K=g.K, tA=bytes(128), tB=bytes(128), A=0, lda=lda, B=0, ldb=ldb, C=0,
                        ldc=g.ldc, D=0, ldd=g.ldd if ldd is None else ldd, sD=sD, alpha=alpha, beta=beta,
                        k_split=k_split or -(-g.K // bk) * bk)
    ptrs = ((WGMMA.slot("D"), out, offs[D] if out == D else 0), (WGMMA.slot("C"), C, offs[C]),
            (WGMMA.slot("A"), wa, oa), (WGMMA.slot("B"), wb, ob))
    maps = ((WGMMA.slot("tA"), wa, oa, 4 * sa, ea), (WGMMA.slot("tB"), wb, ob, 4 * sb, eb)) if tma else ()
    return Step(fn.prepare((grid[0], 1, splits), False), tuple(args), ptrs, repeat=g.count,
                strides=(4 * sd, 4 * sc, 4 * sa, 4 * sb), maps=maps)


def pack_step(device, view, ld, which, off, dst, pdl: bool) -> Step:
    """Copy operand ``which`` (its view: rows, cols, rows ``ld`` apart; at byte offset ``off``) into the
    workspace at byte offset ``dst``, in rows of cols rounded up to 4 floats (pack.cu); launched as a
    programmatic dependent where ``pdl`` and the GPU allow (the copy waits first)."""
    rows, cols = view
    fn = packer(device)
    groups = -(-cols // 4)
    gpr = min(256, 1 << max(0, (groups - 1).bit_length()))  # column groups a block takes from each row
    per_block = 256 // gpr
    grid = (-(-groups // gpr), max(1, min(-(-rows // per_block), 65535)), 1)
    args = PACK.values(rows=rows, cols=cols, src=0, lds=ld, dst=0, ldd=aligned_cols(cols), gpr=gpr)
    return Step(fn.prepare(grid, pdl), tuple(args), ((PACK.slot("src"), which, off), (PACK.slot("dst"), W, dst)))


def transpose_step(device, view, ld, which, off, dst, pdl: bool) -> Step:
    """Copy operand ``which`` (its stored view: rows, cols, rows ``ld`` apart; at byte offset ``off``)
    transposed into the workspace at byte offset ``dst``: cols rows of ``rows`` rounded up to 4 floats
    (pack.cu's pack_t); ``pdl`` as for ``pack_step``."""
    rows, cols = view
    fn = transposer(device)
    ldd = aligned_cols(rows)
    grid = (-(-cols // 32), max(1, min(-(-ldd // 32), 65535)), 1)
    args = PACK_T.values(rows=rows, cols=cols, src=0, lds=ld, dst=0, ldd=ldd)
    return Step(fn.prepare(grid, pdl), tuple(args), ((PACK_T.slot("src"), which, off), (PACK_T.slot("dst"), W, dst)))


def tf32_step(g, fn, offs, ops, swap: int, sms: int, splits=1, k_split=None, out=D, ldd=None, sD=0, alpha=1.0,
              beta=0.0) -> Step:
    """A launch of wgmma_tf32.cu: D = alpha A B + beta C into ``out`` (D, or the workspace's planes
    sD apart).  ``ops``: (pointer slot, byte offset, leading dimension) of the kernel's A and B, the
    call's operands or their copies (hopper.tf32_operands); with ``swap`` the kernel's A is the call's
    B and its M and N are swapped.  The grid: at most a block an SM for each split, each walking its
    tiles (persistent).  The maps: the kernel's B K-major (N x K, boxes of bn rows), its A
    K-major (M x K, boxes of 128 rows) or M-major (K x M, boxes of 32 x 32), 128-byte swizzled."""
    from .tma import encoder

    Mk, Nk = (g.N, g.M) if swap else (g.M, g.N)
    (wa, oa, lda), (wb, ob, ldb) = ops
    bk = hopper.TF32_BK
    if k_split is not None and k_split % bk:
        raise ValueError(f"k_split = {k_split} must be a multiple of wgmma_tf32.cu's k tile ({bk})")
    d = fn.device
    ea = encoder(g.K, Mk, lda, bk, 32, 128, d) if fn.params["tg_p_mn"] else encoder(Mk, g.K, lda, 128, bk, 128, d)
    eb = encoder(Nk, g.K, ldb, fn.params["bn"], bk, 128, d)
    tiles = fn.spec.grid(Mk, Nk, fn.params)[0]
    grid = (min(tiles, sms), 1, splits)
    S = WGMMA_TF32
    args = S.values(M=Mk, N=Nk, K=g.K, tA=bytes(128), tB=bytes(128), A=0, lda=lda, B=0, ldb=ldb, C=0, ldc=g.ldc, D=0,
                    ldd=g.ldd if ldd is None else ldd, sD=sD, alpha=alpha, beta=beta, k_split=k_split or -(-g.K // bk) * bk)
    ptrs = ((S.slot("D"), out, offs[D] if out == D else 0), (S.slot("C"), C, offs[C]), (S.slot("A"), wa, oa),
            (S.slot("B"), wb, ob))
    maps = ((S.slot("tA"), wa, oa, 0, ea), (S.slot("tB"), wb, ob, 0, eb))
    return Step(fn.prepare(grid, False), tuple(args), ptrs, maps=maps)
