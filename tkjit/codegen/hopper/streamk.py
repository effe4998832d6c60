"""Stream-K over the last wave of a persistent GEMM: the tail tiles' K loops split evenly over
every CTA, partial accumulators combined through a global f32 workspace and per-thread flags.

The split is made by the kernel itself at run time, from the launch shape (all values known to
every thread of every CTA alike; P = ``%nctaid.x``, c = ``%ctaid.x``, T tiles of Kt K trips):

    W = T / P, R = T mod P          stream-K when W >= 1, R > 0, Kt >= 2 and P <= MAX_SLOTS;
                                    otherwise R = 0 (every tile data-parallel, as without it)
    T_dp = T - R                    tiles 0 .. T_dp - 1: whole tiles, CTA c takes c, c + P, ...
    I = R * Kt                      the tail's K trips, numbered tile by tile (tile T_dp + j has
                                    trips j*Kt .. (j+1)*Kt - 1); CTA c takes [c*I/P, (c+1)*I/P)

A CTA's stream-K range is cut at tile boundaries into units (tile, first trip, trips): each is a
tile of the walk with fewer trips (``GemmRole`` walks them after its data-parallel tiles; the
producer and the consumers walk the same units, so the ring protocol is unchanged). A unit is

* whole (first trip 0, all Kt trips): stored as any tile;
* a *contribution* (first trip > 0): only a CTA's first unit can be one, so each CTA makes at
  most one. Consumer thread t of warpgroup w stores its accumulators to the CTA's slot of the
  workspace (``slot_offset``: thread-contiguous 16-byte vectors, coalesced), then sets its own
  flag with ``st.release.gpu`` -- one flag per thread, so no barrier is needed;
* *owned* (first trip 0, fewer than Kt trips): the tile's other trips belong to the CTAs
  c + 1, c + 2, ... whose ranges begin inside the tile (an empty range contributes nothing).
  Thread t of warpgroup w spins on each one's flag for (w, t) with ``ld.acquire.gpu``, adds the
  vectors it stored, resets the flag to 0 and, having added them all, stores the tile.

No wait can close a cycle: a contribution is its CTA's first stream-K unit, preceded only by
whole tiles, and owners wait on later CTAs only; every CTA of the persistent grid (one per SM)
is resident. Each flag is set once and reset once per launch, by the kernel: they are zero when
a launch starts (zero-initialised module ``.global`` memory, then left as found), so a CUDA
graph replays the kernel with no memset, and the launch ABI does not change.

The workspace and the flags belong to the loaded module: two launches of the kernel *running at
once* (on two streams) would share them and compute wrong tiles, or hang an owner whose flag the
other launch's owner reset. So the kernel's metadata says ``serial_launches`` and its launcher
(one per loaded module and device, runtime/launcher.py, ``LaunchOrder``) orders the launches: a
launch on a stream other than the previous launch's first waits for an event recorded after that
launch (cuStreamWaitEvent), so the launches run one at a time, in the order they were made, on
any streams and from any threads. Within one CUDA graph capture the capture's launches are
ordered the same way (the wait becomes an edge of the graph), but CUDA lets a capture wait for
nothing recorded outside it: what orders a graph's replays against launches outside the graph,
or against other graphs holding the kernel, is the streams they are launched on (the caller's,
as for any graph). Launches of the kernel through another module (another kernel object, a
``@fill_sms`` variant, another device) have a workspace of their own and need no order.

The CPU sync checker (passes/sync_check.py) explores one CTA's mbarrier rings; these
cross-CTA flags are outside its model (the ring protocol it checks is the same for whole
tiles and units), so the argument above is this protocol's only check besides the GPU tests.
"""
from __future__ import annotations

from .builder import Builder

MAX_SLOTS = 144
"""Workspace slots: CTAs of a persistent grid that may contribute. A grid of more CTAs (a GPU
of more SMs) runs every tile data-parallel."""
VEC = 4
THREADS = 128
SPIN_NS = 64
"""The backoff between polls of a flag (the whole grid's owners would otherwise hammer L2)."""
GATHER_BATCH = 2
"""Vectors of a contribution loaded between fences (each fence keeps ptxas from hoisting the
next batch's loads above the adds: all at once they need another accumulator's registers)."""
MIN_TRIPS = 2
"""Tiles of fewer K trips are not split."""


def symbols(kernel: str) -> tuple[str, str]:
    return f"{kernel}_streamk_workspace", f"{kernel}_streamk_flags"


def declarations(kernel: str, slot_bytes: int, consumers: int) -> list[str]:
    """The module-scope workspace (MAX_SLOTS slots of ``slot_bytes``) and flags (one u32 per
    consumer thread per slot), zero-initialised by the driver when the module loads."""
    ws, flags = symbols(kernel)
    return [f".global .align 16 .b8 {ws}[{MAX_SLOTS * slot_bytes}];",
            f".global .align 16 .b32 {flags}[{MAX_SLOTS * consumers * THREADS}];"]


class Split:
    """The split's values, emitted where they are used rather than kept in registers (the
    consumers' accumulators and packed tile leave few to spare): every thread computes the same
    ones from ``%nctaid.x``, ``%ctaid.x``, the tile count and the K trips."""

    def __init__(self, b: Builder, tiles: str, trips) -> None:
        self.b, self.tiles, self._trips = b, tiles, trips

    @property
    def trips(self) -> str:
        """Kt, computed afresh from the kernel's parameters (``trips()``: constant-bank reads)."""
        return self._trips()

    def ctas(self) -> str:
        r = self.b.reg()
        self.b(f"mov.u32 {r}, %nctaid.x;")
        return r

    def cta(self) -> str:
        r = self.b.reg()
        self.b(f"mov.u32 {r}, %ctaid.x;")
        return r

    def tail(self) -> tuple[str, str]:
        """(T_dp, I): the data-parallel tiles and the tail's trips (0 when stream-K is off)."""
        b, ctas, trips = self.b, self.ctas(), self.trips
        waves, tail, on, p, dp, total = b.reg(), b.reg(), b.pred(), b.pred(), b.reg(), b.reg()
        b(f"div.u32 {waves}, {self.tiles}, {ctas};", f"mul.lo.u32 {tail}, {waves}, {ctas};",
          f"sub.u32 {tail}, {self.tiles}, {tail};",
          f"setp.ne.u32 {on}, {tail}, 0;", f"setp.ne.u32 {p}, {waves}, 0;", f"and.pred {on}, {on}, {p};",
          f"setp.ge.s32 {p}, {trips}, {MIN_TRIPS};", f"and.pred {on}, {on}, {p};",
          f"setp.le.u32 {p}, {ctas}, {MAX_SLOTS};", f"and.pred {on}, {on}, {p};",
          f"selp.b32 {tail}, {tail}, 0, {on};", f"sub.s32 {dp}, {self.tiles}, {tail};",
          f"mul.lo.u32 {total}, {tail}, {trips};")
        return dp, total

    def dp_tiles(self) -> str:
        return self.tail()[0]

    def range_start(self, cta: str, total: str | None = None, plus: int = 0) -> str:
        """(cta + plus) * I / P: where that CTA's stream-K trips begin, exactly in 32 bits as
        c*q + c*r/P with I = q*P + r (c*r < P*P: no overflow, and no 64-bit division, which
        the 40-register producer could not hold)."""
        b = self.b
        if total is None:
            total = self.tail()[1]
        ctas = self.ctas()
        c, q, r, out = b.reg(), b.reg(), b.reg(), b.reg()
        b(f"add.u32 {c}, {cta}, {plus};", f"div.u32 {q}, {total}, {ctas};", f"mul.lo.u32 {r}, {q}, {ctas};",
          f"sub.u32 {r}, {total}, {r};", f"mul.lo.u32 {r}, {r}, {c};", f"div.u32 {r}, {r}, {ctas};",
          f"mad.lo.u32 {out}, {c}, {q}, {r};")
        return out


def slot_offset(b: Builder, slot: str, slot_bytes: int, consumer: str, thread: str) -> str:
    """The 64-bit byte offset of this thread's first vector in workspace slot ``slot``."""
    t, off, lane = b.reg(), b.reg("b64"), b.reg("b64")
    b(f"mad.lo.u32 {t}, {consumer}, {THREADS}, {thread};", f"mul.wide.u32 {off}, {slot}, {slot_bytes};",
      f"mul.wide.u32 {lane}, {t}, {VEC * 4};", f"add.s64 {off}, {off}, {lane};")
    return off


def flag_address(b: Builder, flags: str, slot: str, consumers: int, consumer: str, thread: str) -> str:
    t, addr = b.reg(), b.reg("b64")
    b(f"mad.lo.u32 {t}, {slot}, {consumers}, {consumer};", f"mad.lo.u32 {t}, {t}, {THREADS}, {thread};",
      f"mul.wide.u32 {addr}, {t}, 4;", f"add.s64 {addr}, {addr}, {flags};")
    return addr


def addresses(b: Builder, kernel: str) -> tuple[str, str]:
    """The workspace's and the flags' global addresses (symbols: immediates, nothing kept live)."""
    ws, flags = b.reg("b64"), b.reg("b64")
    names = symbols(kernel)
    b(f"mov.u64 {ws}, {names[0]};", f"mov.u64 {flags}, {names[1]};")
    return ws, flags


def contribute(b: Builder, kernel: str, regs: list[str], slot: str, slot_bytes: int, consumers: int,
               consumer: str, thread: str) -> None:
    """Store this thread's accumulators to slot ``slot`` and set its flag (release, gpu scope)."""
    ws, flags = addresses(b, kernel)
    base = b.reg("b64")
    b(f"add.s64 {base}, {ws}, {slot_offset(b, slot, slot_bytes, consumer, thread)};")
    stride = consumers * THREADS * VEC * 4
    for v in range(len(regs) // VEC):
        b(f"st.global.v4.f32 [{base}+{v * stride}], {{{', '.join(regs[VEC * v:VEC * (v + 1)])}}};")
    b(f"st.release.gpu.global.u32 [{flag_address(b, flags, slot, consumers, consumer, thread)}], 1;")


def gather(b: Builder, kernel: str, split: Split, regs: list[str], tile: str, slot_bytes: int,
           consumers: int, consumer: str, thread: str) -> None:
    """The owner's fix-up of tile ``tile`` (a stream-K tile): add the contributions of CTAs
    c + 1, c + 2, ... whose ranges begin before the tile's last trip and are not empty."""
    ws, flags = addresses(b, kernel)
    dp, total = split.tail()
    tile_end = b.reg()
    b(f"sub.s32 {tile_end}, {tile}, {dp};", f"mad.lo.s32 {tile_end}, {tile_end}, {split.trips}, {split.trips};")
    other, start, nxt = b.reg(), b.reg(), b.reg()
    top, done, skip = b.label("streamk_gather"), b.label("streamk_gathered"), b.label("streamk_empty")
    out, empty = b.pred(), b.pred()
    b(f"add.u32 {other}, {split.cta()}, 1;")
    b.place(top)
    b(f"setp.ge.u32 {out}, {other}, {split.ctas()};", f"@{out} bra {done};")
    b(f"mov.b32 {start}, {split.range_start(other, total)};")
    b(f"setp.ge.s32 {out}, {start}, {tile_end};", f"@{out} bra {done};")
    b(f"mov.b32 {nxt}, {split.range_start(other, total, 1)};",
      f"setp.ge.s32 {empty}, {start}, {nxt};", f"@{empty} bra {skip};")
    flag, seen, spin, waiting, arrived = flag_address(b, flags, other, consumers, consumer, thread), b.reg(), \
        b.label("streamk_spin"), b.pred(), b.label("streamk_arrived")
    b.place(spin)  # the warp waits as one (vote): a branch per thread would leave ptxas unsure the
    # warp reconverges, and it then moved the K loop's counters and descriptors off the uniform
    # datapath (WARPSYNC, R2UR: 196 instructions in the loop instead of 153)
    b(f"ld.acquire.gpu.global.u32 {seen}, [{flag}];", f"setp.eq.u32 {waiting}, {seen}, 0;",
      f"vote.sync.any.pred {waiting}, {waiting}, 0xffffffff;", f"@!{waiting} bra.uni {arrived};",
      f"nanosleep.u32 {SPIN_NS};", f"bra.uni {spin};")
    b.place(arrived)
    base = b.reg("b64")
    b(f"add.s64 {base}, {ws}, {slot_offset(b, other, slot_bytes, consumer, thread)};")
    stride = consumers * THREADS * VEC * 4
    for v in range(len(regs) // VEC):
        if v and v % GATHER_BATCH == 0:  # ptxas would issue every load first: 2x the registers
            b("fence.acq_rel.cta;")
        got = [b.reg("f32") for _ in range(VEC)]
        b(f"ld.global.v4.f32 {{{', '.join(got)}}}, [{base}+{v * stride}];")
        b(*(f"add.f32 {r}, {r}, {x};" for r, x in zip(regs[VEC * v:VEC * (v + 1)], got)))
    b(f"st.relaxed.gpu.global.u32 [{flag}], 0;")
    b.place(skip)
    b(f"add.u32 {other}, {other}, 1;", f"bra.uni {top};")
    b.place(done)


def walk(tiles: int, ctas: int, trips: int) -> list[list[tuple[int, int, int]]]:
    """The units (tile, first trip, trips) each CTA computes, in its order: the arithmetic the
    emitted walk does (``Split`` and ``GemmRole``'s first_tile / next_tile / unit_bounds), in
    Python, for the tests."""
    waves, tail = divmod(tiles, ctas)
    if not (waves and tail and trips >= MIN_TRIPS and ctas <= MAX_SLOTS):
        tail = 0
    dp, total = tiles - tail, tail * trips

    def start(c: int) -> int:
        q, r = divmod(total, ctas)
        return c * q + c * r // ctas

    out = []
    for c in range(ctas):
        units = [(t, 0, trips) for t in range(c, dp, ctas)]
        begin, end = start(c), start(c + 1)
        t = dp + begin // trips if begin < end else tiles
        while t < tiles:
            rel = (t - dp) * trips
            first = max(begin - rel, 0)
            units.append((t, first, min(end - rel, trips) - first))
            t += 1
            if (t - dp) * trips >= end:
                break
        out.append(units)
    return out


def contributors(tiles: int, ctas: int, trips: int, cta: int, tile: int) -> list[int]:
    """The CTAs whose contributions the owner ``cta`` of stream-K tile ``tile`` adds (``gather``)."""
    waves, tail = divmod(tiles, ctas)
    if not (waves and tail and trips >= MIN_TRIPS and ctas <= MAX_SLOTS):
        tail = 0
    dp, total = tiles - tail, tail * trips
    q, r = divmod(total, ctas)
    start = [c * q + c * r // ctas for c in range(ctas + 1)]
    tile_end = (tile - dp) * trips + trips
    out = []
    for other in range(cta + 1, ctas):
        if start[other] >= tile_end:
            break
        if start[other] < start[other + 1]:
            out.append(other)
    return out
