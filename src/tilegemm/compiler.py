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
from dataclasses import dataclass, field
from pathlib import Path

from ._version import __version__
from .errors import CompileError

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
DEFAULT_ARCH = "sm_90"
_MAGIC = b"TGCUBIN1"

_memo: dict[str, "CompiledKernel"] = {}
_memo_lock = threading.Lock()


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel entry."""

    registers: int
    shared_bytes: int  # static shared memory; dynamic shared memory is decided at launch
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    barriers: int

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


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


def normalize_arch(arch: str | int | None) -> str:
    """Accept ``90``, ``"90"``, ``"sm_90"``, ``"sm_90a"``, ``(9, 0)``; None -> current GPU's or sm_90."""
    if arch is None:
        return current_arch() or DEFAULT_ARCH
    if isinstance(arch, tuple):
        arch = f"{arch[0]}{arch[1]}"
    text = str(arch).strip().lower()
    if text.startswith("compute_"):
        text = text[len("compute_") :]
    if text.startswith("sm_"):
        text = text[3:]
    if not re.fullmatch(r"\d{2,3}[af]?", text):
        raise ValueError(f"arch={arch!r} is not a GPU architecture; pass e.g. 'sm_90' or 90")
    return f"sm_{text}"


def current_arch() -> str | None:
    """The arch of the current CUDA device, or None when there is no usable GPU."""
    try:
        from . import runtime

        props = runtime.device_properties()
    except Exception:
        return None
    return f"sm_{props.major}{props.minor}"


def cache_dir() -> Path:
    env = os.environ.get("TILEGEMM_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilegemm"


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


# --------------------------------------------------------------------------- resource report

_RE_FUNC = re.compile(r"Function properties for (\S+)")
_RE_STACK = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_RE_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, \d+ bytes cumulative stack size)?(?:, (\d+) bytes smem)?")


def parse_resources(log: str, entry: str) -> Resources:
    """Parse ptxas' ``-v`` report for ``entry`` out of an NVRTC log."""
    lines = log.splitlines()
    start = None
    for i, line in enumerate(lines):
        m = _RE_FUNC.search(line)
        if m and m.group(1) == entry:
            start = i
            break
    if start is None:
        raise CompileError(f"no ptxas resource report for entry {entry!r} in the NVRTC log", log)
    stack = _RE_STACK.search("\n".join(lines[start : start + 3]))
    used = None
    for line in lines[start : start + 4]:
        used = _RE_USED.search(line) or used
        if used:
            break
    if not stack or not used:
        raise CompileError(f"could not read the ptxas report for {entry!r}", log)
    return Resources(
        registers=int(used.group(1)),
        barriers=int(used.group(2) or 0),
        shared_bytes=int(used.group(3) or 0),
        stack_bytes=int(stack.group(1)),
        spill_stores=int(stack.group(2)),
        spill_loads=int(stack.group(3)),
    )


def _elf_sections(blob: bytes) -> dict[str, tuple[int, int]]:
    """name -> (offset, size) of each section of a 64-bit little-endian ELF (a cubin)."""
    (shoff,) = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx][4]
    out = {}
    for name, _typ, _flags, _addr, offset, size in heads:
        end = blob.index(b"\0", strtab + name)
        out[blob[strtab + name : end].decode()] = (offset, size)
    return out


def elf_resources(cubin: bytes, entry: str, arch: str) -> Resources:
    """Registers, frame and static shared memory read from the cubin itself.

    Used when NVRTC's log carries no ptxas report (NVRTC 13.0 was seen to omit it when a program
    is compiled again in one process).  Spill sizes are not recorded in the ELF: they are given as
    0 here, and the SASS check for LDL/STL catches spills regardless.
    """
    secs = _elf_sections(cubin)
    regs = frame = 0
    off, size = secs.get(".nv.info", (0, 0))
    info = cubin[off : off + size]
    i = 0
    while i + 4 <= len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt == 0x04:  # EIFMT_SVAL: u16 size, then data
            (n,) = struct.unpack_from("<H", info, i + 2)
            if attr in (0x2F, 0x11) and n == 8:  # EIATTR_REGCOUNT, EIATTR_FRAME_SIZE: (symbol, value)
                _sym, val = struct.unpack_from("<II", info, i + 4)
                if attr == 0x2F:
                    regs = max(regs, val)
                else:
                    frame = max(frame, val)
            i += 4 + n
        else:  # EIFMT_NVAL/BVAL/HVAL: 2 more bytes
            i += 4
    shared = secs.get(f".nv.shared.{entry}", (0, 0))[1]
    if shared and int(re.sub(r"\D", "", arch)) >= 90:
        shared = max(0, shared - 1024)  # sm_90 cubins count 1 KB of reserved shared memory in
    return Resources(regs, shared, frame, 0, 0, 0)


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
    except OSError:
        pass  # an unwritable cache only costs a recompile next time


# --------------------------------------------------------------------------- compile


def _dump_failed_source(name: str, key: str, source: str, options: list[str]) -> str:
    target = cache_dir() / "failed"
    try:
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"{Path(name).stem}-{key[:12]}.cu"
    except OSError:
        path = Path(tempfile.gettempdir()) / f"tilegemm-{Path(name).stem}-{key[:12]}.cu"
    path.write_text("// NVRTC options: " + " ".join(options) + "\n" + source)
    return str(path)


def _run_nvrtc(name: str, source: str, options: list[str], key: str) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * n
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\x00 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            path = _dump_failed_source(name, key, source, options)
            raise CompileError(f"NVRTC failed to compile {name} ({err.name})", log, path)
        err, n = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        cubin = b" " * n
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
        return cubin, log
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
) -> CompiledKernel:
    """Compile CUDA ``source`` (named ``name``) into a cubin for ``arch``."""
    arch = normalize_arch(arch)
    options = [
        f"--gpu-architecture={arch}",
        "--std=c++17",
        f"--include-path={KERNEL_DIR}",
        "--ptxas-options=-v",
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
) -> CompiledKernel:
    """Compile ``kernels/<filename>`` (or a path) with ``defines`` for ``arch``."""
    path = Path(filename)
    if not path.is_absolute() and not path.exists():
        path = KERNEL_DIR / filename
    return compile_source(
        path.name, path.read_text(), entry=entry, defines=defines, arch=arch, use_cache=use_cache
    )


def clear_memory_cache() -> None:
    """Forget in-process results (the disk cache stays); used by tests."""
    with _memo_lock:
        _memo.clear()
