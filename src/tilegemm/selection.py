"""Which config of the kernel family runs a given shape: the user's tuning cache, the shipped table,
the cost model, a heuristic.

Lookup, first hit wins, memoised per process so that after the first call for a shape the call
path does no file I/O:
1. the user's tuning cache (``tilegemm tune`` or ``TILEGEMM_AUTOTUNE=1``), keyed by GPU name,
   compute capability, driver, NVRTC and package versions;
2. the table shipped in the package for this GPU name (``tilegemm/tables/<gpu>.json``);
3. the cost model (model.py) where its constants were fitted for this GPU
   (``tilegemm/tables/model-<gpu>.json``, a set for small products and one for the rest): the
   candidate it predicts fastest, NN predictions corrected by the calibration's residuals near the
   shape (residuals.py);
4. the heuristic below (any GPU).
Per layout (the call's, then the one its kernel runs it in, then NN's, whose configs it may borrow:
entries.entry_layouts): entries measured on the very shape come first, from either table; then the
user's entry of the shape's bucket (M, N, K and the batch count each rounded to the nearest power of
two, entries.bucket; ``Selector.source`` gives the order): the tuning cache keeps each tuned shape
under its own key and its bucket's, and a shape whose bucket holds an entry counts as tuned
(``TILEGEMM_AUTOTUNE=1`` does not tune it again).  Entries that measured a run the family no longer
makes (entries.current: an NT or TT product measured before the rule that transposes its B changed, an NN product
measured before the H200's rule that transposes its A, or a build
measured with other ptxas options than it is built with now)
come after all the others, as "stale", and ``TILEGEMM_AUTOTUNE=1`` tunes a shape one serves again.  Shipped
tables (``tilegemm tune --ship``) hold bucket keys with the shape each entry was measured on; on a GPU
with a model table they serve only those shapes (a bucket's other shapes can fill their waves quite
differently), elsewhere their buckets too.  This module measures nothing and tunes nothing: the tuner
(autotune.py) writes the cache through ``record``.
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from pathlib import Path

from . import access, compiler, entries, folders, gpu, model, registry
from ._version import __version__
from .errors import ConfigError
from .occupancy import Limits

TABLE_DIR = Path(__file__).parent / "tables"

# Configs by tile size, largest first (the tuner always times them; the heuristic picks from them).
# HUGE and BIG: cp.async with 3 stages and 16 x 8 threads, the best of the H100/H200 sweeps
# (docs/perf-notes.md, "cp.async pipeline"); HUGE runs one block per SM, so it wants >= 2 waves.
HUGE = {"bm": 256, "bn": 128, "bk": 8, "tm": 16, "tn": 8, "ln": 2, "minb": 1, "swizzle": 8, "stages": 3}
BIG = {"bm": 128, "bn": 128, "bk": 8, "tm": 16, "tn": 8, "ln": 8, "minb": 2, "swizzle": 8, "stages": 3}
MEDIUM = {"bm": 64, "bn": 128, "bk": 16, "tm": 8, "tn": 8, "ln": 8, "minb": 3, "swizzle": 8, "stages": 0}
SMALL = {"bm": 64, "bn": 64, "bk": 16, "tm": 4, "tn": 4, "ln": 8, "minb": 4, "swizzle": 8, "stages": 0}


def _blocks(cfg, M, N, count) -> int:
    return -(-M // cfg["bm"]) * -(-N // cfg["bn"]) * count


def heuristic(M: int, N: int, K: int, count: int, sms: int = 132, l2_bytes: int = 50 << 20) -> dict:
    """A sound config for any GPU: the largest tile that still gives every SM work; stream-K with
    BIG's tiles where they fill less than one wave of its two blocks per SM but at least a fifth
    of it, each block gets >= 16 k-steps and the operands fit in half the L2 (docs/perf-notes.md,
    "Stream-K": 3000x1000x500 and 1024^3); then split-K when even the small tile leaves SMs idle
    and K is long enough to share."""
    if _blocks(HUGE, M, N, count) >= 2 * sms:
        return {**HUGE, "splits": 1}
    tiles, slots = _blocks(BIG, M, N, count), 2 * sms
    if (tiles < slots and 5 * tiles >= slots and tiles * -(-K // BIG["bk"]) >= 16 * slots
            and 4 * count * (M * K + K * N) <= l2_bytes // 2):
        return {**BIG, "splits": 1, "sk": 1}
    for cfg in (BIG, MEDIUM, SMALL):
        if _blocks(cfg, M, N, count) >= sms:
            return {**cfg, "splits": 1}
    cfg = SMALL if _blocks(MEDIUM, M, N, count) < sms // 2 else MEDIUM
    blocks = _blocks(cfg, M, N, count)
    splits = 1
    while blocks * splits * 2 <= 2 * sms and K // (splits * 2) >= 256:
        splits *= 2
    return {**cfg, "splits": splits}


# --------------------------------------------------------------------------- tables and cache


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def cache_dir() -> Path:
    return folders.tuning_dir()


def check_writable(folder: Path | None = None) -> Path:
    """The tuning cache's folder, created if need be; a one-line OSError where it cannot be written."""
    return folders.writable(folder or cache_dir(), "set TILEGEMM_TUNE_DIR to a writable folder")


def cache_key(props, driver: str, nvrtc: str) -> str:
    """The cache file's name: everything that can change which config is fastest."""
    return _slug(f"{props.name}-sm{props.major}{props.minor}-drv{driver}-nvrtc{nvrtc}-tg{__version__}")


def read_model(path: Path) -> dict | None:
    """A fitted model table (model.py), or None where there is none or it cannot be read."""
    try:
        doc = json.loads(path.read_text())
        if doc.get("kind") != "model" or not isinstance(doc.get("constants"), dict):
            raise ValueError("not a model table")
        return doc
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as exc:
        warnings.warn(f"tilegemm: ignoring the unreadable model table {path} ({exc})", RuntimeWarning, stacklevel=2)
        return None


def spills(cfg: dict, layout: str, arch: str) -> bool:
    """Whether ``cfg`` compiled for ``layout`` spills (ptxas' allocation differs per layout, so a
    config tuned on NN is checked before another layout borrows it).  Compiles (disk-cached)."""
    F = registry.FAMILY
    r = F.compile(F.compiled_params(F.params(cfg)), layout, arch=arch).resources
    return bool(r.spill_stores or r.spill_loads)


def borrowed_spills(cfg: dict, built: str | None, layout: str, M: int, N: int, K: int, count: int, arch: str,
                    gpu: str | None = None) -> bool:
    """Whether ``cfg``, an entry measured on a run in ``built`` (entries.ran_as; None: not known), spills where it
    runs this product of ``layout`` on the GPU named ``gpu``: checked in the layout the kernel runs it in
    (access.family_layout: an NT or TT product whose B is transposed first runs as NN or TN, an NN product whose A is
    as TN), unless that is the build that was measured."""
    run_as = access.family_layout(registry.FAMILY.params(cfg), layout, M, N, K, count, gpu)
    return run_as != built and spills(cfg, run_as, arch)


class Selector:
    """Config selection for one device, memoised per (layout, M, N, K, count)."""

    def __init__(self, props, driver: str, nvrtc: str):
        self.props = props
        self.cache_path = cache_dir() / (cache_key(props, driver, nvrtc) + ".json")
        self.table_path = TABLE_DIR / (_slug(props.name) + ".json")
        self.model_path = TABLE_DIR / ("model-" + _slug(props.name) + ".json")
        self._user = None
        self._shipped = None
        self._model = None
        self._memo: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    def tables(self) -> tuple[dict, dict]:
        if self._user is None:
            self._user = entries.read_table(self.cache_path)
            self._shipped = entries.read_table(self.table_path)
            self._model = read_model(self.model_path)
        return self._user, self._shipped

    def source(self, layout, M, N, K, count) -> tuple[dict, str]:
        """(config, where it came from: "tuned", "shipped", "stale", "model" or "heuristic"), not memoised.
        This layout's entries first: those measured on this very shape (the user's, then the shipped
        table's), then the user's bucket entry; then the same three of the other ``entry_layouts`` (TT
        run as TN borrows TN's, then NN's); then, where
        this GPU has no model table, the shipped table's buckets (a bucket's other shapes can fill
        their waves quite differently: 4095^3's config ran 3000^3 at 0.85x cuBLAS).  All of that first
        with the entries whose measured run still happens (entries.current), then with the others ("stale")."""
        user, shipped = self.tables()
        limits = Limits.from_props(self.props)
        passes = []
        for fresh in (True, False):
            for lays in ((lay,) for lay in entries.entry_layouts(layout, M, N, K, count, self.props.name)):
                passes += [("tuned", user, True, lays, fresh), ("shipped", shipped, True, lays, fresh),
                           ("tuned", user, False, lays, fresh)]
            if not self._has_model():
                passes.append(("shipped", shipped, False, None, fresh))
        for name, table, exact, lays, fresh in passes:
            for cfg, _, built in entries.lookups(table, layout, M, N, K, count, exact, lays, fresh, self.props.name):
                if check_config(cfg, limits) or borrowed_spills(cfg, built, layout, M, N, K, count, self.props.arch,
                                                                self.props.name):
                    continue  # the next entry that can serve the shape
                return cfg, name if fresh else "stale"
        for cfg in self.predicted(M, N, K, count, 1, layout):
            return cfg, "model"
        return heuristic(M, N, K, count, self.props.sms, getattr(self.props, "l2_bytes", 0) or (50 << 20)), "heuristic"

    def _has_model(self) -> bool:
        """Whether this GPU has a model table (fitted on a GPU of as many SMs)."""
        self.tables()
        return bool(self._model) and self._model["sms"] == self.props.sms

    def predicted(self, M, N, K, count, n: int, layout: str = "NN") -> list[dict]:
        """The ``n`` configs the cost model predicts fastest for this shape (contiguous operands of
        ``layout``), the fastest first (none where this GPU has no fitted model table)."""
        if not self._has_model():
            return []
        limits = Limits.from_props(self.props)
        ranked = model.ranked_for(self._model, M, N, K, count, self.props.sms, layout, arch=self.props.arch)
        return [dict(cfg) for _, cfg, _ in ranked if not check_config(cfg, limits)][:n]

    def __call__(self, layout, M, N, K, count) -> tuple[dict, str]:
        key = (layout, M, N, K, count)
        found = self._memo.get(key)
        if found is None:
            with self._lock:
                found = self._memo.get(key) or self.source(layout, M, N, K, count)
                self._memo[key] = found
        return found

    def record(self, layout, M, N, K, count, result: dict) -> None:
        """Add a tuning's winner (``result``: {"config", "tflops", "ms"}) for this shape and for its bucket to the
        user's tuning cache (entries.measured), and forget what was selected before."""
        e = entries.measured(layout, M, N, K, count, result, self.props.name)
        entries.merge_entries(self.cache_path, {entries.shape_key(layout, M, N, K, count): e,
                                                entries.entry_key(layout, entries.bucket(M, N, K, count)): e},
                              {"gpu": self.props.name})
        self.forget()

    def forget(self) -> None:
        global _generation
        with self._lock:
            self._memo.clear()
            self._user = self._shipped = None
            _generation += 1


_selectors: dict[int, Selector] = {}
_selectors_lock = threading.Lock()
_generation = 0  # counts up whenever selections are forgotten (the tuning cache changed)


def generation() -> int:
    """Changes whenever what was selected may have changed (``forget``, ``record``, ``reset``)."""
    return _generation


def selector(device: int) -> Selector:
    sel = _selectors.get(device)
    if sel is None:
        with _selectors_lock:
            sel = _selectors.get(device)
            if sel is None:
                sel = _selectors[device] = Selector(gpu.device_properties(device), gpu.driver_version(),
                                                    "%d.%d" % compiler.nvrtc_version())
    return sel


def select(device: int, layout: str, M: int, N: int, K: int, count: int) -> tuple[dict, str]:
    """(config, source) for this shape on ``device``: "tuned", "shipped", "stale", "model" or "heuristic"
    (``Selector.source``)."""
    return selector(device)(layout, M, N, K, count)


def forget() -> None:
    """Forget every device's selections and tables (they are read again on the next call)."""
    for sel in list(_selectors.values()):
        sel.forget()


def reset() -> None:
    """Drop the selectors themselves (a changed TILEGEMM_TUNE_DIR takes effect)."""
    global _generation
    with _selectors_lock:
        _selectors.clear()
        _generation += 1


# --------------------------------------------------------------------------- tensor cores (mma = 1, 3)
#
# The tensor-core configs (warps of 64 x 32 with TF32 mma.sync, gemm.cu MMA = 1 or 3) and the blocks
# of each an SM holds: TF32x3 keeps three 8 x 8 sets of sums per lane (225-255 registers), so a
# block of 128 threads takes half an SM's registers.  Not in the cost model or the tables yet; the
# heuristic below picks among them (docs/perf-notes.md, "Tensor cores").
MMA_WIDE = {"bm": 64, "bn": 128, "bk": 16, "tm": 8, "tn": 8, "ln": 8, "minb": 2, "swizzle": 8, "stages": 3}
MMA_SMALL = {"bm": 64, "bn": 64, "bk": 8, "tm": 8, "tn": 8, "ln": 8, "minb": 4, "swizzle": 8, "stages": 4}
MMA_PER_SM = {3: (2, 4), 1: (3, 6)}  # blocks per SM of MMA_WIDE, MMA_SMALL (registers), by passes


def mma_heuristic(M: int, N: int, K: int, count: int, mma: int, sms: int = 132, wide_ok: bool = True) -> dict:
    """The 64 x 128 tile where it makes four waves or more (TF32x3; one for TF32) and compiles without
    spilling for the layout (``wide_ok``); else the 64 x 64 tile, whose finer grain loses less to a
    partial last wave, split over K (each split >= 512 long, at most 64) while twice the blocks
    still fit on the SMs at once."""
    wide, small = (n * sms for n in MMA_PER_SM[mma])
    if wide_ok and _blocks(MMA_WIDE, M, N, count) >= (4 if mma == 3 else 1) * wide:
        return {**MMA_WIDE, "splits": 1}
    blocks, splits = _blocks(MMA_SMALL, M, N, count), 1
    while blocks * splits * 2 <= small and splits < 64 and K // (splits * 2) >= 512:
        splits *= 2
    return {**MMA_SMALL, "splits": splits}


def select_mma(device: int, precision: str, layout: str, M: int, N: int, K: int, count: int) -> dict:
    """The tensor-core config for this shape (``precision`` "tf32x3" or "tf32"; the caller sets
    "mma" from it)."""
    props = gpu.device_properties(device)
    mma = registry.PRECISIONS[precision]
    wide_ok = not spills({**MMA_WIDE, "mma": mma}, layout, props.arch)
    return mma_heuristic(M, N, K, count, mma, props.sms, wide_ok)


def check_config(cfg: dict, limits: Limits) -> list[str]:
    """What keeps ``cfg`` from running on a GPU of ``limits``: the family's constraints it breaks, or why it is not a
    config of the family (a table's entry written by another version: skipped, not raised)."""
    try:
        return registry.FAMILY.violations(registry.FAMILY.params(cfg), limits)
    except ConfigError as exc:
        return [str(exc)]
