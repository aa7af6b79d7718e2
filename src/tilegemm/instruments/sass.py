"""SASS through nvdisasm: disassemble a cubin and count its instructions (GPU-free)."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def nvdisasm_path() -> str:
    """nvdisasm from the nvidia-cuda-nvdisasm wheel, else PATH, else $CUDA_HOME/bin."""
    candidates = []
    try:
        import nvidia

        for root in nvidia.__path__:
            candidates += sorted(Path(root).glob("cu*/bin/nvdisasm"))
            candidates += sorted(Path(root).glob("cuda_nvdisasm/bin/nvdisasm"))
    except ImportError:
        pass
    found = shutil.which("nvdisasm")
    if found:
        candidates.append(Path(found))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "bin" / "nvdisasm")
    candidates.append(Path("/usr/local/cuda/bin/nvdisasm"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise FileNotFoundError(
        "nvdisasm not found; install it with `pip install nvidia-cuda-nvdisasm` (or the CUDA toolkit)"
    )


def disassemble(cubin: bytes) -> str:
    """nvdisasm's listing of ``cubin`` (plain text, one instruction a line)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        res = subprocess.run([nvdisasm_path(), "-c", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if res.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {res.stderr.strip()}")
    return res.stdout


def instructions(listing: str) -> list[str]:
    """Full opcodes (with modifiers, e.g. ``LDS.128``) in program order, leaving out those guarded
    by ``@!PT``: they never execute (ptxas places e.g. ``@!PT LDS RZ, [RZ]`` beside LDGSTS; they
    still take an issue slot, which ``mix`` counts as "other")."""
    return [ins.op for ins in parse(listing)[0] if ins.pred != "@!PT"]


def opcode_counts(listing: str) -> collections.Counter:
    return collections.Counter(instructions(listing))


def uses_local_memory(listing: str) -> bool:
    """True when the code touches local memory (LDL/STL: spills or run-time indexed arrays)."""
    return any(op.split(".")[0] in ("LDL", "STL") for op in instructions(listing))


# --------------------------------------------------------------------------- the main-loop inspector
#
# The listing is parsed into instructions (address, opcode, operands); loops are found from
# backward branches (a BRA to a label at or before it); the main loop is the loop holding the most
# FFMAs.  Counts are static: one pass over the loop body as the compiler laid it out, interior and
# edge paths included.

_LINE = re.compile(
    r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\s*([^;]*);"
)
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_REG = re.compile(r"^[-!|]*R(\d+|Z)(\.reuse)?\|?$")


@dataclass(frozen=True)
class Instr:
    addr: int
    pred: str
    op: str  # full opcode with modifiers, e.g. "LDS.128"
    operands: tuple[str, ...]

    @property
    def base(self) -> str:
        return self.op.split(".")[0]


def parse(listing: str) -> tuple[list[Instr], dict[str, int]]:
    """Instructions in program order, and each label's address (that of the next instruction)."""
    out, labels, pending = [], {}, []
    for line in listing.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _LINE.search(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for name in pending:
            labels[name] = addr
        pending = []
        ops = tuple(o.strip() for o in m.group(4).split(",") if o.strip())
        out.append(Instr(addr, (m.group(2) or "").strip(), m.group(3), ops))
    return out, labels


def loops(instrs: list[Instr], labels: dict[str, int]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of each loop closed by a backward branch."""
    index = {ins.addr: i for i, ins in enumerate(instrs)}
    found = []
    for i, ins in enumerate(instrs):
        if ins.base != "BRA":
            continue
        t = _TARGET.search(" ".join(ins.operands))
        if t and t.group(1) in labels and labels[t.group(1)] <= ins.addr:
            found.append((index[labels[t.group(1)]], i))
    return found


TENSOR_PRODUCTS = ("HMMA", "HGMMA")  # tensor-core mma.sync / wgmma


def main_loop(instrs: list[Instr], labels: dict[str, int]) -> list[Instr]:
    """The K loop: the smallest loop holding at least 80% of the most products any loop holds (so a
    loop around the K loop, such as stream-K's walk over tile segments, is passed over); products
    are the tensor-core instructions where the kernel has any (its FFMAs are then the epilogue's),
    else the FFMAs.  The whole program when there is no loop with a product in it."""
    bodies = [instrs[a:b + 1] for a, b in loops(instrs, labels)]
    kinds = TENSOR_PRODUCTS if any(x.base in TENSOR_PRODUCTS for x in instrs) else ("FFMA",)
    counts = [sum(x.base in kinds for x in body) for body in bodies]
    if not counts or not max(counts):
        return instrs
    return min((body for body, n in zip(bodies, counts) if n >= 0.8 * max(counts)), key=len)


def width_bits(op: str) -> int:
    """Access width of a load or store opcode: LDS.128 -> 128, LDG.E.64 -> 64, LDS -> 32."""
    for mod in op.split(".")[1:]:
        digits = mod.lstrip("USB")
        if digits in ("8", "16", "32", "64", "128"):
            return int(digits)
    return 32


_MEMORY = ("LDS", "STS", "LDG", "STG", "LDGSTS", "LDSM", "LDL", "STL")


def mix(body: list[Instr]) -> collections.Counter:
    """Instruction classes: FFMA, LDS.128, LDG.128, STS.32, BAR, ... and 'other'."""
    c = collections.Counter()
    for ins in body:
        if ins.pred == "@!PT":  # issued, never executed: no memory access
            c["other"] += 1
        elif ins.base in _MEMORY:
            c[f"{ins.base}.{width_bits(ins.op)}"] += 1
        elif ins.base in ("FFMA", "HMMA", "HGMMA", "BAR", "BRA", "FMUL", "FADD", "IMAD", "IADD3", "LEA", "ISETP", "MOV"):
            c[ins.base] += 1
        else:
            c["other"] += 1
    return c


def _sources(ins: Instr) -> list[tuple[int, int | None, bool]]:
    """(slot, register number or None for RZ/non-register, reuse flag) of each source operand."""
    out = []
    for slot, text in enumerate(ins.operands[1:4]):
        m = _REG.match(text)
        if m:
            reg = None if m.group(1) == "Z" else int(m.group(1))
            out.append((slot, reg, bool(m.group(2))))
        else:
            out.append((slot, None, False))
    return out


# Register-bank models (register number -> bank; when reads from one bank cost an extra cycle).
# "volta": sm_70 .. sm_90: two banks, bank = R % 2, each 64 bits wide, so an FFMA stalls a cycle
#   only when all three of its source reads come from one bank.  Source: Jia, Maggioni, Staiger,
#   Scarpazza, "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking" (2018) §3, and
#   the same authors' Turing report (2019); no newer measurement is public, so sm_80 and sm_90 are
#   assumed to follow it (an estimate, not a measurement).
# "maxwell": the maxas article: four banks, bank = R % 4; every second read from one bank costs a
#   cycle.
# "hopper": two banks (R % 2) as in "volta", but two non-reused source reads from one bank
#   already cost a cycle.  Fitted to H100 timings of rung 8's variants (docs/perf-notes.md, "the
#   register-bank trap"): scores of 348, 209 and 226 extra cycles per 1024 FFMAs went with 69%,
#   77% and 79% of the FP32 peak (ceilings 69%, 76%, 75%), where "volta" scores 18, 0 and 0
#   (ceilings 88-90%).  An estimate from timings, not a documented rule.
REG_BANK_MODELS = {"volta": (2, 3), "maxwell": (4, 2), "hopper": (2, 2)}  # (banks, reads that conflict)


# A shared-memory load issued fewer than LATE_LOAD instructions of the loop before the first instruction that reads what
# it loaded stalls its warp unless others fill the gap: a shared load takes about 30 cycles, and with two warps a
# scheduler (the family's 16 x 8 tiles) 16 instructions of one warp fill about 32 (docs/perf-notes.md)
LATE_LOAD = 16
_REGS = re.compile(r"(?<![A-Z0-9_])R(\d+)(\.64)?")  # R5, R5.reuse, -R5, |R5|, [R5+0x10], R12.64 (a pair); not UR5


def _registers(text: str) -> set[int]:
    out = set()
    for m in _REGS.finditer(text):
        out.update(range(int(m.group(1)), int(m.group(1)) + (2 if m.group(2) else 1)))
    return out


def _written(ins: Instr) -> set[int]:
    """The registers ``ins`` writes, as far as the load-use search needs: its first operand where that is a plain
    register (a store's first operand is an address, read), as wide as the access for loads."""
    m = _REG.match(ins.operands[0]) if ins.operands else None
    if not m or m.group(1) == "Z":
        return set()
    n = width_bits(ins.op) // 32 if ins.base in _MEMORY else 1
    return set(range(int(m.group(1)), int(m.group(1)) + max(1, n)))


def load_leads(body: list[Instr], base: str = "LDS") -> list[int]:
    """For each executed ``base`` load of the loop body ``body``: how many instructions later the first one that reads a
    register it loaded comes, going round the loop (what the last k step loads, the next iteration reads); 0 where
    none reads it before it is written again."""
    out, n = [], len(body)
    for i, ins in enumerate(body):
        if ins.base != base or ins.pred == "@!PT" or not _written(ins):
            continue
        regs, lead = _written(ins), 0
        for j in range(1, n + 1):
            nxt = body[(i + j) % n]
            dst = _written(nxt)
            read = _registers(" ".join(nxt.operands[1:] if dst else nxt.operands))
            if regs & read:
                lead = j
                break
            if regs & dst:
                break
        out.append(lead)
    return out


@dataclass(frozen=True)
class LoopReport:
    instructions: int
    mix: dict
    ffma: int
    ffma_share: float  # FFMA / instructions in the loop body
    reuse_operands: int  # FFMA source operands that carry .reuse
    reuse_hits: int  # FFMA source reads served by the previous instruction's reuse cache
    ffma_sources: int  # FFMA source reads of real registers
    bank_conflicts: int  # extra register-file cycles among FFMA sources (model below)
    bank_model: str
    lds: dict  # LDS width (bits) -> count
    ldg: dict
    hmma: int = 0  # tensor-core mma instructions (the products of the tf32x3 / tf32 kernels)
    lds_leads: tuple = ()  # per shared load, instructions to the first read of what it loaded (load_leads)


def register_bank_conflicts(body: list[Instr], model: str = "volta") -> tuple[int, int, int, int]:
    """(extra cycles, reuse hits, reuse flags, register reads) over the FFMAs of ``body``.

    A source read is served by the reuse cache when the instruction just before had the same
    register in the same operand slot with ``.reuse``; the remaining distinct registers are read
    from their banks.
    """
    if model not in REG_BANK_MODELS:
        raise ValueError(f"model must be one of {sorted(REG_BANK_MODELS)}, got {model!r}")
    banks, limit = REG_BANK_MODELS[model]
    extra = hits = flags = reads = 0
    prev: dict[int, int] = {}
    for ins in body:
        srcs = _sources(ins) if ins.base in ("FFMA", "FMUL", "FADD", "IMAD", "IADD3") else []
        if ins.base == "FFMA":
            fetched = set()
            for slot, reg, reuse in srcs:
                if reg is None:
                    continue
                reads += 1
                flags += reuse
                if prev.get(slot) == reg:
                    hits += 1
                else:
                    fetched.add(reg)
            per_bank = collections.Counter(r % banks for r in fetched)
            extra += sum(max(0, n - limit + 1) for n in per_bank.values())
        prev = {slot: reg for slot, reg, reuse in srcs if reuse and reg is not None}
    return extra, hits, flags, reads


def inspect(listing: str, model: str = "volta") -> LoopReport:
    """The main loop's instruction mix, FFMA share, reuse, register-bank estimate and shared loads' leads."""
    instrs, labels = parse(listing)
    body = main_loop(instrs, labels)
    m = mix(body)
    extra, hits, flags, reads = register_bank_conflicts(body, model)
    ffma = m.get("FFMA", 0)
    width = lambda base: {int(k.split(".")[1]): v for k, v in m.items() if k.startswith(base + ".")}
    return LoopReport(
        instructions=len(body), mix=dict(m), ffma=ffma, ffma_share=ffma / max(1, len(body)),
        reuse_operands=flags, reuse_hits=hits, ffma_sources=reads, bank_conflicts=extra,
        bank_model=model, lds=width("LDS"), ldg=width("LDG"), hmma=m.get("HMMA", 0) + m.get("HGMMA", 0),
        lds_leads=tuple(load_leads(body)),
    )
