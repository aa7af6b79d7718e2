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
                       x.dtype, HOST, int(x.__array_interface__["data"][0]))
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
        cai = x.__cuda_array_interface__
        dtype = np.dtype(cai["typestr"])
        shape = tuple(int(n) for n in cai["shape"])
        strides = cai.get("strides")
        strides = _c_strides(shape) if strides is None else _elem_strides(strides, dtype.itemsize, name)
        if cai.get("mask") is not None:
            raise ValueError(f"{name} is a masked array; tilegemm does not read masks")
        return Operand(name, kind, x, shape, strides, dtype, UNKNOWN, int(cai["data"][0]))
    # DLPack: read what the protocol itself says (device) and convert later, on the GPU
    dev_type, dev_id = x.__dlpack_device__()
    if int(dev_type) not in (2, 13):  # kDLCUDA / kDLCUDAManaged
        raise ValueError(
            f"{name} is a DLPack array on device type {int(dev_type)}, not a CUDA GPU; "
            f"pass it as a NumPy array (numpy.from_dlpack({name})) or move it to the GPU"
        )
    shape = tuple(int(n) for n in getattr(x, "shape", ()))
    dtype = np.dtype(str(getattr(x, "dtype", "float32")))
    return Operand(name, kind, x, shape, _c_strides(shape), dtype, int(dev_id), 0)


class _TorchDtype:
    """Stand-in for torch dtypes NumPy has no name for (bfloat16...), used only in messages."""

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
