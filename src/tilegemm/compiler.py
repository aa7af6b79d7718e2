"""GPU-free kernel compilation: a ``.cu`` file + defines -> cubin for an explicit ``sm_XX``, via NVRTC.

Works on a machine with no GPU (CI compiles every kernel).  Cubins are cached on disk, keyed by the
source (and the shared headers it may include), the options, the arch, the NVRTC version and the
package version.  Entries are written atomically (temp file + rename) and carry a checksum, so a
truncated or corrupt entry is detected and rebuilt, never loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import struct
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import gpu
from .folders import cache_dir
from ._version import __version__
from .cubin import Resources, elf_resources, parse_resources
from .errors import CompileError

# the kernel sources; TILEGEMM_KERNEL_DIR points a process at a copy (scripts/variants.py times
# variant sources that way, one process per variant)
KERNEL_DIR = Path(os.environ.get("TILEGEMM_KERNEL_DIR") or Path(__file__).resolve().parent / "kernels")
DEFAULT_ARCH = "sm_90"
_MAGIC = b"TGCUBIN1"

_memo: dict[str, "CompiledKernel"] = {}
_memo_lock = threading.Lock()


@dataclass(frozen=True)
class CompiledKernel:
    name: str  # file name, e.g. "02_smem_tiled.cu"
    entry: str  # extern "C" symbol
    arch: str  # "sm_90"
    options: tuple[str, ...]
    cubin: bytes = field(repr=False)
    resources: Resources
    log: str = field(repr=False)
    key: str = field(repr=False)
    cache_hit: bool = False


# --------------------------------------------------------------------------- helpers


MIN_ARCH = 80  # cp.async (rung 8 and the family's pipelines) needs sm_80
_ARCH_RE = re.compile(r"(\d{2,3})([af]?)")


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    """Compute capabilities (as 80, 90, ...) that this NVRTC compiles for and tilegemm supports."""
    try:
        err, archs = _nvrtc().nvrtcGetSupportedArchs()
        found = tuple(int(a) for a in archs if int(a) >= MIN_ARCH)
        if found:
            return found
    except Exception:  # an NVRTC too old to say: the compile itself reports
        pass
    return (80, 86, 87, 89, 90)


def supported_text() -> str:
    return ", ".join(f"sm_{a}" for a in supported_archs()) + " (and sm_90a and newer 'a' variants)"


def normalize_arch(arch: str | int | None) -> str:
    """Accept ``90``, ``"90"``, ``"sm_90"``, ``"sm_90a"``, ``(9, 0)``; None -> the current GPU's arch,
    else sm_90.  Architectures this NVRTC cannot target, or older than sm_80, are refused with the
    list of supported ones."""
    if arch is None:
        return gpu.current_arch() or DEFAULT_ARCH
    if isinstance(arch, tuple) and len(arch) == 2:
        arch = f"{arch[0]}{arch[1]}"
    text = str(arch).strip().lower()
    for prefix in ("compute_", "sm_"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    m = _ARCH_RE.fullmatch(text)
    if not m:
        raise ValueError(f"arch={arch!r} is not a GPU architecture; pass one of {supported_text()}")
    number, suffix = int(m.group(1)), m.group(2)
    if number not in supported_archs() or (suffix and number < 90):
        raise ValueError(f"arch={arch!r} is not supported: tilegemm compiles for {supported_text()}")
    return f"sm_{number}{suffix}"


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CompileError(
            "cuda-bindings is not installed; install it with `pip install cuda-bindings nvidia-cuda-nvrtc`"
        ) from exc
    return nvrtc


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # library missing
        raise CompileError(
            f"NVRTC could not be loaded ({exc}); install it with `pip install nvidia-cuda-nvrtc`"
        ) from exc
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


def _check(err, what: str) -> None:
    nvrtc = _nvrtc()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{what} failed: {err!r}")


@functools.lru_cache(maxsize=None)
def _headers() -> tuple[tuple[str, str], ...]:
    """The shared headers a kernel may include (read once per process; part of every cache key)."""
    return tuple(sorted((p.name, p.read_text()) for p in KERNEL_DIR.glob("*.cuh")))


def _define_options(defines: dict | None) -> list[str]:
    opts = []
    for k, v in sorted((defines or {}).items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)):
            raise ValueError(f"define name {k!r} is not a C identifier")
        if isinstance(v, bool):
            v = int(v)
        opts.append(f"-D{k}={v}")
    return opts


def cache_key(source: str, options: list[str], arch: str) -> str:
    h = hashlib.sha256()
    for part in (
        "tilegemm",
        __version__,
        "nvrtc %d.%d" % nvrtc_version(),
        arch,
        "\0".join(options),
        source,
        *("%s\0%s" % hdr for hdr in _headers()),
    ):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()


# --------------------------------------------------------------------------- on-disk cache


def _entry_path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.cubin"


def _pack(meta: dict, cubin: bytes) -> bytes:
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    digest = hashlib.sha256(meta_bytes + cubin).digest()
    return _MAGIC + struct.pack("<QQ", len(meta_bytes), len(cubin)) + digest + meta_bytes + cubin


def _unpack(blob: bytes) -> tuple[dict, bytes] | None:
    head = len(_MAGIC) + 16 + 32
    if len(blob) < head or not blob.startswith(_MAGIC):
        return None
    n_meta, n_cubin = struct.unpack_from("<QQ", blob, len(_MAGIC))
    digest = blob[len(_MAGIC) + 16 : head]
    if len(blob) != head + n_meta + n_cubin:
        return None
    meta_bytes, cubin = blob[head : head + n_meta], blob[head + n_meta :]
    if hashlib.sha256(meta_bytes + cubin).digest() != digest:
        return None
    try:
        return json.loads(meta_bytes), cubin
    except ValueError:
        return None


def _read_cache(key: str) -> tuple[dict, bytes] | None:
    path = _entry_path(key)
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    return _unpack(blob)  # None for a truncated or corrupt entry: the caller rebuilds it


def _write_cache(key: str, meta: dict, cubin: bytes) -> None:
    path = _entry_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_pack(meta, cubin))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # atomic: readers see the old entry or the whole new one
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:  # an unwritable cache costs a recompile in every new process: say so once
        _warn_unwritable(path.parent, exc)


_warned: set = set()


def _warn_unwritable(folder: Path, exc: OSError) -> None:
    if str(folder) not in _warned:
        _warned.add(str(folder))
        warnings.warn(f"tilegemm: cannot write the kernel cache in {folder} ({exc.strerror or exc}); kernels "
                      f"will be compiled again in every process. Set TILEGEMM_CACHE_DIR to a writable "
                      f"folder", RuntimeWarning, stacklevel=4)


# --------------------------------------------------------------------------- compile


def _dump_failed_source(name: str, key: str, source: str, options: list[str]) -> str | None:
    """Write the source NVRTC rejected where its user can read it: the cache's ``failed/`` folder,
    else a new file of the user's own in the temporary directory; None if neither can be written."""
    text = "// NVRTC options: " + " ".join(options) + "\n" + source
    stem = f"{Path(name).stem}-{key[:12]}"
    try:
        target = cache_dir() / "failed"
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"{stem}.cu"
        path.write_text(text)
        return str(path)
    except OSError:
        pass
    try:
        fd, path = tempfile.mkstemp(prefix=f"tilegemm-{stem}-", suffix=".cu")  # private to this user
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path
    except OSError:
        return None


def _run_nvrtc(name: str, source: str, options: list[str], key: str) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        # output buffers are bytearrays: NVRTC writes into them, and an immutable bytes object of one
        # byte (an empty log is one NUL) is the interpreter's shared b" ", which it would overwrite
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = bytearray(n)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = bytes(buf).rstrip(b"\x00 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            path = _dump_failed_source(name, key, source, options)
            raise CompileError(f"NVRTC failed to compile {name} ({err.name})", log, path)
        err, n = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        cubin = bytearray(n)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
        return bytes(cubin), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_source(
    name: str,
    source: str,
    *,
    entry: str,
    defines: dict | None = None,
    arch: str | int | None = None,
    use_cache: bool = True,
    ptxas: tuple[str, ...] = (),
) -> CompiledKernel:
    """Compile CUDA ``source`` (named ``name``) into a cubin for ``arch``; ``ptxas``: options passed on to ptxas."""
    arch = normalize_arch(arch)
    options = [
        f"--gpu-architecture={arch}",
        "--std=c++17",
        f"--include-path={KERNEL_DIR}",
        "--ptxas-options=-v",
        *(f"--ptxas-options={o}" for o in ptxas),
        *_define_options(defines),
    ]
    key_opts = [o for o in options if not o.startswith("--include-path")]  # headers are hashed instead
    key = cache_key(source, key_opts + [entry], arch)
    with _memo_lock:
        hit = _memo.get(key)
    if hit is not None:
        return hit
    cached = _read_cache(key) if use_cache else None
    if cached is not None:
        meta, cubin = cached
        kernel = CompiledKernel(
            name, entry, arch, tuple(options), cubin, Resources(**meta["resources"]),
            meta["log"], key, cache_hit=True,
        )
    else:
        cubin, log = _run_nvrtc(name, source, options, key)
        try:
            resources = parse_resources(log, entry)
        except CompileError:
            resources = elf_resources(cubin, entry, arch)
        if use_cache:
            _write_cache(key, {"resources": resources.__dict__, "log": log, "entry": entry}, cubin)
        kernel = CompiledKernel(name, entry, arch, tuple(options), cubin, resources, log, key)
    with _memo_lock:
        _memo[key] = kernel
    return kernel


def compile_file(
    filename: str,
    *,
    entry: str,
    defines: dict | None = None,
    arch: str | int | None = None,
    use_cache: bool = True,
    ptxas: tuple[str, ...] = (),
) -> CompiledKernel:
    """Compile ``kernels/<filename>`` (or an absolute path) with ``defines`` (and ``ptxas`` options) for ``arch``.
    A relative name is always the package's kernel, never a file of that name in the working directory."""
    path = Path(filename)
    if not path.is_absolute():
        path = KERNEL_DIR / filename
    return compile_source(
        path.name, path.read_text(), entry=entry, defines=defines, arch=arch, use_cache=use_cache, ptxas=ptxas
    )


def clear_memory_cache() -> None:
    """Forget in-process results (the disk cache stays); used by tests."""
    with _memo_lock:
        _memo.clear()
