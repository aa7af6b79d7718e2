"""Array interop with no GPU needed: describe an operand from its metadata, classify its layout.

Supported: NumPy arrays (host; copied to the GPU), CuPy arrays, torch CUDA tensors, and any object
with ``__cuda_array_interface__`` or ``__dlpack__``.  Everything here reads metadata only, so all
validation runs (and is tested) without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HOST = None  # device of a host (NumPy) array
UNKNOWN = -1  # a GPU array whose device is looked up from its pointer at run time


@dataclass(frozen=True)
class Operand:
    name: str  # argument name, for errors: "a", "b", "out"
    kind: str  # "numpy" | "cupy" | "torch" | "cai" | "dlpack"
    obj: object
    shape: tuple
    strides: tuple  # in elements (None entries never occur: C-contiguous is filled in)
    dtype: np.dtype
    device: int | None  # None: host; -1: on a GPU, unknown which until asked
    ptr: int
    readonly: bool = False  # the array says it must not be written (NumPy's flags, the CUDA array interface's data[1])

    @property
    def on_host(self) -> bool:
        return self.device is HOST

    def where(self) -> str:
        if self.on_host:
            return "on the host"
        if self.device == UNKNOWN:
            return "on a GPU"
        return f"on GPU {self.device}"

    def span(self) -> tuple[int, int]:
        """[first byte, last byte + 1) this operand's elements occupy."""
        if any(s == 0 for s in self.shape):
            return (self.ptr, self.ptr)
        lo = hi = 0
        for n, s in zip(self.shape, self.strides):
            off = (n - 1) * s
            lo += min(0, off)
            hi += max(0, off)
        size = self.dtype.itemsize
        return (self.ptr + lo * size, self.ptr + (hi + 1) * size)

    @property
    def footprint(self) -> tuple:
        """(shape, strides in elements, item size): where its elements lie relative to ``ptr``."""
        return (self.shape, self.strides, self.dtype.itemsize)

    def overlaps(self, other: "Operand") -> bool:
        """Whether the two share a byte of memory (arrays on the host and on a GPU never do)."""
        if self.on_host != other.on_host:
            return False
        (a0, a1), (b0, b1) = self.span(), other.span()
        return a0 < b1 and b0 < a1 and shares_bytes(self.ptr, self.footprint, other.ptr, other.footprint)


SHARE_WORK = 10**5  # NumPy's overlap solver gives up beyond this (then the arrays count as sharing)
_TooHard = getattr(np, "exceptions", np).TooHardError


class _Addresses:
    """A NumPy view of where an array's bytes lie (nothing is read: only the addresses are compared)."""

    def __init__(self, ptr: int, footprint: tuple):
        shape, strides, size = footprint
        self.__array_interface__ = {"data": (ptr, True), "shape": tuple(shape), "typestr": f"|V{size}",
                                    "strides": tuple(s * size for s in strides), "version": 3}


def shares_bytes(px: int, fx: tuple, py: int, fy: tuple) -> bool:
    """Whether arrays at byte addresses ``px`` and ``py`` with footprints ``fx`` and ``fy`` ((shape,
    element strides, item size)) share a byte, for arrays whose byte spans intersect (the cheap test
    comes first, at the caller): NumPy's exact solver on the addresses, so interleaved views (a
    matrix's columns 0-4 and 5-8) do not count.  Where it would take more than ``SHARE_WORK`` steps,
    or an address is unknown (0), they count as sharing."""
    if not px or not py:
        return True
    try:
        return bool(np.shares_memory(np.asarray(_Addresses(px, fx)), np.asarray(_Addresses(py, fy)),
                                     max_work=SHARE_WORK))
    except _TooHard:
        return True


def _kind(x) -> str | None:
    mod = type(x).__module__.split(".")[0]
    if isinstance(x, np.ndarray):
        return "numpy"
    if mod == "cupy":
        return "cupy"
    if mod == "torch":
        return "torch"
    if hasattr(x, "__cuda_array_interface__"):
        return "cai"
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    return None


def _elem_strides(byte_strides, itemsize, name) -> tuple:
    out = []
    for s in byte_strides:
        if s % itemsize:
            raise ValueError(
                f"{name} has byte strides {tuple(byte_strides)} that are not multiples of its "
                f"item size ({itemsize}); pass a contiguous copy"
            )
        out.append(s // itemsize)
    return tuple(out)


def _c_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def describe(x, name: str) -> Operand:
    """Metadata of ``x`` (no copy, no GPU call)."""
    kind = _kind(x)
    if kind is None:
        raise TypeError(
            f"{name} must be an array (NumPy, CuPy, a torch CUDA tensor, or an object with "
            f"__cuda_array_interface__ or __dlpack__), got {type(x).__name__}; "
            f"wrap it with numpy.asarray({name}, dtype=numpy.float32)"
        )
    if kind == "numpy":
        return Operand(name, kind, x, tuple(x.shape), _elem_strides(x.strides, x.itemsize, name),
                       x.dtype, HOST, int(x.__array_interface__["data"][0]), not x.flags.writeable)
    if kind == "cupy":
        return Operand(name, kind, x, tuple(x.shape), _elem_strides(x.strides, x.itemsize, name),
                       x.dtype, int(x.device.id), int(x.data.ptr))
    if kind == "torch":
        dtype_name = str(x.dtype).replace("torch.", "")
        try:
            dtype = np.dtype(dtype_name)
        except TypeError:
            dtype = _TorchDtype(dtype_name)
        if not x.is_cuda:
            raise ValueError(
                f"{name} is a torch tensor on the {x.device.type.upper()}; tilegemm computes on the "
                f"GPU and does not copy torch tensors silently: pass {name}.cuda()"
            )
        return Operand(name, kind, x, tuple(x.shape), tuple(x.stride()), dtype,
                       int(x.device.index), int(x.data_ptr()))
    if kind == "cai":
        return _from_cai(x, name)
    # DLPack: read what the protocol itself says (device) and convert later, on the GPU
    dev_type, dev_id = x.__dlpack_device__()
    if int(dev_type) not in (2, 13):  # kDLCUDA / kDLCUDAManaged
        raise ValueError(
            f"{name} is a DLPack array on device type {int(dev_type)}, not a CUDA GPU; "
            f"pass it as a NumPy array (numpy.from_dlpack({name})) or move it to the GPU"
        )
    shape = tuple(int(n) for n in getattr(x, "shape", ()))
    return Operand(name, kind, x, shape, _c_strides(shape), _dtype_named(getattr(x, "dtype", "float32")),
                   int(dev_id), 0)


def _from_cai(x, name: str) -> Operand:
    """An object's ``__cuda_array_interface__`` (version 3: shape, typestr, data; strides, mask)."""
    cai = x.__cuda_array_interface__
    fix = f"pass a CuPy array (cupy.asarray({name})) or fix the object's interface"
    if not isinstance(cai, dict):
        raise ValueError(f"{name}'s __cuda_array_interface__ is a {type(cai).__name__}, not a dict; {fix}")
    missing = sorted({"shape", "typestr", "data"} - cai.keys())
    if missing:
        raise ValueError(f"{name}'s __cuda_array_interface__ lacks {missing} (it must give shape, typestr and "
                         f"data); {fix}")
    try:
        dtype = np.dtype(cai["typestr"])
        shape = tuple(int(n) for n in cai["shape"])
        ptr, readonly = cai["data"]
        ptr = int(ptr)
        strides = cai.get("strides")
        strides = None if strides is None else tuple(int(s) for s in strides)
    except (TypeError, ValueError):
        raise ValueError(f"{name}'s __cuda_array_interface__ is malformed (typestr {cai['typestr']!r}, shape "
                         f"{cai['shape']!r}, strides {cai.get('strides')!r}, data {cai['data']!r}; e.g. '<f4', "
                         f"(3, 4), None, (pointer, False)); {fix}") from None
    strides = _c_strides(shape) if strides is None else _elem_strides(strides, dtype.itemsize, name)
    if cai.get("mask") is not None:
        raise ValueError(f"{name} is a masked array; tilegemm does not read masks")
    return Operand(name, "cai", x, shape, strides, dtype, UNKNOWN, ptr, bool(readonly))


def _dtype_named(dtype):
    """A NumPy dtype for a DLPack object's ``dtype`` attribute, else a stand-in with a readable name
    (``torch.bfloat16`` -> ``bfloat16``) that no dtype check accepts."""
    try:
        return np.dtype(dtype)
    except TypeError:
        text = str(getattr(dtype, "__name__", dtype))
        return _TorchDtype(text.rsplit(".", 1)[-1].strip("<>'\" "))


class _TorchDtype:
    """Stand-in for dtypes NumPy has no name for (bfloat16...), used only in messages."""

    def __init__(self, name):
        self.name = name
        self.itemsize = 2

    def __eq__(self, other):
        return False

    def __str__(self):
        return self.name


def classify(shape: tuple, strides: tuple) -> tuple[str, int] | None:
    """Layout of a 2-D view: ("N", ld) row-major, ("T", ld) column-major, or None (needs a copy).

    ``N``: element (i, j) at i*ld + j with ld >= cols;  ``T``: at j*ld + i with ld >= rows.
    A size-1 dimension's stride is irrelevant, so such views are normalised.
    """
    r, c = shape
    s0, s1 = strides
    if r == 0 or c == 0:
        return ("N", max(c, 1))
    if c == 1 or s1 == 1:
        ld = s0 if r > 1 else c
        if ld >= c and ld >= 1:
            return ("N", ld)
    if r == 1 or s0 == 1:
        ld = s1 if c > 1 else r
        if ld >= r and ld >= 1:
            return ("T", ld)
    return None
