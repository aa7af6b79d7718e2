"""What the cost model's few constants miss, read from the calibration it was fitted to.

A model table's set may keep its calibration's residuals: for every timing, the candidate, the
shape (log2 M, N, K), the access width its candidate read with (builds.read_width) and the log
of measured over predicted time.  The model's error is not noise: the same candidate on shapes
within a factor of two or so is wrong the same way (a narrow B costs more at some N than the tile's
one narrow-read constant says, a tile's waves fit worse at some sizes).  The correction is the
kernel-weighted mean of that candidate's residuals near a shape, shrunk toward zero where few
calibration shapes lie near (``corrections``; docs/model.md):

    corr = sum(w_i * r_i) / (PRIOR + sum(w_i)),   w_i = exp(-d_i^2 / (2 * BANDWIDTH^2)),
    d_i^2 = |log2 shape - log2 shape_i|^2 + WIDTH_STEP * (width != width_i)
            + |log2 splits - log2 splits_i|^2

where a split-K candidate ("<tile> split<s>", "<tile> split<s> summed") borrows the residuals of the
same tile split another number of ways, a doubling of the splits counting as one of a dimension: the
split counts that fill the SMs' block slots (builds.candidates) are seldom the ones calibrated.  Other
candidates take their own residuals only.  The model's time for the candidate is multiplied by exp(corr), for single
products of the calibrations' layout (model.near_for: the NN calibrations correct NN, a table's ``corrections`` for
another layout that layout).  Held out (each calibration
seed picked on by a table fitted to the others) it brought the picks from 1.037x to 1.047x cuBLAS
on the H100's five seeds, against 1.061x for the best candidate (docs/model.md).
"""

from __future__ import annotations

import math
import re

import numpy as np

BANDWIDTH = 1.0  # log2 units: shapes a factor of two apart in one dimension weigh exp(-1/2)
PRIOR = 1.0  # the weight of "no correction": one calibration timing at the shape itself
WIDTH_STEP = 1.0  # a timing at another access width counts as one doubling further away


def row(M: int, N: int, K: int, width: int, error: float) -> list:
    """A residual as a table stores it: [log2 M, log2 N, log2 K, width, log(measured / predicted)],
    the shape to 0.01 of a log2 (0.7%), the error to 0.001."""
    return [round(math.log2(M), 2), round(math.log2(N), 2), round(math.log2(K), 2), int(width), round(error, 3)]


_SPLIT = re.compile(r" split(\d+)")


def group(name: str) -> tuple[str, float]:
    """(the residuals' group, log2 of the split count) of a candidate: split-K candidates of one tile
    and kind form one group, "<tile> split* [summed]"; any other candidate is a group of its own."""
    m = _SPLIT.search(name)
    return (name, 0.0) if m is None else (name[:m.start()] + " split*" + name[m.end():], math.log2(int(m.group(1))))


# id(near) -> (near, group ids, group id of each row, rows of each split group, log2 splits, shapes,
# widths, errors): a table's residuals as arrays, built on first use (a residuals dict changed in place
# afterwards is not seen; tables are read-only)
_ARRAYS: dict = {}


def _arrays(near: dict) -> tuple:
    got = _ARRAYS.get(id(near))
    if got is None or got[0] is not near:
        ids: dict = {}
        rows = [(ids.setdefault(g, len(ids)), s, r) for n in near for g, s in (group(n),) for r in near[n]]
        index = np.array([g for g, _, _ in rows], dtype=np.intp)
        got = (near, ids, index, {g: np.flatnonzero(index == i) for g, i in ids.items() if "split*" in g},
               np.array([s for _, s, _ in rows]), np.array([r[:3] for _, _, r in rows], dtype=float).reshape(-1, 3),
               np.array([r[3] for _, _, r in rows]), np.array([r[4] for _, _, r in rows], dtype=float))
        if len(_ARRAYS) > 8:
            _ARRAYS.clear()
        _ARRAYS[id(near)] = got  # holds ``near``, so its id is not reused while the entry lives
    return got


def corrections(near: dict | None, M: int, N: int, K: int, width: int, names) -> dict:
    """The log correction of the predicted time on this shape of each candidate of ``names``, by
    name, from ``near`` (a set's residuals by candidate, lists of ``row``); 0 for a candidate whose
    group has no residuals."""
    if not near:
        return {}
    _, ids, index, members, splits, shapes, widths, errors = _arrays(near)
    x = np.log2(np.array([max(M, 1), max(N, 1), max(K, 1)], dtype=float))
    d2 = ((shapes - x) ** 2).sum(axis=1) + WIDTH_STEP * (widths != width)
    w = np.exp(-0.5 / (BANDWIDTH * BANDWIDTH) * d2)
    num = np.bincount(index, weights=w * errors, minlength=len(ids))  # by group, no split distance
    den = PRIOR + np.bincount(index, weights=w, minlength=len(ids))
    out, asked = {}, {}
    for name in names:
        g, s = group(name)
        if g not in ids:
            out[name] = 0.0
        elif g in members:
            asked.setdefault(g, []).append((name, s))
        else:
            out[name] = float(num[ids[g]] / den[ids[g]])
    for g, qs in asked.items():  # a split group: each asked split count weighs the others' by distance
        rows = members[g]
        e = np.exp(-0.5 / (BANDWIDTH * BANDWIDTH) * (np.array([s for _, s in qs])[:, None] - splits[rows][None, :]) ** 2)
        wr = w[rows]
        out.update(zip([n for n, _ in qs], ((e @ (wr * errors[rows])) / (PRIOR + e @ wr)).tolist()))
    return out
