"""How the kernels reach their operands in memory, from pointers, leading dimensions and shapes
alone (no GPU needed): the access width each operand allows, 64-bit copy offsets for huge leading
dimensions, and which misaligned operands the family reads from aligned copies instead."""

from __future__ import annotations


WIDE_LD_MIN = 2**31 // (2**14 + 1)  # below it no tile (at most 2^14 rows) spans 2^31 elements


def needs_wide_offsets(extent: int, *lds: int) -> bool:
    """True when a tile spanning ``extent`` rows of an operand with one of the leading dimensions
    ``lds`` can reach 2^31 elements from its first element: the cp.async kernels then use 64-bit
    copy offsets (TG_OFF64, tg_async.cuh).  Only views with a huge leading dimension need them."""
    return (extent + 1) * max((abs(int(ld)) for ld in lds), default=0) >= 2**31


def vector_width(*operands: tuple, pairs: bool = False) -> int:
    """4 when every (pointer, leading dimension or batch stride...) allows 16-byte accesses; else, with
    ``pairs`` (the family), 2 when every one allows 8-byte accesses; else 1."""
    for width in (4, 2) if pairs else (4,):
        if all(ptr % (4 * width) == 0 and all(s % width == 0 for s in rest) for ptr, *rest in operands):
            return width
    return 1


def stored_views(layout: str, M: int, N: int, K: int) -> tuple:
    """(rows, cols) of A and of B as stored (cols contiguous): how a copy into aligned rows, or a TMA
    tensor map, reads them."""
    return ((M, K) if layout[0] == "N" else (K, M)), ((K, N) if layout[1] == "N" else (N, K))


def aligned_cols(cols: int) -> int:
    """The row length of a copy in 16-byte aligned rows (and of the split-K workspace's rows): cols
    rounded up to a multiple of 4 floats."""
    return -(-cols // 4) * 4


def copy_floats(view: tuple) -> int:
    """Floats of an operand's copy in aligned rows: its rows of ``aligned_cols``."""
    rows, cols = view
    return rows * aligned_cols(cols)


# Copying an operand whose rows are not 16-byte aligned into aligned rows lets the family copy its
# tiles 16 bytes at a time instead of 4 or 8.  The copy reads and writes the operand once, about
# 60/P of the product's time on the H100 where P is the product's multiply-adds per element copied
# (M for B in NN).  Measured (docs/perf-notes.md): the aligned copy gains 0-10% on most shapes and
# 5-30% where the operand's rows are narrow (few columns of B), so it is made when P reaches
# COPY_MACS_PER_ELEMENT (the copy then costs at most about 3%), or NARROW_COPY_MACS_PER_ELEMENT for
# rows of at most NARROW_ROWS floats, or ODD_COPY_MACS_PER_ELEMENT for rows that are not even 8-byte
# aligned (read 4 bytes at a time: on 40 shapes with B's rows so, copying B gained 8.8% on average
# from M = 1000, 1.7% from 500, and lost 9.5% below; rows 8-byte aligned gained nothing; on 20 fresh
# shapes with 512 <= M < 1024, 0.7%, the three below 0.90x rising to 0.895-0.961x and one falling
# to 0.882x: copies of 4 or 8 bytes take about 2.3x the shared-memory wavefronts of 16-byte copies
# for the same bytes, aligned or not, on the pipe the K loop's LDS.128 keep busy; docs/perf-notes.md).
# The copy itself (pack.cu) runs at about a device-to-device copy's rate, so it cannot get much cheaper.
# ODD_COPY_MACS_FIRST: the threshold calibrations marked "odd_copies" without "odd_copy_macs" ran under.
COPY_MACS_PER_ELEMENT = 2048
NARROW_ROWS = 384
NARROW_COPY_MACS_PER_ELEMENT = 640
ODD_COPY_MACS_PER_ELEMENT = 512
ODD_COPY_MACS_FIRST = 1024
# No copy holds more floats than this (1 GiB of workspace); the Hopper path's copies keep the same bound
COPY_LIMIT = 1 << 28


def family_copies(layout: str, copies: bool, widths: tuple, M: int, N: int, K: int, count: int,
                  odd: bool = True, odd_from: int | None = None) -> tuple[bool, bool]:
    """Whether the family reads A, B from aligned copies in the workspace: only operands it copies
    along their rows (A as a transposed view, B as stored; ``copies``: the cp.async configs), not
    16-byte aligned (``widths``: A's, B's access width in floats, 4, 2 or 1, as ``vector_width``
    with pairs), one product per run, when the copy pays and holds at most COPY_LIMIT floats.
    ``odd``: whether rows of width 1 have a threshold of their own (False: the rule before there was
    one, which calibrations measured before it ran under).  ``odd_from``: that threshold, in
    multiply-adds per element (None: ODD_COPY_MACS_PER_ELEMENT)."""
    odd_from = ODD_COPY_MACS_PER_ELEMENT if odd_from is None else odd_from
    if any(isinstance(w, bool) or w not in (1, 2, 4) for w in widths):
        raise ValueError(f"widths must be access widths 4, 2 or 1 (floats), not {widths!r}")
    along = (layout[0] == "T", layout[1] == "N")
    views = stored_views(layout, M, N, K)  # an operand copied along its rows is K x (its M or N)

    def pays(i: int) -> bool:
        if copy_floats(views[i]) > COPY_LIMIT:
            return False
        row = views[i][1]
        per = M * N // row  # multiply-adds per element copied
        return (per >= COPY_MACS_PER_ELEMENT or (row <= NARROW_ROWS and per >= NARROW_COPY_MACS_PER_ELEMENT)
                or (odd and widths[i] == 1 and per >= odd_from))

    return tuple(bool(copies and count == 1 and along[i] and widths[i] != 4 and K > 0 and pays(i)) for i in (0, 1))


# In NT and TT (B a transposed view: N x K as stored, as torch keeps a linear layer's weight) the family
# copies B's tiles across its rows, 4 bytes at a time.  Measured (docs/perf-notes.md), the family ran NT
# products 2-7% faster (4.0% on average) with B held as a contiguous K x N array (NN); a transposed copy
# of B moves 8 bytes per element of B, about 67/P of the product's time at 3 TB/s (P: multiply-adds per
# element copied, M for B), so it is made from COPY_MACS_PER_ELEMENT, as the aligned copies are, and only
# from TRANSPOSE_MIN_MACS multiply-adds: on 30 NT products below that (M from 2048, 10^7 to 2^30
# multiply-adds), reading B as it is ran 0.88x the device time of the transpose and the NN kernel, and
# 0.80x the time per call (the extra launch, on the host too).  TT runs as TN by the same rule: on 60 TT
# products of a fresh draw that it transposes, the same configs ran 1.5% faster as TN, transpose included
# (3 of them over 2% slower), and the picks 1.041x -> 1.054x cuBLAS on the H200.
TRANSPOSE_MIN_MACS = 1 << 30
TRANSPOSED_RUNS = {"NT": "NN", "TT": "TN"}  # the layout a product whose B is transposed first runs in
# In NN the family copies A's tiles across A's rows, 4 bytes at a time, as it does B's in TT; an NN product runs as TN
# on a transposed copy of A (K rows of M floats rounded up to 4) by the same rule, N multiply-adds per element copied.
# Measured (docs/perf-notes.md): on 36 NN products from 2048 columns of a fresh draw, transposed A and the pick as TN
# took 0.977x the time (23 faster by over 1%, 5 slower, the slowest with K under 210).  Not NT's: B transposed
# already, transposing A too took 0.996x the time on 36 NT products (it stays NN).  Measured on the H200 only: the
# H100's rates in TN (model.LAYOUT_RATES: its 16 x 8 tiles 5-6% slower than in NN) have its model price the rule at
# about 3% slower on the large NN products, so there, and on any GPU not listed, NN runs as NN (``gpu``: its name).  An
# NN product with a column-major result is turned around into TT (its A becomes the B that TT's rule transposes, on
# every GPU), as before this rule.
A_TRANSPOSED_RUNS = {"NN": "TN"}  # the layout a product whose A is transposed first runs in
A_TRANSPOSE_GPUS = ("NVIDIA H200",)


def _transpose_pays(per: int, M: int, N: int, K: int, count: int, floats: int) -> bool:
    """One product per run of at least TRANSPOSE_MIN_MACS multiply-adds, from COPY_MACS_PER_ELEMENT multiply-adds
    per element copied (``per``), the copy (``floats``) at most COPY_LIMIT."""
    return (count == 1 and K > 0 and per >= COPY_MACS_PER_ELEMENT and M * N * K >= TRANSPOSE_MIN_MACS
            and floats <= COPY_LIMIT)


def family_transposes(layout: str, copies: bool, M: int, N: int, K: int, count: int) -> bool:
    """Whether the family runs an NT or TT product as NN or TN (TRANSPOSED_RUNS) on a transposed copy
    of B in the workspace (K rows of N floats rounded up to 4): cp.async configs (``copies``), where it
    pays (``_transpose_pays``: M multiply-adds per element of B)."""
    return bool(copies and layout in TRANSPOSED_RUNS and _transpose_pays(M, M, N, K, count, copy_floats((K, N))))


def family_transposes_a(layout: str, copies: bool, M: int, N: int, K: int, count: int, gpu: str | None = None) -> bool:
    """Whether the family runs an NN product as TN (A_TRANSPOSED_RUNS) on a transposed copy of A in the
    workspace (K rows of M floats rounded up to 4) on the GPU named ``gpu`` (A_TRANSPOSE_GPUS; None: none):
    cp.async configs (``copies``), where it pays (``_transpose_pays``: N multiply-adds per element of A)."""
    return bool(copies and gpu in A_TRANSPOSE_GPUS and layout in A_TRANSPOSED_RUNS
                and _transpose_pays(N, M, N, K, count, copy_floats((K, M))))


def kernel_layout(layout: str, M: int, N: int, K: int, count: int = 1, gpu: str | None = None) -> str:
    """The layout the family's cp.async FFMA configs (those the cost model ranks) run a product of contiguous
    operands of ``layout`` in on the GPU named ``gpu``: NN or TN for an NT or TT product whose B they transpose first
    (``family_transposes``), TN for an NN product whose A they transpose first (``family_transposes_a``), else
    ``layout``."""
    return _run_in(layout, True, M, N, K, count, gpu)


def family_layout(p: dict, layout: str, M: int, N: int, K: int, count: int = 1, gpu: str | None = None) -> str:
    """The layout in which gemm.cu runs, with the config of parameters ``p`` (registry.FAMILY.params),
    a product of contiguous operands of ``layout`` on the GPU named ``gpu``: NN or TN for an NT or TT product whose B
    it transposes first (``family_transposes``: the cp.async FFMA configs, where that was measured to pay), TN for an
    NN product whose A it transposes first (``family_transposes_a``), else ``layout``.  The build a check of the
    config (spills, registers, SASS) must compile."""
    return _run_in(layout, p["stages"] >= 2 and not p["mma"], M, N, K, count, gpu)


def _run_in(layout: str, copies: bool, M: int, N: int, K: int, count: int, gpu: str | None) -> str:
    """TRANSPOSED_RUNS' layout where ``family_transposes``, A_TRANSPOSED_RUNS' where ``family_transposes_a``, else
    ``layout``."""
    if family_transposes(layout, copies, M, N, K, count):
        return TRANSPOSED_RUNS[layout]
    return A_TRANSPOSED_RUNS[layout] if family_transposes_a(layout, copies, M, N, K, count, gpu) else layout


def row_widths(layout: str, M: int, N: int, K: int, count: int = 1, pairs: bool = True,
               odd: bool = True, odd_from: int | None = None) -> tuple[int, int]:
    """(A's, B's) access width (floats) with which the family's cp.async configs copy each operand
    along its rows, for contiguous operands of this shape: A when a transposed view (rows of M
    floats), B as stored (rows of N); 4 where the rows are 16-byte aligned or copied into aligned
    rows (``family_copies``, ``odd`` and ``odd_from`` as there) or the operand is copied across its rows, 2 where
    they are 8-byte aligned (``pairs``: the kernels take 8-byte accesses), else 1."""
    along = ((layout[0] == "T", M), (layout[1] == "N", N))
    widths = [vector_width((0, n), pairs=pairs) for _, n in along]  # contiguous: 256-byte aligned, rows of n
    copied = family_copies(layout, True, tuple(widths), M, N, K, count, odd, odd_from)
    a, b = (4 if copy or not is_along else w for (is_along, _), w, copy in zip(along, widths, copied))
    return a, b


def out_width(N: int, pairs: bool = True) -> int:
    """The access width (floats) with which the family stores a contiguous row-major result of N
    columns (rows of N floats, 256-byte aligned): 4, 2 (``pairs``: the kernels take 8-byte
    accesses) or 1.  What the cost model charges for (model, ``v``)."""
    return vector_width((0, N), pairs=pairs)


# Width codes of rows whose starts alternate between two alignments, which the family's cp.async
# configs copy by rows (B's, where a config takes them: family_widths): every other row is copied
# at the wider width, the others at the narrower (tg_async.cuh, RowClassTile), a quarter fewer copies
# than the narrower width on every row.  Not numbers of floats (3 = 2 + 1, 6 = 4 + 2: the two widths).
# ODD_ROWS: rows of odd length (an odd leading dimension): 8 and 4 bytes.  ODD_PAIRS: rows of twice
# an odd length (leading dimension 2 mod 4) from 8-byte aligned starts: 16 and 8 bytes.
ODD_ROWS = 3
ODD_PAIRS = 6
ROW_CLASSES = {ODD_ROWS: (2, 1), ODD_PAIRS: (4, 2)}  # code: (the wider width, the narrower), floats


def row_class(width: int, ld: int) -> int | None:
    """The width code (ROW_CLASSES) with which rows of leading dimension ``ld`` can be copied by
    rows, for an operand whose access width (``vector_width`` with pairs) is ``width``; None when
    every row starts alike: rows ``lo`` floats aligned whose length is ``lo`` past a multiple of ``hi``
    start alternately ``hi`` and ``lo`` floats aligned."""
    return next((code for code, (hi, lo) in ROW_CLASSES.items() if width == lo and ld % hi == lo), None)


def family_widths(layout: str, copies: bool, a: tuple, b: tuple, d: tuple | None,
                  classes: tuple = ()) -> int | tuple[int, int, int]:
    """The family's access width per operand (A, B, D) in floats, 4, 2 or 1 (16-, 8- or 4-byte
    accesses), each operand given as in ``vector_width``.
    ``copies``: the config copies its tiles with cp.async (stages >= 2, or the tensor cores), where an
    operand whose k runs along its rows in memory (A as stored, B as a transposed view) is copied 4
    bytes at a time whatever its alignment, so its width is 4 (one build for every alignment).  The
    register pipeline reads both along their rows.  ``d``: None when the kernel writes the split-K
    workspace, whose rows are padded to a multiple of 4 floats.  C is read 4 bytes at a time.
    ``classes``: the width codes of ROW_CLASSES the config copies by rows (a cp.async config,
    registry.family_row_classes): B copied along rows of that class takes the code (A, as a
    transposed view, takes them too in the kernel, but no measurement has shown that it pays there).
    One number when the three agree (the build every operand shares), else (A, B, D)."""
    wb = vector_width(b, pairs=True)
    by_rows = row_class(wb, b[1]) if copies and layout[1] == "N" else None
    widths = (4 if copies and layout[0] == "N" else vector_width(a, pairs=True),
              4 if copies and layout[1] == "T" else by_rows if by_rows in classes else wb,
              4 if d is None else vector_width(d, pairs=True))
    return widths[0] if len(set(widths)) == 1 else widths
