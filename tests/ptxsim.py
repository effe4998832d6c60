"""A small PTX simulator for the subset tkjit's register-tile backend emits (test-only).

It runs one CTA at a time with all its threads in lockstep (numpy arrays over threads), which
is exact for tkjit's PTX: branches are warp-uniform (``bra.uni``; the simulator checks) and
threads that branch apart reconverge at the branch's join point (see ``CTA.run``); all other
divergence is through predicated instructions. Shared-memory races are detected instead of hidden by the
lockstep order: every shared byte remembers which thread last wrote and read it in the current
barrier epoch, and an access that conflicts with another thread's access in the same epoch
(read-after-write, write-after-read, write-after-write) raises ``RaceError``. ``cp.async`` data is
*in flight* from the copy to the ``cp.async.wait_group``/``wait_all`` that covers its group: any
access to in-flight bytes is a race, and the data lands (as a write) at the wait.

A kernel with ``.reqnctapercluster k`` runs each cluster's k CTAs together (``Cluster``): each
runs until every role of it waits on something only a peer can complete, then the next one
runs; ``mapa`` addresses a peer's shared memory (rank + 1 in bits 24..), ``st.async`` lands
there at once and completes its bytes on the peer's mbarrier, and ``barrier.cluster.wait``
passes once every non-exited thread of the cluster arrived as often. A TMA load with
``.multicast::cluster`` lands in every CTA its mask names, completing its bytes on each one's
mbarrier; ``mbarrier.arrive.shared::cluster`` on a mapa'd address arrives on the peer's barrier.
A round in which no CTA of a cluster does anything but wait is a deadlock (``SimError``, with
where each CTA's threads wait).

Named barriers (``bar.sync``/``bar.arrive b, n``) count their arrivals: threads whose barrier
has not completed wait at it while the CTA's other roles run (warp specialization, ping-pong
consumers handing their turn on), a role's waiting threads are retried in turn. TMA stores
(``cp.async.bulk.tensor...global.shared::cta``) and ``stmatrix`` are simulated; ``wgmma`` is not,
unless ``SKIP_WGMMA`` skips it (a run that checks a kernel's synchronization and tile walk).

Semantics follow the PTX ISA for ldmatrix, mma.sync.m16n8k16 (bf16/f16), shfl.sync.bfly and the
scalar instructions; approximate math (ex2.approx, ...) is computed exactly in f32.
"""
from __future__ import annotations

import re

import numpy as np

_TOKEN = re.compile(r"\s*(\{[^}]*\}|\[[^\]]*\]|[^,{}\[\]]+)\s*,?")


APPROX_ERROR: dict[str, float] = {}
"""Off by default (approximate math is exact here). Set, e.g. to ``GPU_APPROX_ERROR``, each
``.approx`` result of those opcodes is moved by that relative error, up or down by the input's
bits: a stand-in for the GPU's MUFU results, which differ from exact f32 in the last bits
(tanh.approx by up to 2^-11 relative), to find programs whose outputs those differences change."""
GPU_APPROX_ERROR = {"tanh": 2.0 ** -11, "ex2": 2.0 ** -22, "lg2": 2.0 ** -22, "rcp": 2.0 ** -23,
                    "rsqrt": 2.0 ** -22, "sqrt": 2.0 ** -22, "sin": 2.0 ** -20, "cos": 2.0 ** -20}
"""The PTX ISA's stated maximum errors of the approximate instructions (relative, roughly)."""


SKIP_WGMMA = False
"""Off by default (the simulator has no wgmma). Set, every ``wgmma`` instruction is skipped (the
accumulators keep the values they had, or 0 where the product starts them afresh: a product adds
nothing): for runs that check a
warp-specialized kernel's synchronization and tile walk -- its mbarriers, TMA loads and stores,
named and cluster barriers, which tiles it stores -- and not its products."""


def _nudged(out: np.ndarray, x: np.ndarray, rel: float) -> np.ndarray:
    sign = np.where((x.view(np.uint32) * np.uint32(2654435761)) >> np.uint32(31), 1.0, -1.0)
    return (out.astype(np.float64) * (1.0 + sign * rel)).astype(np.float32)


class SimError(Exception):
    pass


CACHE_HINTS = {"cs", "L1::no_allocate", "L2::cache_hint", "L2::64B", "L2::128B", "L2::256B"}
"""Qualifiers of st and cp.async that only hint the caches (the operand list of ``L2::cache_hint``
ends with the policy, which the simulator ignores)."""


class RaceError(SimError):
    pass


def _split_operands(text: str) -> list[str]:
    return [m.group(1).strip() for m in _TOKEN.finditer(text) if m.group(1).strip()]


def _f32_of_imm(tok: str) -> np.float32:
    return np.frombuffer(int(tok[2:], 16).to_bytes(4, "little"), dtype=np.float32)[0]


def _bf16_to_f32(h: np.ndarray) -> np.ndarray:
    return (h.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), rounded)


def _f32_to_f16(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def _f16_to_f32(h: np.ndarray) -> np.ndarray:
    return h.astype(np.uint16).view(np.float16).astype(np.float32)


def _f32_to_e4m3(x: np.ndarray) -> np.ndarray:
    """``cvt.rn.satfinite`` to e4m3 (fn) codes, by search over the code table (not the
    interpreter's arithmetic rounding): the nearest finite code, ties to the even code, magnitudes
    past 448 to ±448, NaN to 0x7F with the sign."""
    table = _fp8_to_f16("e4m3").view(np.float16).astype(np.float64)[:127]  # 0x00 .. 0x7E: 0 .. 448
    mag = np.abs(x.astype(np.float64))
    d = np.abs(mag[..., None] - table)
    best = d.min(-1, keepdims=True)
    ties = np.isclose(d, best, rtol=0, atol=0)
    code = np.where(ties & (np.arange(127) % 2 == 0), np.arange(127), 10**6).min(-1)
    code = np.where(ties.sum(-1) > 1, code, d.argmin(-1))
    code = np.where(mag > 448, 126, code)
    sign = np.signbit(x).astype(np.int64) << 7
    return np.where(np.isnan(x), 0x7F | sign, code | sign).astype(np.uint16)


def _fp8_to_f16(kind: str) -> np.ndarray:
    """The f16 bits of each of the 256 fp8 codes of ``kind`` (e4m3: the fn encoding, no infinity,
    S.1111.111 NaN; e5m2: IEEE-like), exact: every fp8 value is an f16 one."""
    codes = np.arange(256)
    sign = np.where(codes >> 7, -1.0, 1.0)
    ebits, mbits, bias = (4, 3, 7) if kind == "e4m3" else (5, 2, 15)
    e, m = (codes >> mbits) & ((1 << ebits) - 1), codes & ((1 << mbits) - 1)
    with np.errstate(over="ignore"):
        value = np.where(e == 0, m / (1 << mbits) * 2.0 ** (1 - bias), (1 + m / (1 << mbits)) * 2.0 ** (e - bias))
    top = (1 << ebits) - 1
    if kind == "e4m3":
        value = np.where((e == top) & (m == (1 << mbits) - 1), np.nan, value)
    else:
        value = np.where(e == top, np.where(m == 0, np.inf, np.nan), value)
    return (sign * value).astype(np.float16).view(np.uint16)


class Memory:
    """Global memory: one byte array; ``alloc`` returns 256-byte aligned addresses."""

    def __init__(self, size: int = 1 << 24):
        self.data = np.zeros(size, dtype=np.uint8)
        self.top = 4096

    def alloc(self, array: np.ndarray) -> int:
        raw = np.ascontiguousarray(array).view(np.uint8).ravel()
        addr = self.top
        self.data[addr:addr + raw.size] = raw
        self.top = -(-(addr + raw.size + 1024) // 256) * 256
        return addr

    def read_back(self, addr: int, like: np.ndarray) -> np.ndarray:
        n = like.size * like.itemsize
        return self.data[addr:addr + n].copy().view(like.dtype).reshape(like.shape)


class _Shared:
    def __init__(self, size: int):
        self.data = np.zeros(size, dtype=np.uint8)
        self.w_tid = np.full(size, -1, dtype=np.int64)
        self.w_epoch = np.full(size, -1, dtype=np.int64)
        self.r_tid = np.full(size, -1, dtype=np.int64)
        self.r_epoch = np.full(size, -1, dtype=np.int64)
        self.inflight = np.zeros(size, dtype=bool)
        self.epoch = 0

    def _bytes(self, addrs: np.ndarray, n: int) -> np.ndarray:
        idx = addrs[:, None].astype(np.int64) + np.arange(n)
        if idx.size and (idx.min() < 0 or idx.max() >= self.data.size):
            raise SimError(f"shared access out of bounds: {idx.min()}..{idx.max()} of {self.data.size}")
        return idx

    def read(self, tids: np.ndarray, addrs: np.ndarray, n: int) -> np.ndarray:
        idx = self._bytes(addrs, n)
        if self.inflight[idx].any():
            raise RaceError(f"shared read of bytes still being written by cp.async (no wait before it)")
        t = np.broadcast_to(tids[:, None], idx.shape)
        race = (self.w_epoch[idx] == self.epoch) & (self.w_tid[idx] != t)
        if race.any():
            k = np.argwhere(race)[0]
            raise RaceError(f"shared read of byte {idx[tuple(k)]} by thread {t[tuple(k)]} races with a "
                            f"write by thread {self.w_tid[idx[tuple(k)]]} (no barrier between)")
        flat, tf = idx.ravel(), t.ravel()
        same = self.r_epoch[flat] == self.epoch
        multi = same & (self.r_tid[flat] != tf)
        self.r_tid[flat] = np.where(multi, -2, tf)
        # several threads reading the same byte in one instruction: mark as shared reading
        uniq, counts = np.unique(flat, return_counts=True)
        if (counts > 1).any():
            self.r_tid[uniq[counts > 1]] = -2
        self.r_epoch[flat] = self.epoch
        return self.data[idx]

    def start_async(self, tids: np.ndarray, addrs: np.ndarray, n: int) -> None:
        """A cp.async copy begins: it must not conflict now, and its bytes are in flight."""
        idx = self._bytes(addrs, n)
        if self.inflight[idx].any():
            raise RaceError("cp.async into bytes another cp.async is still writing")
        self._check_write(tids, idx)
        self.inflight[idx.ravel()] = True

    def finish_async(self, tids: np.ndarray, addrs: np.ndarray, values: np.ndarray) -> None:
        idx = self._bytes(addrs, values.shape[1])
        self.inflight[idx.ravel()] = False
        self.write(tids, addrs, values)

    def _check_write(self, tids: np.ndarray, idx: np.ndarray) -> None:
        t = np.broadcast_to(tids[:, None], idx.shape)
        waw = (self.w_epoch[idx] == self.epoch) & (self.w_tid[idx] != t)
        war = (self.r_epoch[idx] == self.epoch) & (self.r_tid[idx] != t)
        uniq, counts = np.unique(idx.ravel(), return_counts=True)
        if waw.any() or war.any() or (counts > 1).any():
            kind = "write-after-write" if waw.any() or (counts > 1).any() else "write-after-read"
            raise RaceError(f"shared {kind} race (no barrier between the accesses)")

    def write(self, tids: np.ndarray, addrs: np.ndarray, values: np.ndarray) -> None:
        n = values.shape[1]
        idx = self._bytes(addrs, n)
        if self.inflight[idx].any():
            raise RaceError("shared write to bytes a cp.async is still writing")
        self._check_write(tids, idx)
        t = np.broadcast_to(tids[:, None], idx.shape)
        flat = idx.ravel()
        self.data[idx] = values
        self.w_tid[flat] = t.ravel()
        self.w_epoch[flat] = self.epoch

    def barrier(self) -> None:
        self.epoch += 1


class Kernel:
    """A parsed PTX entry: its parameters and instruction list."""

    def __init__(self, ptx: str):
        m = re.search(r"\.entry\s+(\w+)\s*\((.*?)\)\s*(.*?)\{(.*)\}\s*$", ptx, re.S)
        if not m:
            raise SimError("no .entry found")
        self.name = m.group(1)
        self.params = re.findall(r"\.param\s+(?:\.align\s+\d+\s+)?(\.\w+)\s+(\w+)", m.group(2))
        c = re.search(r"\.reqnctapercluster\s+(\d+)", m.group(3))
        self.cluster = int(c.group(1)) if c else 1
        """CTAs per cluster (``.reqnctapercluster``; 1: none): ``launch`` runs each cluster's CTAs together."""
        body = m.group(4)
        self.instrs: list[tuple] = []
        self.labels: dict[str, int] = {}
        for raw in body.split("\n"):
            line = raw.split("//")[0].strip()
            if not line or line.startswith(".reg"):
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.instrs)
                continue
            line = line.rstrip(";").strip()
            guard = None
            if line.startswith("@"):
                g, line = line.split(None, 1)
                guard = (g[1:].lstrip("!"), g.startswith("@!"))
            parts = line.split(None, 1)
            self.instrs.append((guard, parts[0], _split_operands(parts[1]) if len(parts) > 1 else []))


class CTA:
    """Runs one thread block."""

    def __init__(self, kernel: Kernel, mem: Memory, params: dict, ctaid: int, nctaid: int,
                 threads: int, smem_bytes: int):
        self.k, self.mem, self.params = kernel, mem, params
        self.T = threads
        self.tid = np.arange(threads, dtype=np.uint32)
        self.ctaid, self.nctaid = ctaid, nctaid
        self.regs: dict[str, np.ndarray] = {}
        self.shared = _Shared(max(smem_bytes, 16))
        self.pending: list[tuple] = []      # cp.async copies not yet committed to a group
        self.groups: list[list[tuple]] = []  # committed groups, oldest first
        self.steps = 0
        self.barriers: dict[int, dict] = {}  # shared address -> mbarrier state (count, pending, tx, phase)
        self.tensor_maps: dict = {}          # fake handle -> tensor map (launch's ``maps``)
        self.cluster: Cluster | None = None  # the CTAs run together with this one (``Cluster``)
        self.rank = 0
        self.exited = np.zeros(threads, dtype=bool)
        self.arrivals = np.zeros(threads, dtype=np.int64)  # barrier.cluster arrivals of each thread
        self.waits = np.zeros(threads, dtype=np.int64)     # ... and its completed waits

    # -- operands --------------------------------------------------------------------------
    def val(self, tok: str, kind: str = "u32") -> np.ndarray:
        if tok in self.regs:
            return self.regs[tok]
        if tok == "%tid.x":
            return self.tid.copy()
        if tok == "%ctaid.x":
            return np.full(self.T, self.ctaid, dtype=np.uint32)
        if tok == "%nctaid.x":
            return np.full(self.T, self.nctaid, dtype=np.uint32)
        if tok in ("%cluster_ctarank", "%clusterid.x", "%nclusterid.x"):
            k = self.k.cluster
            value = {"%cluster_ctarank": self.rank, "%clusterid.x": self.ctaid // k, "%nclusterid.x": self.nctaid // k}[tok]
            return np.full(self.T, value, dtype=np.uint32)
        if tok == "tk_smem":
            return np.zeros(self.T, dtype=np.uint32)
        if tok in self.params:  # a parameter's address (a tensor map's: its handle)
            return np.full(self.T, self.params[tok], dtype=np.uint64)
        if tok.startswith("0f"):
            return np.full(self.T, _f32_of_imm(tok), dtype=np.float32).view(np.uint32)
        if tok.startswith("%"):
            raise SimError(f"register {tok} read before it was written")
        n = int(tok, 0)
        if kind == "u64":
            return np.full(self.T, n & (2**64 - 1), dtype=np.uint64)
        if kind == "pred":
            return np.full(self.T, bool(n))
        return np.full(self.T, n & 0xFFFFFFFF, dtype=np.uint32)

    def u32(self, tok):
        return self.val(tok).astype(np.uint32)

    def s32(self, tok):
        return self.val(tok).astype(np.uint32).view(np.int32)

    def f32(self, tok):
        return self.val(tok).astype(np.uint32).view(np.float32)

    def u64(self, tok):
        return self.val(tok, "u64").astype(np.uint64)

    def pred(self, tok):
        return self.val(tok, "pred").astype(bool)

    def set(self, tok: str, value: np.ndarray, active: np.ndarray) -> None:
        if tok == "_":
            return
        old = self.regs.get(tok)
        value = np.asarray(value)
        if value.dtype == np.float32:
            value = value.view(np.uint32)
        elif value.dtype == np.int32:
            value = value.view(np.uint32)
        elif value.dtype == np.int64:
            value = value.view(np.uint64)
        if old is None:
            self.regs[tok] = np.where(active, value, np.zeros_like(value))
        else:
            self.regs[tok] = np.where(active, value.astype(old.dtype), old)

    def address(self, tok: str, kind: str):
        inner = tok.strip("[]")
        if "+" in inner:
            reg, imm = inner.split("+")
            off = int(imm, 0)
        else:
            reg, off = inner, 0
        if kind == "shared":
            return self.u32(reg).astype(np.int64) + off
        return self.u64(reg).astype(np.int64) + off

    # -- execution ------------------------------------------------------------------------------
    def run(self, max_steps: int = 10_000_000) -> None:
        """Threads run in lockstep; a branch that splits them (``bra.uni`` only between warps, as
        the PTX ISA requires) parks the threads that do not go first where the others will
        reconverge -- at a forward branch's target, or after a backward branch -- and
        collective instructions (barriers, shuffles, ldmatrix, mma) need every thread live."""
        for pc in self.walk(max_steps):
            raise SimError(f"deadlock: the instruction at {pc} waits on another CTA of a cluster, and none runs")

    def walk(self, max_steps: int = 10_000_000):
        """``run`` as a generator: in a cluster (``Cluster``) it yields the pc where its threads
        wait on something only another CTA can complete (an mbarrier phase its peers' stores
        complete, the cluster barrier), so that the cluster's other CTAs run."""
        pc = stuck = 0  # stuck: waits in a row that failed (in a cluster: all roles wait, yield)
        instrs = self.k.instrs
        live = np.ones(self.T, dtype=bool)
        parked: dict[int, np.ndarray] = {}
        waiting: set[int] = set()  # pcs in ``parked`` whose threads wait there (not only reconverge)
        while pc < len(instrs):
            if pc in parked:
                live = live | parked.pop(pc)
                waiting.discard(pc)
            guard, opcode, ops = instrs[pc]
            active = live.copy()
            if guard is not None:
                taken = self.pred(guard[0])
                active &= ~taken if guard[1] else taken
            self.steps += 1
            if self.steps > max_steps:
                raise SimError("too many steps (an endless loop?)")
            if opcode.startswith("bra"):
                target = self.k.labels[ops[0]]
                if np.array_equal(active, live):
                    if parked and any(pc < p < target for p in parked if p not in waiting):
                        raise SimError(f"branch at instruction {pc} jumps over threads parked at {sorted(parked)}")
                    pc = target
                    continue
                if not active.any():
                    pc += 1
                    continue
                if opcode == "bra.uni" and self.T % 32 == 0:
                    warps_taken = (active.reshape(-1, 32) == live.reshape(-1, 32)).all(axis=1)
                    warps_idle = (~active.reshape(-1, 32)).all(axis=1)
                    if not (warps_taken | warps_idle).all():
                        raise SimError(f"bra.uni divergent within a warp at instruction {pc}: {opcode} {ops}")
                if target > pc:  # the taken threads wait at the target
                    parked[target] = parked.get(target, np.zeros_like(live)) | active
                    live = live & ~active
                    pc += 1
                else:  # a backward branch: the others wait after it
                    parked[pc + 1] = parked.get(pc + 1, np.zeros_like(live)) | (live & ~active)
                    live = active
                    pc = target
                continue
            if opcode == "ret":
                self.exited |= live
                self.moved = True
                if not parked:
                    return
                pc = min(parked)  # these threads are done; the parked ones go on (a role that waits)
                live = parked.pop(pc)
                waiting.discard(pc)
                continue
            named = opcode.startswith("bar.") and len(ops) == 2  # a named barrier of a given thread count
            if named and guard is not None and not np.array_equal(active, live):
                raise SimError(f"{opcode} {ops} at instruction {pc} under a predicate")
            if named and not (opcode == "bar.sync" and int(live.sum()) == int(ops[1])
                              and np.unique(self.u32(ops[0])[live]).size == 1):
                # fewer threads than its count, several barriers, or bar.arrive: the threads that
                # complete their barrier go on, the others wait at it until other threads arrive
                done = self._named(opcode, ops, live)
                if done.any():
                    if not np.array_equal(done, live):
                        parked[pc] = parked.get(pc, np.zeros_like(live)) | (live & ~done)
                        waiting.add(pc)
                        live = done
                    pc += 1
                    stuck = 0
                    continue
                blocked = True
            elif named:
                pass
            elif opcode.startswith("barrier.cluster"):  # every thread of the cluster, by its warps where .aligned
                if ".aligned" in opcode and not (live.reshape(-1, 32).all(1) | ~live.reshape(-1, 32).any(1)).all():
                    raise SimError(f"{opcode} at instruction {pc} with only some threads of a warp live")
            elif not live.all() and opcode.split(".")[0] in ("bar", "barrier", "shfl", "ldmatrix", "mma", "stmatrix"):
                warps = live.reshape(-1, 32) if self.T % 32 == 0 else live[None]
                if opcode.split(".")[0] in ("bar", "barrier") or not (warps.all(1) | ~warps.any(1)).all():
                    raise SimError(f"{opcode} at instruction {pc} with only some threads live")  # (of a warp)
            if named and blocked:
                pass  # (every live thread waits at its named barrier)
            elif opcode.startswith("barrier.cluster.wait") and not self._cluster_ready(active):
                blocked = True  # (not executed: retried once the cluster's threads arrived)
            else:
                self.execute(opcode, ops, active)
                blocked = opcode.startswith("mbarrier.try_wait") and not self.pred(ops[0])[active].all()
                if not blocked and not opcode.startswith("bra"):
                    self.moved = True  # (what a peer's deadlock check asks: did anything happen)
            stuck = stuck + 1 if blocked else 0
            if blocked and self.cluster is not None and (not parked or stuck > len(parked) + 1):
                # every role of this CTA waits: the cluster's other CTAs may complete it (a CTA runs
                # as far as it can first, so a peer that is late to initialise is late)
                stuck = 0
                self.waiting_at = sorted(waiting | {pc})  # (where its threads wait: a deadlock's report)
                yield pc
                self.cluster_yields = getattr(self, "cluster_yields", 0) + 1
                if self.cluster_yields > 100_000:
                    raise SimError("deadlock: the cluster's CTAs keep waiting on each other")
                if not parked:
                    if not opcode.startswith("mbarrier.try_wait"):
                        continue  # retry the wait
                    pc += 1  # (the spin loop's branch comes back to the try_wait)
                    continue
            if blocked:
                # the phase has not completed: run another role (warp specialization) until it has
                if not parked:
                    raise SimError(f"deadlock: {opcode} at instruction {pc} waits and no other threads can run")
                self.yields = getattr(self, "yields", 0) + 1
                if self.yields > 10_000:
                    raise SimError("deadlock: the roles keep waiting on each other")
                others = sorted(p for p in parked if p != pc)  # each waiting role in turn (after pc, round)
                other = next((p for p in others if p > pc), others[0]) if others else None
                if other is None:
                    raise SimError(f"deadlock: every role waits at instruction {pc}")
                parked[pc] = parked.get(pc, np.zeros_like(live)) | live
                waiting.add(pc)
                live = parked.pop(other)
                waiting.discard(other)
                pc = other
                continue
            pc += 1
        if parked:
            raise SimError(f"threads parked at {sorted(parked)} never resumed")

    def execute(self, opcode: str, ops: list[str], active: np.ndarray) -> None:
        parts = opcode.split(".")
        head = parts[0]
        handler = getattr(self, f"op_{head}", None)
        if handler is None:
            raise SimError(f"unsupported instruction {opcode}")
        handler(parts, ops, active)

    # -- integer and bit ops --------------------------------------------------------------------------
    def _int_kind(self, parts):
        for p in parts[1:]:
            if p in ("s32", "u32", "b32", "s64", "u64", "b64", "pred", "b16", "f32", "u16", "u8"):
                return p
        raise SimError(f"no type in {'.'.join(parts)}")

    def _ints(self, kind, toks):
        if kind in ("s64", "u64", "b64"):
            return [self.u64(t).view(np.int64) if kind == "s64" else self.u64(t) for t in toks]
        return [self.s32(t) if kind == "s32" else self.u32(t) for t in toks]

    def op_mov(self, parts, ops, active):
        kind = self._int_kind(parts)
        dst, src = ops
        if dst.startswith("{"):
            halves = [h.strip() for h in dst.strip("{}").split(",")]
            v = self.u32(src)
            self.set(halves[0], (v & 0xFFFF).astype(np.uint16), active)
            self.set(halves[1], (v >> 16).astype(np.uint16), active)
            return
        if src.startswith("{"):  # two 16-bit halves into one 32-bit register, the first the low one
            lo, hi = (self.val(h.strip()).astype(np.uint32) & 0xFFFF for h in src.strip("{}").split(","))
            self.set(dst, lo | (hi << 16), active)
            return
        if kind == "pred":
            self.set(dst, self.pred(src), active)
        elif kind in ("b64", "u64", "s64"):
            self.set(dst, self.u64(src), active)
        elif kind == "b16":
            self.set(dst, self.val(src).astype(np.uint16), active)
        else:
            self.set(dst, self.u32(src), active)

    def _arith(self, parts, ops, active, fn):
        kind = self._int_kind(parts)
        if kind == "f32":
            return self._float(parts, ops, active, fn)
        vals = self._ints(kind, ops[1:])
        with np.errstate(all="ignore"):
            res = fn(*vals)
        if kind in ("s64", "u64", "b64"):
            res = np.asarray(res).astype(np.int64).view(np.uint64) if np.asarray(res).dtype != np.uint64 else res
        else:
            res = np.asarray(res).astype(np.int64).astype(np.uint32) if np.asarray(res).dtype not in (np.uint32,) else res
        self.set(ops[0], res, active)

    def _float(self, parts, ops, active, fn):
        vals = [self.f32(t) for t in ops[1:]]
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*vals), dtype=np.float32)
            if "approx" in parts and APPROX_ERROR.get(parts[0]):
                out = _nudged(out, vals[0], APPROX_ERROR[parts[0]])
            self.set(ops[0], out, active)

    def op_add(self, parts, ops, active):
        self._arith(parts, ops, active, lambda a, b: a + b)

    def op_sub(self, parts, ops, active):
        self._arith(parts, ops, active, lambda a, b: a - b)

    def op_mul(self, parts, ops, active):
        if "wide" in parts:
            a, b = self.s32(ops[1]).astype(np.int64), self.s32(ops[2]).astype(np.int64)
            self.set(ops[0], (a * b).view(np.uint64), active)
            return
        if "f32" in parts:
            return self._float(parts, ops, active, lambda a, b: a * b)
        kind = self._int_kind(parts)
        if kind in ("s64", "u64"):
            a, b = self.u64(ops[1]), self.u64(ops[2])
            self.set(ops[0], a * b, active)
            return
        a, b = (x.astype(np.int64) for x in self._ints(kind, ops[1:]))
        self.set(ops[0], (a * b).astype(np.uint64).astype(np.uint32), active)

    def op_mad(self, parts, ops, active):
        kind = self._int_kind(parts)
        if kind in ("s64", "u64"):
            a, b, c = (self.u64(t) for t in ops[1:])
            self.set(ops[0], a * b + c, active)
            return
        a, b, c = (x.astype(np.int64) for x in self._ints(kind, ops[1:]))
        self.set(ops[0], (a * b + c).astype(np.uint64).astype(np.uint32), active)

    def op_div(self, parts, ops, active):
        if "f32" in parts:
            return self._float(parts, ops, active, lambda a, b: a / b)
        kind = self._int_kind(parts)
        a, b = (x.astype(np.int64) for x in self._ints(kind, ops[1:]))
        b = np.where(b == 0, 1, b)
        q = np.trunc(a / b).astype(np.int64) if kind == "s32" else a // b
        self.set(ops[0], q.astype(np.uint64).astype(np.uint32), active)

    def op_rem(self, parts, ops, active):
        kind = self._int_kind(parts)
        a, b = (x.astype(np.int64) for x in self._ints(kind, ops[1:]))
        b = np.where(b == 0, 1, b)
        r = np.fmod(a, b) if kind == "s32" else a % b
        self.set(ops[0], r.astype(np.uint64).astype(np.uint32), active)

    def op_bfe(self, parts, ops, active):
        """``bfe.u32 d, a, pos, len``: bits [pos, pos + len) of a, zero-extended (u32 only)."""
        if "u32" not in parts:
            raise SimError(f"unsupported bfe: {'.'.join(parts)}")
        pos, n = (self.u32(t).astype(np.uint64) for t in ops[2:4])
        value = self.u32(ops[1]).astype(np.uint64)
        self.set(ops[0], ((value >> pos) & ((np.uint64(1) << n) - np.uint64(1))).astype(np.uint32), active)

    def op_min(self, parts, ops, active):
        if "f32" in parts:
            return self._float(parts, ops, active, np.minimum if "NaN" in parts else np.fmin)
        self._arith(parts, ops, active, np.minimum)

    def op_max(self, parts, ops, active):
        if "f32" in parts:
            return self._float(parts, ops, active, np.maximum if "NaN" in parts else np.fmax)
        self._arith(parts, ops, active, np.maximum)

    def op_neg(self, parts, ops, active):
        if "f32" in parts:
            return self._float(parts, ops, active, lambda a: -a)
        self.set(ops[0], (-self.s32(ops[1]).astype(np.int64)).astype(np.uint64).astype(np.uint32), active)

    def op_abs(self, parts, ops, active):
        if "f32" in parts:
            return self._float(parts, ops, active, np.abs)
        self.set(ops[0], np.abs(self.s32(ops[1]).astype(np.int64)).astype(np.uint32), active)

    def op_and(self, parts, ops, active):
        if "pred" in parts:
            self.set(ops[0], self.pred(ops[1]) & self.pred(ops[2]), active)
        else:
            self.set(ops[0], self.u32(ops[1]) & self.u32(ops[2]), active)

    def op_or(self, parts, ops, active):
        if "pred" in parts:
            self.set(ops[0], self.pred(ops[1]) | self.pred(ops[2]), active)
        else:
            self.set(ops[0], self.u32(ops[1]) | self.u32(ops[2]), active)

    def op_xor(self, parts, ops, active):
        if "pred" in parts:
            self.set(ops[0], self.pred(ops[1]) ^ self.pred(ops[2]), active)
        else:
            self.set(ops[0], self.u32(ops[1]) ^ self.u32(ops[2]), active)

    def op_lop3(self, parts, ops, active):
        """``lop3.b32 d, a, b, c, lut``: each bit of d is bit (a·4 + b·2 + c) of lut."""
        a, b, c, lut = self.u32(ops[1]), self.u32(ops[2]), self.u32(ops[3]), int(ops[4], 0)
        out = np.zeros_like(a)
        for i in range(8):
            if lut >> i & 1:
                out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
        self.set(ops[0], out, active)

    def op_not(self, parts, ops, active):
        self.set(ops[0], ~self.pred(ops[1]), active)

    def op_shl(self, parts, ops, active):
        n = int(ops[2])
        if "b64" in parts:
            self.set(ops[0], self.u64(ops[1]) << np.uint64(n), active)
        else:
            self.set(ops[0], (self.u32(ops[1]).astype(np.uint64) << n).astype(np.uint32), active)

    def op_shr(self, parts, ops, active):
        n = int(ops[2])
        if "s32" in parts:
            self.set(ops[0], self.s32(ops[1]) >> n, active)
        else:
            self.set(ops[0], self.u32(ops[1]) >> np.uint32(n), active)

    def op_setp(self, parts, ops, active):
        cmp, kind = parts[1], parts[-1]
        combine = parts[2] if len(parts) == 4 else None
        if kind == "f32":
            a, b = self.f32(ops[1]), self.f32(ops[2])
        elif kind == "s32":
            a, b = self.s32(ops[1]), self.s32(ops[2])
        else:
            a, b = self.u32(ops[1]), self.u32(ops[2])
        with np.errstate(invalid="ignore"):
            res = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
                   "ne": a != b, "neu": ~(a == b)}[cmp]
        if combine == "and":
            res = res & self.pred(ops[3])
        elif combine == "or":
            res = res | self.pred(ops[3])
        self.set(ops[0], res, active)

    def op_set(self, parts, ops, active):
        """``set.cmp.f32.f32 d, a, b``: 1.0 where the comparison holds, else 0.0 (f32 only)."""
        if parts[2:] != ["f32", "f32"]:
            raise SimError(f"unsupported set: {'.'.join(parts)}")
        a, b = self.f32(ops[1]), self.f32(ops[2])
        with np.errstate(invalid="ignore"):
            res = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[parts[1]]
        self.set(ops[0], res.astype(np.float32), active)

    def op_selp(self, parts, ops, active):
        p = self.pred(ops[3])
        if "b64" in parts:
            a, b = self.u64(ops[1]), self.u64(ops[2])
        else:
            a, b = self.u32(ops[1]), self.u32(ops[2])
        self.set(ops[0], np.where(p, a, b), active)

    # -- float ops ---------------------------------------------------------------------------------
    def op_fma(self, parts, ops, active):
        a, b, c = (self.f32(t).astype(np.float64) for t in ops[1:])
        self.set(ops[0], (a * b + c).astype(np.float32), active)

    def op_ex2(self, parts, ops, active):
        self._float(parts, ops, active, np.exp2)

    def op_lg2(self, parts, ops, active):
        self._float(parts, ops, active, np.log2)

    def op_sqrt(self, parts, ops, active):
        self._float(parts, ops, active, np.sqrt)

    def op_rsqrt(self, parts, ops, active):
        self._float(parts, ops, active, lambda a: 1 / np.sqrt(a))

    def op_rcp(self, parts, ops, active):
        self._float(parts, ops, active, lambda a: np.float32(1) / a)

    def op_sin(self, parts, ops, active):
        self._float(parts, ops, active, np.sin)

    def op_cos(self, parts, ops, active):
        self._float(parts, ops, active, np.cos)

    def op_tanh(self, parts, ops, active):
        self._float(parts, ops, active, np.tanh)

    def op_cvt(self, parts, ops, active):
        mods = [p for p in parts[1:] if p not in ("rn", "rni", "rzi", "ftz", "sat", "satfinite")]
        dst_t, src_t = mods[0], mods[1]
        rni = "rni" in parts
        if dst_t == "e4m3x2" and src_t == "f32":  # cvt.rn.satfinite: the first source to the upper byte
            assert "satfinite" in parts and "rn" in parts, parts
            hi, lo = _f32_to_e4m3(self.f32(ops[1])), _f32_to_e4m3(self.f32(ops[2]))
            self.set(ops[0], lo.astype(np.uint32) | (hi.astype(np.uint32) << 8), active)
        elif dst_t == "f16x2" and src_t in ("e4m3x2", "e5m2x2"):  # two fp8 bytes, the lower one to the lower half
            table = _fp8_to_f16(src_t[:4])
            a = self.val(ops[1]).astype(np.uint32)
            lo, hi = table[a & 0xFF], table[(a >> 8) & 0xFF]
            self.set(ops[0], lo.astype(np.uint32) | (hi.astype(np.uint32) << 16), active)
        elif dst_t in ("bf16x2", "f16x2"):
            conv = _f32_to_bf16 if dst_t == "bf16x2" else _f32_to_f16
            hi, lo = conv(self.f32(ops[1])), conv(self.f32(ops[2]))
            self.set(ops[0], lo.astype(np.uint32) | (hi.astype(np.uint32) << 16), active)
        elif dst_t in ("bf16", "f16") and src_t == "f32":
            conv = _f32_to_bf16 if dst_t == "bf16" else _f32_to_f16
            self.set(ops[0], conv(self.f32(ops[1])), active)
        elif dst_t == "f32" and src_t in ("bf16", "f16"):
            h = self.val(ops[1]).astype(np.uint16)
            self.set(ops[0], _bf16_to_f32(h) if src_t == "bf16" else _f16_to_f32(h), active)
        elif dst_t == "f32" and src_t == "s32":
            self.set(ops[0], self.s32(ops[1]).astype(np.float32), active)
        elif dst_t == "s32" and src_t == "f32":       # round, saturate, NaN -> 0 (as the hardware)
            r = np.nan_to_num(np.rint(self.f32(ops[1]).astype(np.float64)), nan=0.0)
            self.set(ops[0], np.clip(r, -2.0**31, 2.0**31 - 1).astype(np.int64).astype(np.int32), active)
        elif dst_t == "f32" and src_t == "f32" and rni:
            self.set(ops[0], np.rint(self.f32(ops[1])), active)
        elif dst_t == "s64" and src_t == "s32":
            self.set(ops[0], self.s32(ops[1]).astype(np.int64).view(np.uint64), active)
        elif dst_t == "u64" and src_t == "u32":       # (zero-extended: a wgmma descriptor's address bits)
            self.set(ops[0], self.u32(ops[1]).astype(np.uint64), active)
        elif dst_t == "u32" and src_t == "u64":       # the low word
            self.set(ops[0], (self.val(ops[1]).astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32), active)
        else:
            raise SimError(f"unsupported cvt {'.'.join(parts)}")

    def op_cvta(self, parts, ops, active):
        self.set(ops[0], self.u64(ops[1]), active)

    # -- memory -----------------------------------------------------------------------------------
    def op_ld(self, parts, ops, active):
        space = parts[1]
        if space == "param":
            name = ops[1].strip("[]")
            value = self.params[name]
            kind = parts[-1]
            if kind == "f32":
                arr = np.full(self.T, np.float32(value), dtype=np.float32).view(np.uint32)
            elif kind == "u64":
                arr = np.full(self.T, value, dtype=np.uint64)
            else:
                arr = np.full(self.T, np.int32(value), dtype=np.int32).view(np.uint32)
            self.set(ops[0], arr, active)
            return
        vec = int(parts[2][1:]) if parts[2].startswith("v") else 1
        kind = parts[-1]
        size = {"b32": 4, "f32": 4, "u32": 4, "b16": 2, "u16": 2, "u8": 1}[kind]
        idx = np.nonzero(active)[0]
        addrs = self.address(ops[1], space)[idx]
        if space == "shared":
            raw = self.shared.read(self.tid[idx].astype(np.int64), addrs, size * vec)
        else:
            raw = self.mem.data[addrs[:, None] + np.arange(size * vec)]
        dsts = [d.strip() for d in ops[0].strip("{}").split(",")]
        for e, d in enumerate(dsts):
            piece = np.ascontiguousarray(raw[:, e * size:(e + 1) * size])
            word = np.zeros(self.T, dtype=np.uint32)
            if size == 4:
                word[idx] = piece.view(np.uint32).ravel()
            elif size == 2:
                word[idx] = piece.view(np.uint16).ravel()
            else:
                word[idx] = piece.ravel()
            reg_val = word.astype(np.uint16) if d.startswith("%h") else word
            self.set(d, reg_val, active)

    def op_st(self, parts, ops, active):
        if parts[1] == "async":
            return self._st_async(ops, active)
        space = parts[1]
        parts = [p for p in parts if p not in CACHE_HINTS]  # st.global.cs / .L1::no_allocate.L2::cache_hint
        vec = int(parts[2][1:]) if parts[2].startswith("v") else 1
        kind = parts[-1]
        size = {"b32": 4, "f32": 4, "b16": 2, "u16": 2, "u8": 1, "b8": 1}[kind]
        idx = np.nonzero(active)[0]
        if not idx.size:
            return
        addrs = self.address(ops[0], space)[idx]
        srcs = [s.strip() for s in ops[1].strip("{}").split(",")]
        pieces = []
        for s in srcs:
            w = self.u32(s)[idx].astype(np.uint32)
            pieces.append(w.view(np.uint8).reshape(-1, 4)[:, :size])
        data = np.concatenate(pieces, axis=1)
        if space == "shared":
            self.shared.write(self.tid[idx].astype(np.int64), addrs, data)
        else:
            self.mem.data[addrs[:, None] + np.arange(size * vec)] = data

    def op_createpolicy(self, parts, ops, active):
        """``createpolicy.fractional.L2::<priority>.b64 d, f``: an L2 cache policy, which only
        hints (the simulator has no cache): any 64-bit value."""
        self.set(ops[0], np.zeros(self.T, dtype=np.uint64), active)

    def op_atom(self, parts, ops, active):
        """``atom.global.cas.b32 d, [a], cmp, new`` (checked mode's error buffer), thread by thread
        in order: each sees the previous thread's swap, as the GPU's atomics serialize."""
        if parts[1:] != ["global", "cas", "b32"]:
            raise SimError(f"unsupported atom: {'.'.join(parts)}")
        addrs = self.address(ops[1], "global")
        cmp, new = self.u32(ops[2]), self.u32(ops[3])
        old = np.zeros(self.T, dtype=np.uint32)
        for t in np.nonzero(active)[0]:
            a = int(addrs[t])
            cur = int(self.mem.data[a:a + 4].view(np.uint32)[0])
            old[t] = cur
            if cur == int(cmp[t]):
                self.mem.data[a:a + 4] = np.array([new[t]], dtype=np.uint32).view(np.uint8)
        self.set(ops[0], old, active)

    def op_cp(self, parts, ops, active):
        if parts[1:4] == ["async", "bulk", "tensor"] and "global" in parts[5:7] and parts[5] != "global":
            return self._tma_load(ops, active)
        if parts[1:4] == ["async", "bulk", "tensor"] and parts[5] == "global":
            return self._tma_store(ops, active)
        if parts[1:4] in (["async", "bulk", "commit_group"], ["async", "bulk", "wait_group"]):
            return  # (a TMA store is written at once: no bulk group is ever in flight)
        if parts[1:3] == ["async", "commit_group"]:
            self.groups.append(self.pending)
            self.pending = []
            return
        if parts[1:3] in (["async", "wait_all"], ["async", "wait_group"]):
            keep = int(ops[0]) if parts[2] == "wait_group" else 0
            if parts[2] == "wait_all":
                self.groups.append(self.pending)
                self.pending = []
            done, self.groups = self.groups[:len(self.groups) - keep], self.groups[len(self.groups) - keep:]
            for group in done:
                for tids, addrs, data in group:
                    self.shared.finish_async(tids, addrs, data)
            return
        idx = np.nonzero(active)[0]
        saddr = self.address(ops[0], "shared")[idx]
        gaddr = self.address(ops[1], "global")[idx]
        n = self.u32(ops[3])[idx].astype(np.int64)
        data = np.zeros((idx.size, 16), dtype=np.uint8)
        for row, (g, k) in enumerate(zip(gaddr, n)):
            data[row, :k] = self.mem.data[g:g + k]
        self.shared.start_async(self.tid[idx].astype(np.int64), saddr, 16)
        self.pending.append((self.tid[idx].astype(np.int64), saddr, data))

    def _named(self, opcode: str, ops: list[str], live: np.ndarray) -> np.ndarray:
        """``bar.sync``/``bar.arrive b, n`` by the ``live`` threads (b may differ between warps):
        each barrier counts its arrivals; the n-th completes it (a bar.arrive never waits). Returns
        the threads whose barrier has completed since they arrived (a thread arrives once: a
        retried bar.sync does not arrive again)."""
        if not hasattr(self, "named_bars"):
            self.named_bars: dict[int, list[int]] = {}         # barrier -> [arrivals, completions]
            self.named_gen = np.full(self.T, -1, dtype=np.int64)  # the completions seen when it arrived
        ids, count = self.u32(ops[0]), int(ops[1])
        sync = opcode.startswith("bar.sync")
        new = live & (self.named_gen < 0) if sync else live
        self.moved = getattr(self, "moved", False) or bool(new.any())
        for b in np.unique(ids[new]).tolist():
            mine = new & (ids == b)
            bar = self.named_bars.setdefault(b, [0, 0])
            if sync:
                self.named_gen[mine] = bar[1]
            bar[0] += int(mine.sum())
            if bar[0] > count:
                raise SimError(f"named barrier {b}: {bar[0]} threads arrived, its count is {count}")
            if bar[0] == count:
                bar[0], bar[1] = 0, bar[1] + 1
                self.shared.barrier()
        if not sync:
            return live.copy()
        gens = np.array([self.named_bars.get(int(b), [0, 0])[1] for b in ids.tolist()], dtype=np.int64)
        done = live & (self.named_gen >= 0) & (gens > self.named_gen)
        self.named_gen[done] = -1
        self.moved = self.moved or bool(done.any())
        return done

    def op_bar(self, parts, ops, active):
        if (int(active.sum()) != int(ops[1])) if len(ops) == 2 else not active.all():
            raise SimError("bar.sync under a predicate")
        self.shared.barrier()

    # -- clusters (distributed shared memory, the cluster barrier) -------------------------------
    def _cluster_ready(self, active) -> bool:
        """A barrier.cluster.wait passes once every non-exited thread of the cluster arrived as
        often as the waiting threads' next wait needs."""
        need = int(self.waits[active].max()) + 1 if active.any() else 0
        ctas = self.cluster.ctas if self.cluster is not None else [self]
        return all(bool((cta.arrivals[~cta.exited] >= need).all()) for cta in ctas)

    def op_barrier(self, parts, ops, active):
        if parts[1] != "cluster" or parts[2] not in ("arrive", "wait"):
            raise SimError(f"unsupported {'.'.join(parts)}")
        if parts[2] == "arrive":
            self.arrivals[active] += 1
        else:
            self.waits[active] += 1

    def _remote(self, addrs: np.ndarray) -> tuple[CTA, np.ndarray]:
        """The CTA and its shared offsets of ``.shared::cluster`` addresses (``mapa``'s: rank + 1
        in bits 24.., below that this CTA's own)."""
        ranks = addrs >> 24
        if len(set(ranks.tolist())) != 1:
            raise SimError("one instruction addressing the shared memory of several CTAs")
        r = int(ranks[0]) if ranks.size else 0
        if r == 0:
            return self, addrs
        if self.cluster is None or r - 1 >= len(self.cluster.ctas):
            raise SimError(f"a shared::cluster address of rank {r - 1}, outside the cluster")
        return self.cluster.ctas[r - 1], addrs & 0xFFFFFF

    def op_mapa(self, parts, ops, active):
        """``mapa.shared::cluster.u32 d, a, r``: a's offset in rank r's shared memory, encoded
        as (r + 1) << 24 | offset (``_remote``)."""
        a, r = self.u32(ops[1]), self.u32(ops[2])
        if (a[active] >= 1 << 24).any():
            raise SimError("mapa of an address that is not this CTA's own")
        # (a rank outside the cluster is mapped too; only an access through it is an error)
        self.set(ops[0], ((np.minimum(r, 254).astype(np.uint32) + 1) << 24) | (a & 0xFFFFFF), active)

    def _st_async(self, ops, active) -> None:
        """``st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [a], v, [mbar]``: v lands in
        the target CTA's shared memory (the async proxy: ordered by that CTA's mbarrier, not by
        race epochs) and completes 4 bytes on its mbarrier at once."""
        for t in np.nonzero(active)[0]:
            cta, (addr,) = self._remote(self.address(ops[0], "shared")[t:t + 1])
            mcta, (bar,) = self._remote(self.address(ops[2], "shared")[t:t + 1])
            if mcta is not cta:
                raise SimError("st.async completing an mbarrier of another CTA than it writes")
            idx = cta.shared._bytes(np.array([addr]), 4).ravel()
            cta.shared.data[idx] = np.array([self.u32(ops[1])[t]], dtype=np.uint32).view(np.uint8)
            cta.shared.w_epoch[idx] = -1
            cta._arrive(int(bar), tx=-4)

    def op_fence(self, parts, ops, active):
        """``fence.proxy.async``: orders this thread's generic-proxy shared writes before later
        async-proxy reads (wgmma, TMA stores). The simulator has one proxy: nothing to do, but
        only the proxy fence is known."""
        if parts[1:3] != ["proxy", "async"] and parts[1] != "mbarrier_init":
            raise SimError(f"unsupported fence {'.'.join(parts)}")

    def op_setmaxnreg(self, parts, ops, active):
        """A register budget: nothing to simulate."""

    def op_prefetch(self, parts, ops, active):
        if parts[1] != "tensormap":
            raise SimError(f"unsupported prefetch {'.'.join(parts)}")

    def op_wgmma(self, parts, ops, active):
        """Only ``wait_group`` with no group in flight (kernels with no product), or, with
        ``SKIP_WGMMA``, every wgmma instruction, skipped: a product adds nothing, so one that
        starts its accumulators afresh (scale-d 0) leaves them 0."""
        if parts[1] != "wait_group" and not SKIP_WGMMA:
            raise SimError(f"unsupported {'.'.join(parts)} (the simulator has no wgmma)")
        if parts[1] == "mma_async" and ops[3].strip() == "0":
            zero = np.zeros(self.T, dtype=np.float32).view(np.uint32)
            for reg in ops[0].strip("{}").split(","):
                self.set(reg.strip(), zero, active)

    # -- mbarriers and TMA loads (the general lowering's protocol) ------------------------------
    def _barrier(self, addr: int) -> dict:
        if addr not in self.barriers:
            raise SimError(f"mbarrier at shared {addr} used before its init")
        return self.barriers[addr]

    def _arrive(self, addr: int, arrivals: int = 0, tx: int = 0) -> None:
        bar = self._barrier(addr)
        bar["pending"] -= arrivals
        bar["tx"] += tx
        if bar["pending"] < 0:
            raise SimError(f"mbarrier at shared {addr}: more arrivals than its count")
        if bar["pending"] == 0 and bar["tx"] == 0:  # the phase completes
            bar["phase"] += 1
            bar["pending"] = bar["count"]

    def op_mbarrier(self, parts, ops, active):
        idx = np.nonzero(active)[0]
        what = parts[1]
        if what == "init":
            for a in self.address(ops[0], "shared")[idx]:
                self.barriers[int(a)] = {"count": int(self.u32(ops[1])[0]), "pending": int(self.u32(ops[1])[0]),
                                         "tx": 0, "phase": 0}
        elif what == "arrive" and "expect_tx" in parts:
            for a, n in zip(self.address(ops[1], "shared")[idx], self.u32(ops[2])[idx]):
                self._arrive(int(a), arrivals=1, tx=int(n))
        elif what == "arrive":  # on this CTA's barrier or (.shared::cluster, mapa's address) a peer's
            for a in self.address(ops[1], "shared")[idx]:
                cta, (b,) = self._remote(np.array([a]))
                cta._arrive(int(b), arrivals=1)
        elif what == "try_wait" and "parity" in parts:
            addrs, parity = self.address(ops[1], "shared"), self.u32(ops[2])
            done = np.zeros(self.T, dtype=bool)
            for t in idx:  # the phase of parity P has completed when the current phase's parity is not P
                done[t] = (self._barrier(int(addrs[t]))["phase"] & 1) != (int(parity[t]) & 1)
            self.set(ops[0], done, active)
        else:
            raise SimError(f"unsupported {'.'.join(parts)}")

    def _box(self, tensor_tok: str, t: int):
        """Thread ``t``'s box of a TMA operand ``[map, {c0, ...}]``: (the map, the box's byte count,
        the global address of each of its bytes, -1 outside the tensor)."""
        handle_tok, coords = tensor_tok.strip("[]").split(",", 1)
        coord_toks = [c.strip() for c in coords.strip().strip("{}").split(",")]
        m = self.tensor_maps[int(self.u64(handle_tok.strip())[t])]
        c = [int(self.s32(tok)[t]) for tok in coord_toks]
        es, box, dims = m["elem_bytes"], m["box"], m["dims"]  # innermost first
        where = np.full((int(np.prod(box[1:])), box[0] * es), -1, dtype=np.int64)
        for r in range(where.shape[0]):
            idx, rem = [], r
            for k in range(1, len(box)):
                idx.append(c[k] + rem % box[k])
                rem //= box[k]
            if any(i < 0 or i >= d for i, d in zip(idx, dims[1:])):
                continue
            offset = sum(i * st for i, st in zip(idx, m["strides"][1:]))
            for e in range(box[0]):
                col = c[0] + e
                if 0 <= col < dims[0]:
                    g = m["base"] + (offset + col) * es
                    where[r, e * es:(e + 1) * es] = np.arange(g, g + es)
        return m, where.size, where.ravel()

    @staticmethod
    def _swizzled(m: dict, dst: int, n: int) -> np.ndarray:
        """The shared addresses of a box's ``n`` bytes from ``dst``, its rows swizzled as the map
        says (16-byte unit u of an address XOR (bits 7.. & mask))."""
        addrs = dst + np.arange(n)
        if m["swizzle"]:
            mask = m["swizzle"] // 16 - 1
            addrs = addrs ^ (((addrs >> 7) & mask) << 4)
        return addrs

    def _tma_load(self, ops, active) -> None:
        """``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [dst], [map, {c0, ...}], [mbar]``: the box at the coordinates (zeros outside the tensor),
        its rows swizzled, written at once (the async proxy: ordered by the mbarrier, not by this
        simulator's race epochs), then complete_tx of its bytes on the mbarrier. With
        ``.multicast::cluster`` and a CTA mask (4th operand), the box lands at the same offsets in
        every CTA of the cluster the mask names, completing its bytes on each one's mbarrier."""
        dsts, mbars = self.address(ops[0], "shared"), self.address(ops[2], "shared")
        masks = self.u32(ops[3]) if len(ops) > 3 else None
        for t in np.nonzero(active)[0]:
            m, n, where = self._box(ops[1], t)
            out = np.where(where >= 0, self.mem.data[np.maximum(where, 0)], 0).astype(np.uint8)
            cta, (dst,) = self._remote(dsts[t:t + 1])
            mcta, (bar,) = self._remote(mbars[t:t + 1])
            if mcta is not cta:
                raise SimError("a TMA load completing an mbarrier of another CTA than it writes")
            targets = [cta]
            if masks is not None:
                ctas = self.cluster.ctas if self.cluster is not None else [self]
                if int(masks[t]) >> len(ctas):
                    raise SimError(f"multicast mask {int(masks[t]):#x} names CTAs outside the cluster")
                targets = [c for r, c in enumerate(ctas) if int(masks[t]) >> r & 1]
            for target in targets:
                addrs = self._swizzled(m, int(dst), n)
                target.shared._bytes(addrs, 1)
                target.shared.data[addrs] = out
                target.shared.w_epoch[addrs] = -1
                target._arrive(int(bar), tx=-n)

    def _tma_store(self, ops, active) -> None:
        """``cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, {c0, ...}], [src]``:
        the box's bytes read from shared memory (swizzled as the map says; the async proxy, so
        no race epochs) and written at once to the tensor, the parts outside it dropped (its bulk
        group is then complete: ``cp.async.bulk.wait_group`` waits for nothing)."""
        srcs = self.address(ops[1], "shared")
        for t in np.nonzero(active)[0]:
            m, n, where = self._box(ops[0], t)
            data = self.shared.data[self.shared._bytes(self._swizzled(m, int(srcs[t]), n), 1).ravel()]
            keep = where >= 0
            self.mem.data[where[keep]] = data[keep]

    def op_stmatrix(self, parts, ops, active):
        """``stmatrix.sync.aligned.m8n8.xN[.trans].shared.b16 [a], {r0, ...}``: ldmatrix's inverse.
        Lanes 8k..8k+7 give the row addresses of matrix k; lane l's register k holds matrix k's
        (row l / 4, columns 2 (l % 4), + 1), or with .trans the transposed pair."""
        count = int(next(p for p in parts if p.startswith("x"))[1:])
        srcs = [d.strip() for d in ops[1].strip("{}").split(",")]
        warps = active.reshape(-1, 32).all(1)
        if not (warps | ~active.reshape(-1, 32).any(1)).all():
            raise SimError("stmatrix with only some threads of a warp active")
        regs = np.stack([self.u32(r) for r in srcs]).reshape(count, -1, 32)[:, warps]   # [matrix, warp, lane]
        rows = regs.reshape(count, -1, 8, 4).transpose(1, 0, 2, 3)                      # [warp, matrix, row, pair]
        if "trans" in parts:
            h = np.ascontiguousarray(rows).view(np.uint16)                               # [warp, matrix, row, col]
            rows = np.ascontiguousarray(h.transpose(0, 1, 3, 2)).view(np.uint32)
        data = np.ascontiguousarray(rows).view(np.uint8).reshape(-1, 16)
        lanes = (np.nonzero(warps)[0][:, None] * 32 + np.arange(8 * count)[None, :]).ravel()
        addrs = self.address(ops[0], "shared")[lanes]
        self.shared.write(self.tid[lanes].astype(np.int64), addrs, data)

    def op_shfl(self, parts, ops, active):
        mask = int(ops[2], 0)
        src = self.u32(ops[1])
        lanes = self.tid % 32
        partner = (self.tid - lanes) + (lanes ^ mask)
        self.set(ops[0], src[partner], active)

    def op_ldmatrix(self, parts, ops, active):
        count = int([p for p in parts if p.startswith("x")][0][1:])
        trans = "trans" in parts
        addrs = self.address(ops[1], "shared")
        lanes = self.tid % 32
        supply = lanes < 8 * count                       # threads 8k..8k+7 give matrix k's rows
        raw = self.shared.read(self.tid[supply].astype(np.int64), addrs[supply], 16)
        warps = self.T // 32
        mats = raw.view(np.uint16).reshape(warps, count, 8, 8)   # [warp, matrix, row, col]
        if trans:
            mats = mats.transpose(0, 1, 3, 2)
        r, c = np.arange(32) // 4, 2 * (np.arange(32) % 4)
        dsts = [d.strip() for d in ops[0].strip("{}").split(",")]
        for m, d in enumerate(dsts):
            lo = mats[:, m, r, c].astype(np.uint32)          # [warp, lane]
            hi = mats[:, m, r, c + 1].astype(np.uint32)
            self.set(d, (lo | (hi << 16)).reshape(-1), active)

    def op_mma(self, parts, ops, active):
        d_t, a_t = parts[6], parts[7]
        dst = [x.strip() for x in ops[0].strip("{}").split(",")]
        a = [x.strip() for x in ops[1].strip("{}").split(",")]
        b = [x.strip() for x in ops[2].strip("{}").split(",")]
        c = [x.strip() for x in ops[3].strip("{}").split(",")]
        to_f32 = _bf16_to_f32 if a_t == "bf16" else _f16_to_f32
        res = [np.zeros(self.T, dtype=np.uint32) for _ in dst]
        for w in range(self.T // 32):
            lanes = np.arange(32)
            sl = slice(32 * w, 32 * w + 32)
            g, t = lanes // 4, lanes % 4
            A = np.zeros((16, 16), dtype=np.float32)
            B = np.zeros((16, 8), dtype=np.float32)
            C = np.zeros((16, 8), dtype=np.float32)
            for i, reg in enumerate(a):
                v = self.u32(reg)[sl]
                lo, hi = to_f32((v & 0xFFFF).astype(np.uint16)), to_f32((v >> 16).astype(np.uint16))
                row = g + (8 if i in (1, 3) else 0)
                col = 2 * t + (8 if i >= 2 else 0)
                A[row, col], A[row, col + 1] = lo, hi
            for i, reg in enumerate(b):
                v = self.u32(reg)[sl]
                lo, hi = to_f32((v & 0xFFFF).astype(np.uint16)), to_f32((v >> 16).astype(np.uint16))
                k = 2 * t + 8 * i
                B[k, g], B[k + 1, g] = lo, hi
            if d_t == "f32":
                for i, reg in enumerate(c):
                    C[g + 8 * (i >> 1), 2 * t + (i & 1)] = self.f32(reg)[sl]
            else:
                for i, reg in enumerate(c):
                    v = self.u32(reg)[sl]
                    C[g + 8 * i, 2 * t] = _f16_to_f32((v & 0xFFFF).astype(np.uint16))
                    C[g + 8 * i, 2 * t + 1] = _f16_to_f32((v >> 16).astype(np.uint16))
            D = (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)
            if d_t == "f32":
                for i in range(4):
                    res[i][sl] = D[g + 8 * (i >> 1), 2 * t + (i & 1)].view(np.uint32)
            else:
                for i in range(2):
                    lo = _f32_to_f16(D[g + 8 * i, 2 * t]).astype(np.uint32)
                    hi = _f32_to_f16(D[g + 8 * i, 2 * t + 1]).astype(np.uint32)
                    res[i][sl] = lo | (hi << 16)
        for d, v in zip(dst, res):
            self.set(d, v, active)


def launch(ptx: str, meta: dict, args: list, dims: dict, num_sms: int = 4, mem: Memory | None = None,
           max_ctas: int = 64, strides: list[int] = ()) -> None:
    """Run a kernel on the simulator: ``args`` are ints (addresses from ``mem.alloc``) or floats;
    ``strides``: the values of the stride parameters (option strided), after the dims."""
    from tkjit.runtime.launcher import compile_grid
    kernel = Kernel(ptx)
    dims = {d: dims[d] for d in meta["dims"]}
    maps = {}
    for i, entry in enumerate(p for p in meta.get("params", []) if p.get("kind") == "tensormap"):  # the general lowering's
        tensor = meta["params"][entry["param"]]
        shape = [dims[d] if isinstance(d, str) else int(d) for d in tensor["dims"]][::-1]  # innermost first
        strides_ = [int(np.prod(shape[:k])) for k in range(len(shape))]
        es = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}[entry["dtype"]]
        maps[(0x7AB0 << 48) + i] = {"base": args[entry["param"]], "dims": shape, "strides": strides_,
                                     "box": list(entry["box"]), "swizzle": entry["swizzle"], "elem_bytes": es}
    values = list(args) + [dims[d] for d in meta["dims"]] + list(strides) + list(maps)
    params = {name: v for (_, name), v in zip(kernel.params, values)}
    grid = compile_grid(meta["grid"], tuple(meta["dims"]), num_sms)(**dims)
    total = grid[0] * grid[1] * grid[2]
    if total > max_ctas:
        raise SimError(f"grid of {total} CTAs is too large for the simulator")
    k = kernel.cluster
    if total % k:
        raise SimError(f"a grid of {total} CTAs is not whole clusters of {k}")
    for first in range(0, total, k):
        blocks = [CTA(kernel, mem, params, cta, total, meta["block"][0], meta["smem_bytes"])
                  for cta in range(first, first + k)]
        for rank, block in enumerate(blocks):
            block.tensor_maps = maps
            block.rank = rank
        if k == 1:
            blocks[0].run()
        else:
            Cluster(blocks).run()


class Cluster:
    """The CTAs of one cluster, run together: each runs until it waits on the others (its
    ``walk`` yields), in turn, until all have returned."""

    def __init__(self, ctas: list[CTA]):
        self.ctas = ctas
        for cta in ctas:
            cta.cluster = self

    def run(self) -> None:
        running = {cta.rank: cta.walk() for cta in self.ctas}
        while running:
            moved, at = False, {}
            for rank in list(running):
                cta = self.ctas[rank]
                cta.moved = False
                try:
                    at[rank] = next(running[rank])
                except StopIteration:
                    del running[rank]
                    moved = True
                moved |= cta.moved
            if not moved:  # a whole round in which every CTA only waited: nothing can change
                instrs = self.ctas[0].k.instrs
                where = {r: [f"{p}: {instrs[p][1]} {' '.join(instrs[p][2])}" for p in self.ctas[r].waiting_at]
                         for r in at}
                raise SimError(f"deadlock: every CTA of the cluster waits (rank -> where its threads wait: {where})")
