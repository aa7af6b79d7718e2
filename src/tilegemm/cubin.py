"""What ptxas reports about a compiled kernel: registers, shared memory, stack frame and spills, read
from NVRTC's log (``-v``) or, where the log has no report, from the cubin's ELF attributes."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from .errors import CompileError


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
