"""Tuned entries: what the user's tuning cache and the shipped tables hold, and which of them can serve a shape.

An entry is a config measured on one product: {"config", "tflops", "ms", "shape": [M, N, K, count], "ran_as", "ptxas"}.
The tuning cache keys it twice, by that shape (``shape_key``) and by the shape's bucket (``entry_key``); a shipped table
by the bucket.  "ran_as" is the layout in which the family ran the measured product: an NT or TT product whose B it
transposes first runs as NN or TN, an NN product whose A it transposes first (on the H200) as TN (access.family_layout,
given the GPU's name).  The rule that decides that moves when measurements move it, and an entry measured under another
rule measured a run that no longer happens: ``current`` tells such entries apart, and the selection takes them only
after every current one (selection.py).  An entry written before entries kept "ran_as" ran an NN or TN product in its
own layout; how it ran an NT or TT product is not known, so such an entry is not current.
"ptxas" is what the build that ran it passed on to ptxas (registry.FAMILY.ptxas: builds.ptxas_options); it moves the
build's schedule, so an entry measured with other options measured another build and is not current either.  An entry
without "ptxas" is taken as measured with none, as the family built every kernel before builds.ptxas_options; the few
16 x 8 tiles tuned in TN or TT after that rule and before entries kept "ptxas" are thus stale too, and tuned again where
they serve alone.  An entry without a shape is compared with the options of its build reading 16 bytes at a time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import warnings
from pathlib import Path

from . import access, registry
from .errors import ConfigError

SCHEMA = 1


def bucket(M: int, N: int, K: int, count: int) -> tuple:
    """Shape bucket: each size rounded to the nearest power of two (in log scale), and whether
    the usual tiles leave edges (M or N not a multiple of 128, K not a multiple of 8): 4095^3 and
    4096^3 have different winners (docs/perf-notes.md)."""
    edges = int(M % 128 != 0 or N % 128 != 0 or K % 8 != 0)
    return tuple(int(round(math.log2(max(x, 1)))) for x in (M, N, K, count)) + (edges,)


def entry_key(layout: str, b: tuple) -> str:
    return f"{layout}:{'x'.join(map(str, b))}"


def shape_key(layout: str, M: int, N: int, K: int, count: int) -> str:
    """The tuning cache's key of one exact shape (beside its bucket's ``entry_key``)."""
    return f"{layout}:={M}x{N}x{K}x{count}"


def measured(layout: str, M: int, N: int, K: int, count: int, result: dict, gpu: str | None = None) -> dict:
    """The entry of a tuning's winner (``result``: its "config", "tflops" and "ms") on this product of ``layout``,
    tuned on the GPU named ``gpu``: with the shape and the layout the family ran it in."""
    p = registry.FAMILY.params(result["config"])
    run = access.family_layout(p, layout, M, N, K, count, gpu)
    return {**{k: result[k] for k in ("config", "tflops", "ms")}, "shape": [M, N, K, count], "ran_as": run,
            "ptxas": ptxas(p, run, M, N, K, count)}


def ptxas(params: dict, run: str, M: int, N: int, K: int, count: int) -> list[str]:
    """What the build of ``params`` that runs this product in ``run`` (its operands contiguous, as a tuning times
    them) passes on to ptxas."""
    a, b = access.row_widths(run, M, N, K, count)
    return list(registry.FAMILY.ptxas(params, run, (a, b, access.out_width(N))))


def ran_as(entry: dict, layout: str) -> str | None:
    """The layout in which the entry's product of ``layout`` was run: as it recorded, else (an entry written before
    entries recorded it) ``layout`` itself where that is never transposed, else None (not known)."""
    return entry.get("ran_as") or (None if layout in access.TRANSPOSED_RUNS else layout)


def current(entry: dict, layout: str, gpu: str | None = None) -> bool:
    """Whether the entry's measured product, an entry of ``layout`` in a table of the GPU named ``gpu``, would run today
    as it ran when measured (the config in the layout access.family_layout gives, built with the same ptxas options):
    where not, or not known, it measured another run.  An entry without a shape is current where its run is known and
    its build, reading 16 bytes at a time, takes the options it recorded; one whose config is not the family's is not."""
    shape, run = entry.get("shape"), ran_as(entry, layout)
    if run is None:
        return False
    try:
        p = registry.FAMILY.params(entry["config"])
        built = ptxas(p, run, *shape) if shape else list(registry.FAMILY.ptxas(p, run, 4))
        return (not shape or run == access.family_layout(p, layout, *shape, gpu)) and entry.get("ptxas", []) == built
    except ConfigError:
        return False


def read_table(path: Path) -> dict:
    """Entries of a table or cache file; a corrupt file is reported and treated as empty."""
    try:
        doc = json.loads(path.read_text())
        if doc.get("schema") != SCHEMA or not isinstance(doc.get("entries"), dict):
            raise ValueError("unknown schema")
        return doc["entries"]
    except FileNotFoundError:
        return {}
    except (ValueError, OSError, AttributeError) as exc:
        warnings.warn(f"tilegemm: ignoring the unreadable tuning file {path} ({exc}); it will be "
                      f"rebuilt", RuntimeWarning, stacklevel=2)
        return {}


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a+") as fh:
        try:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - not POSIX
            pass
        yield


def merge_entries(path: Path, entries: dict, meta: dict | None = None) -> None:
    """Add ``entries`` to the table at ``path``: read, merge and atomically replace under a file
    lock, so concurrent tuners lose nothing; a corrupt file is replaced."""
    with _locked(path):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old = read_table(path)
        old.update(entries)
        doc = {"schema": SCHEMA, **(meta or {}), "entries": dict(sorted(old.items()))}
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)


def entry_layouts(layout: str, M: int, N: int, K: int, count: int, gpu: str | None = None) -> tuple[str, ...]:
    """The layouts whose tuned entries serve a product of ``layout`` on the GPU named ``gpu``, in order: its own, the
    layout its kernel runs it in where an operand is transposed first (access.kernel_layout: TT, and NN on the H200, as
    TN; NT's is NN), NN's."""
    return tuple(dict.fromkeys((layout, access.kernel_layout(layout, M, N, K, count, gpu), "NN")))


def lookups(entries: dict, layout: str, M: int, N: int, K: int, count: int, exact: bool = False,
            layouts: tuple | None = None, is_current: bool | None = None, gpu: str | None = None):
    """(config, the layout it was tuned for, the layout that ran it or None: ``ran_as``) of every entry that can serve
    this shape, in order: for each layout of ``layouts`` (default: ``entry_layouts``), its entry for the exact shape,
    then for its bucket; with ``exact``, only entries measured on this very shape (their "shape"); with
    ``is_current``, only the entries that are (True) or are not (False) ``current`` (on the GPU named ``gpu``)."""
    b = bucket(M, N, K, count)
    for lay in layouts or entry_layouts(layout, M, N, K, count, gpu):
        for key in (shape_key(lay, M, N, K, count), entry_key(lay, b)):
            e = entries.get(key)
            if (e and (not exact or list(e.get("shape", ())) == [M, N, K, count])
                    and (is_current is None or current(e, lay, gpu) == is_current)):
                yield dict(e["config"]), lay, ran_as(e, lay)


def lookup(entries: dict, layout: str, M: int, N: int, K: int, count: int) -> dict | None:
    """The config of the first entry of ``lookups``, current or not (a config runs every layout; NN is the one always
    tuned)."""
    return next((found[0] for found in lookups(entries, layout, M, N, K, count)), None)
