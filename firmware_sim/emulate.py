"""Run cross-compiled C on an emulated Cortex-M core (Unicorn) and count what it executes.

    from firmware_sim import emulate, toolchain
    elf = toolchain.build([Path("dot.c")], "cortex-m4", "-O2", out_dir)
    m = emulate.Machine(elf, "cortex-m4")
    m.write("xs", x.astype(np.int8))               # fill a global array by symbol name
    r = m.call("dot_s8", m.addr("xs"), m.addr("ws"), 64, count=True)
    r["r0_signed"], r["instructions"], r["mix"].most_common(5), r["stack_bytes"]
    r["cycles"]["cycles"]                          # modelled from the mix, see `cycles`

What is measured and what is modelled (the result's "provenance" says it per field):
- measured, by executing every instruction in Unicorn (QEMU's Thumb decoder): the return
  registers, the number of instructions executed, the executed instruction mix (mnemonics from
  objdump of the same ELF), the instructions executed inside each function symbol (so libgcc
  helpers such as `__aeabi_lmul` show up), and the stack depth (bytes below the initial SP).
- modelled: cycles, from the mix and a per-core timing table (`TIMINGS`, each figure with its
  source). Unicorn has no cycle model; flash wait states, bus contention, interrupts and the
  M7's dual issue and caches are not in the figure.

The CPU model is the core's where Unicorn has one (Cortex-M0 stands in for the M0+: both are
ARMv6-M with the same instructions), so an instruction the core lacks faults; `Machine.cpu_model`
says which model runs. The machine has FLASH at 0x00000000 and RAM at 0x20000000 as
`toolchain.LINKER_SCRIPT` lays them out; globals keep their values between calls, as on a device
(`reset()` reloads the image). Counting costs a Python hook per instruction: about 4 s per
million instructions on one core (uncounted calls run at Unicorn's full speed).

Unicorn and pyelftools are imported when a Machine is made, so importing this module works
without them. Errors: `EdgeseqError` when they are missing, for an unknown core or symbol, an
out-of-range read or write, a CPU fault, and a call that does not return within
`max_instructions`.
"""

from __future__ import annotations

import bisect
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from edgeseq.errors import EdgeseqError
from firmware_sim import toolchain

# Unicorn CPU model per core (unicorn.arm_const names); the M0 stands in for the M0+ (both ARMv6-M).
CPU_MODELS = {"cortex-m0plus": "UC_CPU_ARM_CORTEX_M0", "cortex-m4": "UC_CPU_ARM_CORTEX_M4",
              "cortex-m7": "UC_CPU_ARM_CORTEX_M7", "cortex-m33": "UC_CPU_ARM_CORTEX_M33"}

# The called function returns here: LR = RETURN_ADDRESS | 1 (Thumb), and emulation stops when the
# PC reaches it. A page of `b .` in the Code region, away from FLASH and RAM; not 0xFFFFFFxx,
# which M-profile treats as an exception return.
RETURN_ADDRESS = 0x1FFFF000
STACK_FILL = 0xA5


def _unicorn():
    try:
        import unicorn
        from unicorn import arm_const
    except ImportError:
        raise EdgeseqError("unicorn is not installed: pip install 'edgeseq[firmware]'") from None
    return unicorn, arm_const


# ---------------------------------------------------------------------------------------------
# Instructions: classification and timing

_CONDS = {"eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al"}
_CLASS_OF = {}
for _cls, _names in {
    "alu": "add adc sub sbc rsb mov mvn movw movt and orr eor bic orn lsl lsr asr ror rrx cmp cmn tst teq "
           "neg addw subw adr uxtb uxth sxtb sxth uxtab uxtah sxtab sxtah uxtb16 sxtb16 uxtab16 sxtab16 "
           "ubfx sbfx bfi bfc "
           "clz rbit rev rev16 revsh ssat usat ssat16 usat16 pkhbt pkhtb sel qadd qsub qdadd qdsub qadd8 qsub8 "
           "qadd16 qsub16 qasx qsax sadd8 ssub8 sadd16 ssub16 uadd8 usub8 uadd16 usub16 shadd8 shadd16 "
           "uqadd8 uqsub8 uqadd16 uqsub16 usad8 usada8 cpy",
    "mul": "mul mla mls smull umull smlal umlal umaal smulbb smulbt smultb smultt smulwb smulwt smlabb smlabt "
           "smlatb smlatt smlawb smlawt smlad smladx smlsd smlsdx smuad smuadx smusd smusdx smlald smlaldx "
           "smlsld smlsldx smmul smmulr smmla smmlar smmls smmlsr",
    "div": "sdiv udiv",
    "load": "ldr ldrb ldrh ldrsb ldrsh ldrex ldrexb ldrexh ldrt ldrbt ldrht ldrsbt ldrsht",
    "store": "str strb strh strex strexb strexh strt strbt strht",
    "load_double": "ldrd", "store_double": "strd",
    "load_multiple": "ldm ldmia ldmfd ldmdb ldmea pop",
    "store_multiple": "stm stmia stmea stmdb stmfd push",
    "branch": "b", "branch_link": "bl blx", "branch_exchange": "bx",
    "compare_branch": "cbz cbnz", "table_branch": "tbb tbh",
    "it": "it itt ite ittt itte itet itee itttt ittte ittet ittee itett itete iteet iteee",
    "nop": "nop yield wfe wfi sev dmb dsb isb bkpt cpsid cpsie",
}.items():
    for _n in _names.split():
        _CLASS_OF[_n] = _cls


def classify(mnemonic: str) -> tuple:
    """(base, class) for an objdump mnemonic: "ldrsb.w" -> ("ldrsb", "load"), "bne" -> ("b",
    "branch_cond"), "addeq" -> ("add", "alu"). Unknown instructions are class "other"."""
    m = mnemonic.lower().split(".")[0]
    if m == "it_condition_failed":              # an IT block's instruction issued with its condition failed
        return m, "condition_failed"
    if m in ("bl", "blx", "bx"):
        return m, _CLASS_OF[m]
    if m[:1] == "b" and m[1:] in _CONDS:
        return "b", "branch_cond" if m[1:] != "al" else "branch"
    for base in (m, m[:-1] if m.endswith("s") else None, m[:-2] if m[-2:] in _CONDS else None,
                 m[:-3] if m[-2:] in _CONDS and m[-3:-2] == "s" else None):
        if base and base in _CLASS_OF:
            return base, _CLASS_OF[base]
    return m, "other"


@dataclass(frozen=True)
class Timing:
    """Cycles per instruction class on one core, with the source of the figures.

    Classes not listed cost `default`. `refill` is P, the pipeline refill after a taken branch
    or a write to PC. `load_pipelined` is what a single load costs when it follows another
    single load whose result it does not use for its address.
    """

    source: str
    cost: dict
    default: int = 1
    refill: int = 0
    cond_not_taken: int = 1
    load_pipelined: Optional[int] = None
    pc_load_extra: Union[int, str] = 0  # a load or pop that writes PC, beyond its load cost ("P": refill)
    pc_alu_extra: Union[int, str] = 0   # mov/add with PC as destination, beyond 1
    notes: tuple = ()


_M4 = Timing(
    source="Arm Cortex-M4 Technical Reference Manual (DDI 0439), Table 3-1 'Cortex-M4 instruction set "
           "summary' and 'Load/store timings' (shared with the Cortex-M3 TRM, DDI 0337)",
    cost={"alu": 1, "mul": 1, "div": 12, "load": 2, "store": 1, "load_double": 3, "store_double": 3,
          "load_multiple": 1, "store_multiple": 1, "branch": "1+P", "branch_cond": "1+P", "branch_link": "1+P",
          "branch_exchange": "1+P", "compare_branch": "1+P", "table_branch": "3+P", "it": 1, "nop": 1},
    refill=2, cond_not_taken=1, load_pipelined=1, pc_load_extra="P", pc_alu_extra="P",
    notes=("P (pipeline refill) is 1-3 in the TRM; 2 assumed",
           "SDIV/UDIV take 2-12 cycles (early termination); 12, the worst case, assumed",
           "LDR 2 cycles, 1 when it follows a single load without using its result for the address; "
           "loads with base writeback are never counted as pipelined",
           "STR 1 cycle (TRM: 'STR Rx,[Ry,#imm] is always one cycle', write buffer)",
           "LDM/STM/PUSH/POP 1+N, LDRD/STRD 1+2, +P when PC is loaded",
           "all multiplies incl. SMULL/SMLAL/UMULL and the DSP MACs (SMLAD, SMLABB, ...) 1 cycle",
           "IT 1 cycle (it can fold into the previous 16-bit instruction for 0; not modelled)",
           "zero wait-state memory; no interrupts"),
)
_M0PLUS = Timing(
    source="Arm Cortex-M0+ Technical Reference Manual (DDI 0484), Table 3-1 'Cortex-M0+ instruction summary'",
    cost={"alu": 1, "mul": 1, "load": 2, "store": 2, "load_multiple": 1, "store_multiple": 1, "branch": 2,
          "branch_cond": 2, "branch_link": 3, "branch_exchange": 2, "nop": 1},
    refill=0, cond_not_taken=1, load_pipelined=None, pc_load_extra=2, pc_alu_extra=1,
    notes=("MULS 1 cycle: the fast-multiplier configuration assumed (the small one takes 32)",
           "LDR/STR (all widths) 2, LDM/STM/PUSH/POP 1+N, POP with PC 3+N",
           "B<cc> 2 taken / 1 not taken, B 2, BL 3, BX/BLX 2, MOV/ADD to PC 2",
           "no hardware divide: division runs in libgcc's __aeabi_idiv and friends, counted as instructions",
           "zero wait-state memory; no interrupts"),
)
TIMINGS = {
    "cortex-m4": _M4,
    "cortex-m0plus": _M0PLUS,
    # Arm publishes no per-instruction cycle table for these two; the M4's (same Thumb-2/DSP
    # instructions) is used and labelled as such.
    "cortex-m7": Timing(source="Cortex-M4 table used for Cortex-M7: Arm publishes no per-instruction "
                               "timing for the M7", cost=_M4.cost, refill=_M4.refill, load_pipelined=1,
                        pc_load_extra="P", pc_alu_extra="P",
                        notes=_M4.notes + ("dual issue, branch prediction and caches not modelled: "
                                           "an upper bound for code in TCM",)),
    "cortex-m33": Timing(source="Cortex-M4 table used for Cortex-M33 (3-stage pipeline, same DSP "
                                "instructions): its TRM gives no per-instruction timing table",
                         cost=_M4.cost, refill=_M4.refill, load_pipelined=1, pc_load_extra="P",
                         pc_alu_extra="P", notes=_M4.notes + ("M33 divide is 2-11 cycles; 12 kept",)),
}


def _figure(value, refill: int) -> int:
    """A table entry: an int, "P", or "k+P"."""
    if isinstance(value, int):
        return value
    return refill + (int(value[:-2]) if value.endswith("+P") else 0)


def cycles(mix: Counter, core: str, events: Optional[dict] = None, refill: Optional[int] = None) -> dict:
    """Modelled cycles for an executed instruction mix on `core`.

    mix: Counter of objdump mnemonics -> executions, as `Machine.call(count=True)["mix"]`.
    events: the call's "events" (conditional branches not taken, pipelined loads, registers moved
    by LDM/STM/PUSH/POP, loads and ALU writes to PC). Without them the estimate assumes every
    conditional branch taken, no load pipelining, 4 registers per multiple transfer and one PC
    load per POP: a rough upper figure.
    refill: override the pipeline refill P (cycles) of the core's table.
    Returns {"cycles": int, "kind": "modelled", "core", "by_class": {class: cycles},
    "unknown": {mnemonic: count costed at 1}, "source", "assumptions"}.
    Raises EdgeseqError for a core without a timing table.
    """
    if core not in TIMINGS:
        raise EdgeseqError(f"no timing table for core {core!r}: choose one of {', '.join(sorted(TIMINGS))}")
    t = TIMINGS[core]
    p = t.refill if refill is None else refill
    by_class, unknown = Counter(), Counter()
    n_multiple = n_pop = 0
    for mnemonic, n in mix.items():
        base, cls = classify(mnemonic)
        cls = "branch_cond" if cls == "compare_branch" else cls  # CBZ/CBNZ time as B<cc>
        if cls == "other":
            unknown[mnemonic] += n
        by_class[cls] += n * _figure(t.cost.get(cls, t.default), p)
        if cls in ("load_multiple", "store_multiple"):
            n_multiple += n
            n_pop += n if base == "pop" else 0
    assumptions = list(t.notes)
    if events is None:
        assumptions.append("no events given: conditional branches taken, no load pipelining, "
                           "4 registers per LDM/STM/PUSH/POP, every POP loads PC")
        events = {"transfer_regs": 4 * n_multiple, "pc_loads": n_pop}
    taken_cost = _figure(t.cost.get("branch_cond", t.default), p)
    by_class["branch_cond"] -= events.get("branch_not_taken", 0) * (taken_cost - t.cond_not_taken)
    if t.load_pipelined is not None:
        by_class["load"] -= events.get("pipelined_loads", 0) * (_figure(t.cost["load"], p) - t.load_pipelined)
    by_class["transfer_regs"] += events.get("transfer_regs", 0)
    by_class["pc_writes"] += (events.get("pc_loads", 0) * _figure(t.pc_load_extra, p)
                              + events.get("pc_alu_writes", 0) * _figure(t.pc_alu_extra, p))
    by_class = {k: v for k, v in by_class.items() if v}
    return {"cycles": int(sum(by_class.values())), "kind": "modelled", "core": core, "refill": p,
            "by_class": by_class, "unknown": dict(unknown), "source": t.source, "assumptions": assumptions}


# ---------------------------------------------------------------------------------------------
# Disassembly: address -> instruction, from objdump of the same ELF

@dataclass(frozen=True)
class Insn:
    """One disassembled instruction, with what the timing model needs to know about it."""

    mnemonic: str        # as objdump prints it, less the .w/.n width suffix
    base: str
    cls: str
    size: int            # bytes
    regs: int = 0        # registers moved by LDM/STM/PUSH/POP
    loads_pc: bool = False
    alu_pc: bool = False
    dest: Optional[str] = None   # destination of a single load
    addr_regs: tuple = ()        # registers in the address of a single load or store
    writeback: bool = False


_REG_ALIAS = {"sb": "r9", "sl": "r10", "fp": "r11", "ip": "r12", "r13": "sp", "r14": "lr", "r15": "pc"}


def _regs(text: str) -> list:
    out = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = (int(x.strip().lstrip("r")) for x in part.split("-"))
            out += [f"r{i}" for i in range(lo, hi + 1)]
        elif part:
            out.append(_REG_ALIAS.get(part, part))
    return out


def _insn(mnemonic: str, operands: str, size: int) -> Insn:
    mnemonic = re.sub(r"\.(w|n)$", "", mnemonic.lower())
    base, cls = classify(mnemonic)
    operands = operands.split(";")[0].split("@")[0].strip().lower()
    first = _REG_ALIAS.get(operands.split(",")[0].strip(), operands.split(",")[0].strip())
    if cls in ("load_multiple", "store_multiple"):
        regs = _regs(operands[operands.find("{") + 1:operands.find("}")])
        return Insn(mnemonic, base, cls, size, regs=len(regs), loads_pc=cls == "load_multiple" and "pc" in regs)
    if cls in ("load", "store", "load_double", "store_double"):
        inside = operands[operands.find("[") + 1:operands.find("]")] if "[" in operands else ""
        addr_regs = tuple(r for r in (_REG_ALIAS.get(x.strip(), x.strip()) for x in inside.split(","))
                          if re.fullmatch(r"r\d+|sp|lr|pc", r))
        writeback = "!" in operands or bool(re.search(r"\]\s*,", operands))
        return Insn(mnemonic, base, cls, size, loads_pc=cls == "load" and first == "pc", dest=first,
                    addr_regs=addr_regs, writeback=writeback)
    writes_pc = cls == "alu" and first == "pc" and base not in ("cmp", "cmn", "tst", "teq")
    return Insn(mnemonic, base, cls, size, alu_pc=writes_pc)


_LINE = re.compile(r"^\s*([0-9a-f]+):\s*(.*)$")


def disassemble(elf: Path, objdump: Optional[str]) -> dict:
    """{address: Insn} for every instruction objdump shows in the ELF's code ({} without objdump).

    Reads GNU (`arm-none-eabi-objdump -d`) and LLVM (`llvm-objdump -d`) listings: address, raw
    bytes, mnemonic, operands, tab separated. Literal pools (.word) are skipped.
    """
    if not objdump:
        return {}
    argv = [objdump, "-d", str(elf)]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise EdgeseqError(f"{Path(objdump).name} failed on {elf}: {out.stderr.strip().splitlines()[:1]}")
    table = {}
    for line in out.stdout.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        fields = [f.strip() for f in m.group(2).split("\t") if f.strip()]
        if len(fields) < 2 or not re.fullmatch(r"[0-9a-f ]+", fields[0]) or fields[1].startswith("."):
            continue
        size = len(fields[0].replace(" ", "")) // 2
        table[int(m.group(1), 16)] = _insn(fields[1], " ".join(fields[2:]), size)
    return table


# ---------------------------------------------------------------------------------------------
# The machine

class Machine:
    """A Cortex-M core in Unicorn with an ELF from `toolchain.build` loaded.

    elf_path: the ELF; core: a key of `toolchain.CORES`; objdump: the disassembler for the
    instruction mix (default: the one `toolchain.find_compiler()` found, else none, in which case
    `call(count=True)` still counts instructions per function and stack but gives an empty mix and
    no cycles).
    Raises EdgeseqError if unicorn/pyelftools are missing, the core is unknown or the ELF unreadable.
    """

    def __init__(self, elf_path: Union[str, Path], core: str, objdump: Optional[str] = "auto"):
        if core not in toolchain.CORES:
            raise EdgeseqError(f"unknown core {core!r}: choose one of {', '.join(sorted(toolchain.CORES))}")
        self._uc_mod, self._arm = _unicorn()
        try:
            from elftools.common.exceptions import ELFError
            from elftools.elf.elffile import ELFFile
        except ImportError:
            raise EdgeseqError("pyelftools is not installed: pip install 'edgeseq[firmware]'") from None
        self.elf_path, self.core = Path(elf_path), core
        self.symbols, self._sizes, funcs, self._segments = {}, {}, [], []
        try:
            with open(self.elf_path, "rb") as f:
                elf = ELFFile(f)
                for seg in elf.iter_segments():
                    if seg["p_type"] == "PT_LOAD" and seg["p_memsz"]:
                        self._segments.append((seg["p_vaddr"], seg.data(), seg["p_memsz"]))
                for sec in elf.iter_sections():  # NOLOAD .bss is in no segment: zero it by section
                    if sec["sh_type"] == "SHT_NOBITS" and sec["sh_flags"] & 0x2 and sec["sh_size"]:
                        self._segments.append((sec["sh_addr"], b"", sec["sh_size"]))
                symtab = elf.get_section_by_name(".symtab")
                for s in (symtab.iter_symbols() if symtab else ()):
                    kind = s["st_info"]["type"]
                    if (not s.name or s.name.startswith("$")  # $t/$d: mapping symbols
                            or s["st_shndx"] == "SHN_UNDEF" or kind not in ("STT_FUNC", "STT_OBJECT", "STT_NOTYPE")):
                        continue
                    addr = s["st_value"] & ~1 if kind == "STT_FUNC" else s["st_value"]
                    self.symbols.setdefault(s.name, addr)
                    self._sizes.setdefault(s.name, s["st_size"])
                    if kind == "STT_FUNC":
                        funcs.append((addr, s["st_size"], s.name, s["st_info"]["bind"]))
        except (ELFError, OSError) as e:
            raise EdgeseqError(f"cannot read {self.elf_path} as ELF: {e}") from None
        for need in ("__stack_top", "__stack_bottom"):
            if need not in self.symbols:
                raise EdgeseqError(f"{self.elf_path.name} has no {need}: build it with firmware_sim.toolchain.build")
        # Aliases (__aeabi_lmul = __muldi3): name the address by its global, then __aeabi_ name.
        funcs.sort(key=lambda f: (f[0], f[3] != "STB_GLOBAL", not f[2].startswith("__aeabi_"), f[2]))
        self._funcs = []
        for addr, size, name, _ in funcs:
            if not self._funcs or self._funcs[-1][0] != addr:
                self._funcs.append((addr, size, name))
        self._func_starts = [f[0] for f in self._funcs]
        if objdump == "auto":
            cc = toolchain.find_compiler()
            objdump = cc.objdump if cc else None
        self.objdump = objdump
        self._insns = None  # disassembled on the first counted call
        self.reset()

    # -- memory -------------------------------------------------------------------------------
    def reset(self) -> None:
        """A fresh CPU with the ELF's image loaded: globals back to their initial values."""
        uc_mod, arm = self._uc_mod, self._arm
        # Unicorn (<= 2.1.4, cpu_arm_init) forces Cortex-M33 whenever UC_MODE_MCLASS is set and
        # ignores ctl_set_cpu_model. Plain Thumb mode plus an M-profile CPU model gives the real
        # core (M-profile features come from the model): an M0 then rejects SMULL, as it must.
        uc = uc_mod.Uc(uc_mod.UC_ARCH_ARM, uc_mod.UC_MODE_THUMB)
        try:
            uc.ctl_set_cpu_model(getattr(arm, CPU_MODELS[self.core]))  # before the first mem_map
        except (AttributeError, uc_mod.UcError):
            uc = uc_mod.Uc(uc_mod.UC_ARCH_ARM, uc_mod.UC_MODE_THUMB | uc_mod.UC_MODE_MCLASS)
        model = uc.ctl_get_cpu_model()
        self.cpu_model = next((n for n in dir(arm) if n.startswith("UC_CPU_ARM_") and getattr(arm, n) == model),
                              str(model))  # e.g. "UC_CPU_ARM_CORTEX_M0"
        uc.mem_map(toolchain.FLASH_ORIGIN, toolchain.FLASH_SIZE, uc_mod.UC_PROT_ALL)
        uc.mem_map(toolchain.RAM_ORIGIN, toolchain.RAM_SIZE, uc_mod.UC_PROT_ALL)
        uc.mem_map(RETURN_ADDRESS, 0x1000, uc_mod.UC_PROT_READ | uc_mod.UC_PROT_EXEC)
        uc.mem_write(RETURN_ADDRESS, b"\xfe\xe7" * 0x800)  # `b .`, never reached: emulation stops first
        for addr, data, memsz in self._segments:
            self._check(addr, memsz)
            uc.mem_write(addr, bytes(data) + bytes(memsz - len(data)))
        self.uc = uc

    def _check(self, addr: int, n: int) -> None:
        for lo, size in ((toolchain.FLASH_ORIGIN, toolchain.FLASH_SIZE), (toolchain.RAM_ORIGIN, toolchain.RAM_SIZE)):
            if lo <= addr and addr + n <= lo + size:
                return
        raise EdgeseqError(f"address range {addr:#x}..{addr + n:#x} is outside FLASH and RAM")

    def addr(self, symbol: str) -> int:
        """Address of a function or data symbol (functions without the Thumb bit)."""
        if symbol not in self.symbols:
            raise EdgeseqError(f"no symbol {symbol!r} in {self.elf_path.name}: is it defined, global and not static?")
        return self.symbols[symbol]

    def _where(self, target: Union[str, int], n: int) -> int:
        if isinstance(target, str):
            addr, size = self.addr(target), self._sizes.get(target, 0)
            if size and n > size:
                raise EdgeseqError(f"{n} bytes do not fit in {target!r} ({size} bytes)")
        else:
            addr = int(target)
        self._check(addr, n)
        return addr

    def write(self, target: Union[str, int], data) -> None:
        """Write bytes (or anything with .tobytes(), e.g. a numpy array) at a symbol or address."""
        raw = data.tobytes() if hasattr(data, "tobytes") else bytes(data)
        self.uc.mem_write(self._where(target, len(raw)), raw)

    def read(self, target: Union[str, int], n: int) -> bytes:
        """Read `n` bytes at a symbol or address."""
        return bytes(self.uc.mem_read(self._where(target, n), n))

    # -- calls --------------------------------------------------------------------------------
    def _function_of(self, addr: int) -> str:
        i = bisect.bisect_right(self._func_starts, addr) - 1
        if i >= 0:
            start, size, name = self._funcs[i]
            if addr < start + max(size, 1):
                return name
        return f"?{addr:#x}"

    def _it_skipped(self, visits: Counter) -> Counter:
        """{address: times issued with its condition failed} for the instructions of IT blocks.
        The emulator runs an IT block's instructions only when their condition holds; the core
        issues every one of them (a failed one costs a cycle, Cortex-M4 TRM 3.3.3). An IT block
        is entered only through its IT, so each of its k instructions (k = letters after "i") is
        issued as often as the IT was."""
        out = Counter()
        for address, n in visits.items():
            insn = self._insns.get(address) if self._insns else None
            if insn is None or insn.cls != "it":
                continue
            nxt = address + insn.size
            for _ in range(len(insn.base) - 1 if insn.base.startswith("it") else 0):
                member = self._insns.get(nxt)
                if member is None:
                    break
                if n > visits.get(nxt, 0):
                    out[nxt] += n - visits.get(nxt, 0)
                nxt += member.size
        return out

    def call(self, function: Union[str, int], *args: int, count: bool = False,
             max_instructions: int = 10_000_000) -> dict:
        """Call a C function with integer/pointer arguments (AAPCS: r0-r3, then the stack).

        Returns {"r0", "r1" (unsigned 32-bit), "r0_signed" (r0 as int32), "stack_bytes"}: r1 holds
        the high word of a 64-bit result; stack_bytes is the deepest stack use below the initial SP
        (bytes, from the 0xA5 fill of the stack region, and the lowest SP when counting).
        With count=True also "instructions" (int), "mix" (Counter mnemonic -> executions),
        "by_function" (Counter function symbol -> instructions executed in it), "events" (timing
        facts for `cycles`), "cycles" (`cycles(mix, core, events)`, or None without objdump) and
        "provenance" (which figures are measured and which modelled).
        Raises EdgeseqError on a CPU fault or when the function has not returned after
        `max_instructions`.
        """
        arm, uc = self._arm, self.uc
        entry = self.addr(function) if isinstance(function, str) else int(function) & ~1
        top, bottom = self.symbols["__stack_top"], self.symbols["__stack_bottom"]
        uc.mem_write(bottom, bytes([STACK_FILL]) * (top - bottom))
        words = [int(a) & 0xFFFFFFFF for a in args]
        sp = (top - 4 * max(0, len(words) - 4)) & ~7
        for i, w in enumerate(words[4:]):
            uc.mem_write(sp + 4 * i, w.to_bytes(4, "little"))
        for reg, w in zip((arm.UC_ARM_REG_R0, arm.UC_ARM_REG_R1, arm.UC_ARM_REG_R2, arm.UC_ARM_REG_R3), words):
            uc.reg_write(reg, w)
        uc.reg_write(arm.UC_ARM_REG_SP, sp)
        uc.reg_write(arm.UC_ARM_REG_LR, RETURN_ADDRESS | 1)

        hook = None
        visits, not_taken, pipelined = Counter(), Counter(), Counter()
        state = {"prev": None, "min_sp": sp}
        if count:
            if self._insns is None:
                self._insns = disassemble(self.elf_path, self.objdump)
            insns, sp_reg = self._insns, arm.UC_ARM_REG_SP
            pipelines = TIMINGS[self.core].load_pipelined is not None

            def on_insn(u, address, size, _):
                visits[address] += 1
                prev = state["prev"]
                if prev is not None:
                    p, cur = insns.get(prev[0]), insns.get(address)
                    if p is not None and p.cls in ("branch_cond", "compare_branch") and address == prev[0] + prev[1]:
                        not_taken[prev[0]] += 1
                    if (pipelines and p is not None and cur is not None and p.cls == "load" and cur.cls == "load"
                            and not p.writeback and not cur.writeback and p.dest not in cur.addr_regs):
                        pipelined[address] += 1
                state["prev"] = (address, size)
                s = u.reg_read(sp_reg)
                if s < state["min_sp"]:
                    state["min_sp"] = s

            # Blocks translated by an uncounted call carry no hook: drop them (and again after).
            uc.ctl_flush_tb()
            hook = uc.hook_add(self._uc_mod.UC_HOOK_CODE, on_insn)
        try:
            uc.emu_start(entry | 1, RETURN_ADDRESS, count=max_instructions)
        except self._uc_mod.UcError as e:
            pc = uc.reg_read(arm.UC_ARM_REG_PC)
            raise EdgeseqError(f"CPU fault in {function!r} at pc={pc:#x} ({self._function_of(pc)}): {e}") from None
        finally:
            if hook is not None:
                uc.hook_del(hook)
                uc.ctl_flush_tb()
        pc = uc.reg_read(arm.UC_ARM_REG_PC)
        if pc & ~1 != RETURN_ADDRESS:
            raise EdgeseqError(f"{function!r} did not return within {max_instructions} instructions "
                               f"(pc={pc:#x} in {self._function_of(pc)}): raise max_instructions or look for a loop")
        r0, r1 = uc.reg_read(arm.UC_ARM_REG_R0), uc.reg_read(arm.UC_ARM_REG_R1)
        stack = bytes(uc.mem_read(bottom, top - bottom))
        lowest = next((i for i, b in enumerate(stack) if b != STACK_FILL), len(stack))
        if lowest == 0 or state["min_sp"] < bottom:
            raise EdgeseqError(f"{function!r} overflowed the {top - bottom}-byte stack (toolchain.STACK_SIZE)")
        depth = max(sp - (bottom + lowest), sp - state["min_sp"], 0)
        result = {"r0": r0, "r1": r1, "r0_signed": r0 - (1 << 32) if r0 & 0x80000000 else r0,
                  "stack_bytes": depth}
        if not count:
            return result
        mix, by_function = Counter(), Counter()
        events = Counter(branch_not_taken=sum(not_taken.values()), pipelined_loads=sum(pipelined.values()))
        skipped = self._it_skipped(visits)
        events["it_condition_failed"] = sum(skipped.values())
        for address, n in skipped.items():          # issued, condition failed: 1 cycle each (TRM)
            by_function[self._function_of(address)] += n
            mix["it_condition_failed"] += n
        for address, n in visits.items():
            by_function[self._function_of(address)] += n
            insn = self._insns.get(address)
            if insn is None:
                continue
            mix[insn.mnemonic] += n
            events["transfer_regs"] += n * insn.regs
            events["pc_loads"] += n * insn.loads_pc
            events["pc_alu_writes"] += n * insn.alu_pc
        result.update(
            instructions=sum(visits.values()) + sum(skipped.values()), mix=mix, by_function=by_function, events=dict(events),
            cycles=cycles(mix, self.core, events) if self._insns else None,
            provenance={"r0": "measured", "stack_bytes": "measured", "instructions": "measured",
                        "mix": "measured" if self._insns else "unavailable: no objdump",
                        "by_function": "measured",
                        "cycles": "modelled" if self._insns else "unavailable: no objdump"})
        return result
