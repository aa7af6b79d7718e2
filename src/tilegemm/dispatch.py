"""Running a planned call: where it runs (device, stream), the result's memory, and the program of
launches each path needs.

Paths (``build``): the family with one block per tile (batches in chunks of the grid's z limit),
split-K into a workspace followed by the reduction, split-K summed in the kernel (sk = 2), stream-K
(sk = 1), a ladder rung (one launch per product), and K = 0 (D = beta * C, or zeros); on Hopper the
tensor-core path: rung 10's kernel (tf32x3, and tf32 where an operand's copy would be too large) or
wgmma_tf32.cu (tf32), an operand TMA cannot read as stored copied into the workspace first.  The
launches besides the family's are built by steps.py.  Every argument
but the pointers is fixed when the program is built, and every error is raised then, before any
launch.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import builds, gpu, hopper, registry
from .arrays import UNKNOWN, Operand, describe
from .launch import (GEMM, RUNG, WGMMA, A, B, C, D, W, Program, Step, launcher, wgmma_launcher,
                     wgmma_tf32_launcher)
from .access import (ROW_CLASSES, aligned_cols, copy_floats, family_copies, family_layout, family_widths,
                     stored_views, vector_width)
from .plan import GRID_Z, Plan, plan
from .steps import pack_step, reduce_step, tf32_step, tma_step, transpose_step

FAMILY = registry.FAMILY.name
_ext_streams: dict[tuple, object] = {}


# --------------------------------------------------------------------------- streams and memory


def stream_for(kind: str, device: int):
    """The stream a call runs on: torch's current stream for torch tensors, else CuPy's current one."""
    cupy = gpu.cupy()
    if kind != "torch":
        return cupy.cuda.get_current_stream()
    ptr = _torch_stream(device)
    stream = _ext_streams.get((device, ptr))
    if stream is None:
        if len(_ext_streams) > 256:
            _ext_streams.clear()
        stream = _ext_streams[(device, ptr)] = cupy.cuda.ExternalStream(ptr, device)
    return stream


def _torch_stream(device: int) -> int:
    """The handle of torch's current stream on ``device`` (its raw query where torch has one:
    ``torch.cuda.current_stream`` builds a Stream object per call)."""
    global _raw_stream
    if _raw_stream is None:
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _raw_stream = raw if raw is not None else (lambda d: torch.cuda.current_stream(d).cuda_stream)
    return int(_raw_stream(device))


_raw_stream = None  # torch's current-stream query, found on first use (torch stays optional)


def stream_kind(p: Plan) -> str:
    """"torch" where any operand is a torch tensor (the call then runs on torch's current stream,
    in order with the torch work around it), else "cupy"."""
    return "torch" if any(m is not None and m.op.kind == "torch" for m in (p.a, p.b, p.c, p.out)) else "cupy"


def empty(kind: str, shape: tuple, device: int, stream, colmajor: bool = False):
    """A new float32 result of the call's array type (torch or CuPy), its matrices column-major when
    ``colmajor``: the result's memory (workspaces: ``launch.workspace``)."""
    mshape = shape[:-2] + (shape[-1], shape[-2]) if colmajor else shape
    if kind == "torch":
        import torch

        arr = torch.empty(mshape, dtype=torch.float32, device=f"cuda:{device}")
        return arr.transpose(-1, -2) if colmajor else arr
    with stream:
        arr = gpu.cupy().empty(mshape, dtype=np.float32)
    return arr.swapaxes(-1, -2) if colmajor else arr


def pointer(arr) -> int:
    return int(arr.data_ptr()) if hasattr(arr, "data_ptr") else int(arr.data.ptr)


# --------------------------------------------------------------------------- where the call runs


def _again(p: Plan, a: Operand, b: Operand, c: Operand | None, out: Operand | None) -> Plan:
    return plan(a, b, out, p.kernel, dict(p.config), c, p.alpha, p.beta, p.pdl, p.precision)


def _on_device(p: Plan) -> Plan:
    """CUDA-array-interface operands get their device from the driver, and the call is planned again."""
    if p.device != UNKNOWN:
        return p
    runtime = gpu.cupy().cuda.runtime

    def resolve(m):
        if m is None or m.op.device != UNKNOWN:
            return None if m is None else m.op
        o = m.op
        return dataclasses.replace(o, device=int(runtime.pointerGetAttributes(o.ptr).device))

    return _again(p, resolve(p.a), resolve(p.b), resolve(p.c), resolve(p.out))


def run(p: Plan, choose):
    """Run ``p``; ``choose(device, geometry.key, precision)`` gives the family's config where the
    call names none.  NumPy inputs are copied to the current GPU (its current stream) and planned again there;
    their result comes back as NumPy (or into the NumPy ``out``).  Returns (the result, the program
    that computed it, None when there was nothing to launch)."""
    gpu.require_gpu("tilegemm")
    cupy = gpu.cupy()
    p = _on_device(p)
    host_out = p.out.op if p.host and p.out is not None else None
    device = cupy.cuda.runtime.getDevice() if p.host else p.device
    with cupy.cuda.Device(device):
        host, shape = p.host, p.shape
        if host:
            def copy(m):
                return None if m is None else describe(cupy.asarray(m.op.obj), m.op.name)
            p = _again(p, copy(p.a), copy(p.b), copy(p.c), None)
        kind = "torch" if p.a.op.kind == "torch" else "cupy"  # the result's type: a's
        stream = stream_for(stream_kind(p), device)
        if p.out is None:
            result = empty(kind, p.batch + (p.M, p.N), device, stream, p.out_colmajor)
            pd = pointer(result)
        else:
            result, pd = p.out.op.obj, p.out.op.ptr
        pa, pb, pc = p.a.op.ptr, p.b.op.ptr, p.c.op.ptr if p.c is not None else 0
        program = None
        if p.M and p.N and p.count:
            program = build(p, device, (pa, pb, pc, pd), lambda key, precision: choose(device, key, precision))
            program.run(pa, pb, pc, pd, stream)
        if host:
            res = result.get(stream=stream).reshape(shape)
            if host_out is None:
                return res, program
            host_out.obj[...] = res
            return host_out.obj, program
    if p.out is None and tuple(result.shape) != p.shape:
        result = result.reshape(p.shape)
    return result, program


# --------------------------------------------------------------------------- programs


def build(p: Plan, device: int, ptrs: tuple, choose) -> Program:
    """The launches of ``p`` for pointers ``ptrs`` (a, b, c, d as the call names them; their
    16-byte alignment picks the load width); ``choose(key, precision)``: the family's config."""
    g = p.geom
    pa, pb, pc, pd = ptrs
    if g.swap:
        pa, pb = pb, pa
    beta = p.beta if p.c is not None else 0.0
    config = None
    hopper = g.K and p.kernel == FAMILY and _on_hopper_tensor_cores(p, g, device)
    if g.K and p.kernel == FAMILY and not hopper:
        config = dict(p.config) if p.config else dict(choose(g.key, p.precision))
        if p.precision != "fp32":  # the precision sets "mma" (the plan checked a given one agrees)
            config["mma"] = registry.PRECISIONS[p.precision]
    steps, work = [], 0
    for oa, ob, oc, od in g.offsets:
        at = (pa + 4 * oa, pb + 4 * ob, pc + 4 * oc, pd + 4 * od)
        offs = (4 * oa, 4 * ob, 4 * oc, 4 * od)
        if g.K == 0:
            steps.append(reduce_step(p, g, device, at, offs, splits=0, ldw=0, beta=beta))
        elif hopper:
            more, w, config = _wgmma_family(p, g, device, at, offs, beta)
            steps += more
            work = max(work, w)
        elif p.kernel == FAMILY:
            more, w = _family(p, g, device, config, at, offs, beta)
            steps += more
            work = max(work, w)
        else:
            steps += _rung(p, g, device, at, offs)
    return Program(device, g.swap, work, tuple(steps), config)


def _rung(p, g, device, at, offs) -> list[Step]:
    """A ladder rung: one launch per product of the batch (C = A B, no alpha or beta)."""
    sa, sb, _, sd = g.strides
    vec = vector_width((at[A], g.lda, sa), (at[B], g.ldb, sb), (at[D], g.ldd, sd))
    fn = launcher(p.kernel, g.layout, vec, device, p.config, (g.lda, g.ldb))
    grid = fn.spec.grid(g.M, g.N, fn.params)
    if grid[1] > 65535 or grid[0] > 2**31 - 1:
        raise ValueError(f"M = {g.M} is too large for {p.kernel}'s grid (at most 65535 block rows)")
    if fn.signature is WGMMA:
        grid = hopper.wgmma_grid(grid[0], gpu.device_properties(device).sms, fn.params["tg_tma"])
        return [tma_step(p, g, fn, grid, at, offs, vector_width((at[A], g.lda, sa), (at[B], g.ldb, sb)))]
    args = tuple(RUNG.values(M=g.M, N=g.N, K=g.K, A=0, lda=g.lda, B=0, ldb=g.ldb, C=0, ldc=g.ldd))
    ptrs = ((RUNG.slot("A"), A, offs[A]), (RUNG.slot("B"), B, offs[B]), (RUNG.slot("C"), D, offs[D]))
    return [Step(fn.prepare(grid, False), args, ptrs, repeat=g.count, strides=(4 * sa, 4 * sb, 4 * sd))]


def _on_hopper_tensor_cores(p, g, device) -> bool:
    """Whether a tensor-core call runs the Hopper kernels (wgmma: rung 10's, or wgmma_tf32.cu for tf32):
    on an sm_90 GPU, one product per launch, no config named (a config names the mma.sync family)."""
    if p.precision == "fp32" or p.config or g.count != 1:
        return False
    return hopper.hopper_tensor_cores(gpu.device_properties(device))


def _wgmma_family(p, g, device, at, offs, beta) -> tuple[list[Step], int, dict]:
    """The Hopper tensor-core path: rung 10's kernel on 128- or 64-row tiles, split over K where they
    leave SMs idle, the splits added by the reduction with alpha and beta; an operand TMA cannot
    read (rows not 16-byte aligned) copied first into aligned rows of the workspace (beyond a limit
    the kernel's producer copies the tiles by cp.async): hopper.wgmma_config.  The steps, the workspace (floats) and the config run."""
    views = stored_views(g.layout, g.M, g.N, g.K)
    aligned = (vector_width((at[A], g.lda)) == 4, vector_width((at[B], g.ldb)) == 4)
    sms = gpu.device_properties(device).sms
    tf32 = hopper.tf32_config(g.layout, g.M, g.N, g.K, aligned, sms) if p.precision == "tf32" else None
    if tf32 is not None:
        return _tf32(p, g, device, at, offs, beta, tf32, sms)
    c = hopper.wgmma_config(g.layout, g.M, g.N, g.K, aligned, sms)
    pack, bm, splits, k_split = c["pack"], c["bm"], c["splits"], c["k_split"]
    fn = wgmma_launcher(g.layout, device, registry.PRECISIONS[p.precision], pack is not None, bm)
    grid = hopper.wgmma_grid(fn.spec.grid(g.M, g.N, fn.params)[0], sms, fn.params["tg_tma"])
    ldw = aligned_cols(g.N)
    work = splits * g.M * ldw if splits > 1 else 0
    steps, src = [], [(A, offs[A], g.lda), (B, offs[B], g.ldb)]
    for i, (which, ld) in enumerate(((A, g.lda), (B, g.ldb))):
        if pack and pack & (1 << i):
            dst, work, src[i] = _workspace_copy(work, views[i])
            steps.append(pack_step(device, views[i], ld, which, offs[which], dst, p.pdl))
    config = {**fn.params, "splits": splits, "pack": pack or 0}
    if splits == 1:
        steps.append(tma_step(p, g, fn, grid, at, offs, 4, alpha=p.alpha, beta=beta, src=src))
        return steps, work, config
    steps.append(tma_step(p, g, fn, grid, at, offs, 4, splits, k_split, out=W, ldd=ldw, sD=g.M * ldw, src=src))
    return steps + [reduce_step(p, g, device, at, offs, splits, ldw, beta)], work, config


def _workspace_copy(work: int, view: tuple) -> tuple[int, int, tuple]:
    """A copy of an operand's ``view`` (rows, cols) in the workspace after its first ``work`` floats:
    (its byte offset, 256-byte aligned; the workspace's floats with it; where a kernel reads it:
    (W, byte offset, row length: cols rounded up to 4))."""
    dst = -(-work // 64) * 64
    return 4 * dst, dst + copy_floats(view), (W, 4 * dst, aligned_cols(view[1]))


def _tf32(p, g, device, at, offs, beta, ops, sms) -> tuple[list[Step], int, dict]:
    """Precision "tf32" on Hopper: wgmma_tf32.cu as ``ops`` (hopper.tf32_config) says: its tile
    width and split over K, its A and B the call's A and B, or B and A (swap), each read as stored,
    copied into aligned rows or transposed into the workspace first.  The steps, the workspace
    (floats) and the config run."""
    swap, bn, splits, k_split = ops["swap"], ops["bn"], ops["splits"], ops["k_split"]
    fn = wgmma_tf32_launcher(device, bn, ops["p_mn"], swap)
    ldw = aligned_cols(g.N)
    work = splits * g.M * ldw if splits > 1 else 0
    steps, src = [], []
    operands = ((B, g.ldb, g.N), (A, g.lda, g.M)) if swap else ((A, g.lda, g.M), (B, g.ldb, g.N))
    for (which, ld, rows), kmajor, how in zip(operands, (not ops["p_mn"], True), (ops["a"], ops["b"])):
        view = (rows, g.K) if kmajor else (g.K, rows)  # the view the kernel reads (rows, contiguous cols)
        if how == "stored":
            src.append((which, offs[which], ld))
            continue
        dst, work, at_copy = _workspace_copy(work, view)
        src.append(at_copy)
        if how == "copy":
            steps.append(pack_step(device, view, ld, which, offs[which], dst, p.pdl))
        else:  # stored the other way: (K, rows) transposed into (rows, K)
            steps.append(transpose_step(device, view[::-1], ld, which, offs[which], dst, p.pdl))
    config = hopper.tf32_record(ops)
    if splits == 1:
        return steps + [tf32_step(g, fn, offs, src, swap, sms, alpha=p.alpha, beta=beta)], work, config
    steps.append(tf32_step(g, fn, offs, src, swap, sms, splits, k_split, out=W, ldd=ldw, sD=g.M * ldw))
    return steps + [reduce_step(p, g, device, at, offs, splits, ldw, beta)], work, config


def _family(p, g, device, config, at, offs, beta) -> tuple[list[Step], int]:
    """The family's launches for one run of the batch, and the workspace they need (floats): the
    split-K planes or the stream-K slots first, then the copies of operands whose rows are not
    16-byte aligned where copying them pays (access.family_copies)."""
    sa, sb, sc, sd = g.strides
    cfg = {k: v for k, v in config.items() if k != "splits"}
    sk = cfg.get("sk", 0)
    # the splits as run (builds.split_k: a config named by the call, or chosen for a bucket of shapes,
    # that asks for more than K allows runs with as many as it does)
    splits, k_split = builds.split_k(g.K, 1 if sk == 1 else config.get("splits", 1))
    params = registry.FAMILY.params(cfg)
    cp_async = params["stages"] >= 2
    ops = [(at[A], g.lda, sa), (at[B], g.ldb, sb)]
    # NT and TT run as NN and TN on B transposed into aligned K x N rows, NN as TN on A transposed into aligned K x M
    # rows, where that pays (access.family_layout; measured on the FFMA configs only, so the tensor-core ones read the
    # operands as they are)
    layout = family_layout(params, g.layout, g.M, g.N, g.K, g.count, gpu.device_properties(device).name)
    transposed = [layout[i] != g.layout[i] for i in (0, 1)]
    for i, rows in ((0, g.M), (1, g.N)):
        if transposed[i]:
            ops[i] = (0, aligned_cols(rows), 0)
    copied = family_copies(layout, cp_async, [vector_width(o, pairs=True) for o in ops], g.M, g.N, g.K, g.count)
    views = stored_views(layout, g.M, g.N, g.K)
    for i in (0, 1):
        if copied[i]:
            ops[i] = (0, aligned_cols(views[i][1]), 0)  # the copy: aligned rows
    # the parameters with which it reads B's rows of each class by rows, where it does (access.ROW_CLASSES)
    by_rows = {code: q for code in ROW_CLASSES
               if (q := builds.by_rows(params, code)) is not None and code in registry.family_row_classes(q)}
    vec = family_widths(layout, cp_async, ops[0], ops[1], None if sk == 0 and splits > 1 else (at[D], g.ldd, sd),
                        tuple(by_rows))
    # the build's parameters: B's rows read by rows (builds.BY_ROWS_MINB), or not, at the blocks an SM
    # the arch's build holds where that was measured (builds.ARCH_MINB)
    q = (by_rows[vec[1]] if isinstance(vec, tuple) and vec[1] in by_rows
         else builds.arch_minb(params, layout, vec, gpu.device_properties(device).arch))
    if q is not params:
        cfg = {k: v for k, v in q.items() if k != "splits"}
    lda, ldb = ops[0][1], ops[1][1]
    fn = launcher(FAMILY, layout, vec, device, tuple(sorted(cfg.items())), (lda, ldb))
    bm, bn = fn.spec.tile(fn.params)
    tiles = -(-g.M // bm) * -(-g.N // bn)
    units = tiles * (g.count if sk else 1) * (splits if sk == 2 else 1)  # blocks one grid indexes
    if units > 2**31 - 1:
        raise ValueError(f"{g.count} x {g.M} x {g.N} has too many {bm} x {bn} tiles for one grid")
    base = dict(M=g.M, N=g.N, K=g.K, A=0, lda=lda, sA=sa, B=0, ldb=ldb, sB=sb, C=0, ldc=g.ldc, sC=sc,
                D=0, ldd=g.ldd, sD=sd, alpha=p.alpha, beta=beta, k_split=k_split, splits=splits, W=0, flags=0,
                epoch=0, count=g.count, first=0)
    ptr = {n: GEMM.slot(n) for n in "ABCDW"}
    ldw = aligned_cols(g.N)
    if sk:
        resident = fn.resident_blocks()
        if resident < 1:
            raise RuntimeError(f"{'stream-K' if sk == 1 else 'split-K'} config {fn.params} fits no block on an "
                               f"SM of device {device}")
        if sk == 1:  # stream-K: as many blocks as are resident, sharing the k-iterations evenly
            per = max(1, min(resident, units * -(-g.K // fn.params["bk"])))
        else:  # split-K summed in the kernel: a launch holds whole tiles, no more blocks than are resident
            per = (resident // splits) * splits
            if per < 1:
                raise RuntimeError(f"split-K config {fn.params} with {splits} splits: fewer blocks than that "
                                   f"fit on device {device} at once")
        blocks = [(per, 0)] if sk == 1 else [(min(per, units - f), f) for f in range(0, units, per)]
        parts = 2 if sk == 1 else 1  # W's slots and flags a block: stream-K's blocks hold a tile's head and a tail
        work = max(n for n, _ in blocks) * bm * bn * parts
    else:
        blocks = []
        work = g.count * splits * g.M * ldw if splits > 1 else 0
    steps, src = [], [(A, offs[A]), (B, offs[B])]
    for i, which in enumerate((A, B)):
        if copied[i]:
            dst, work, (_, off, _) = _workspace_copy(work, views[i])
            steps.append(pack_step(device, views[i], (g.lda, g.ldb)[i], which, offs[which], dst, p.pdl))
            src[i] = (W, off)
    for i, which, rows, ld in ((0, A, g.M, g.lda), (1, B, g.N, g.ldb)):
        if transposed[i]:  # A as stored, M x K, or B, N x K, into K rows of M or N floats rounded up to 4
            dst, work, (_, off, _) = _workspace_copy(work, (g.K, rows))
            steps.append(transpose_step(device, (rows, g.K), ld, which, offs[which], dst, p.pdl))
            src[i] = (W, off)
    (wa, oa), (wb, ob) = src
    if sk:
        for n, first in blocks:
            args = GEMM.values(**{**base, "first": first})
            steps.append(Step(fn.prepare((n, 1, 1), p.pdl), tuple(args),
                              ((ptr["A"], wa, oa), (ptr["B"], wb, ob), (ptr["C"], C, offs[C]),
                               (ptr["D"], D, offs[D]), (ptr["W"], W, 0)),
                              (GEMM.slot("flags"), GEMM.slot("epoch"), parts * n)))
        return steps, work
    # one block per tile and split; the batch in chunks of the grid's z limit.  With splits > 1 each
    # split writes its own plane of the workspace (rows padded to a multiple of 4 floats, so the
    # float4 stores that the output's alignment allows stay aligned there too), then the reduction
    if splits > 1:
        base.update(ldd=ldw, sD=g.M * ldw, alpha=1.0, beta=0.0)
    out, out_stride = (W, splits * g.M * ldw) if splits > 1 else (D, sd)
    per = max(1, GRID_Z // splits)
    for first in range(0, g.count, per):
        n = min(per, g.count - first)
        args = GEMM.values(**{**base, "count": n})
        steps.append(Step(fn.prepare((tiles, 1, n * splits), p.pdl), tuple(args),
                          ((ptr["A"], wa, oa + 4 * first * sa), (ptr["B"], wb, ob + 4 * first * sb),
                           (ptr["C"], C, offs[C] + 4 * first * sc),
                           (ptr["D"], out, (offs[D] if out == D else 0) + 4 * first * out_stride))))
    if splits == 1:
        return steps, work
    steps.append(reduce_step(p, g, device, at, offs, splits, ldw, beta))
    return steps, work
