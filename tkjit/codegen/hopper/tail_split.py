"""Stream-K's run-time pieces, used by the general lowering (lower_stream_k.py; the GEMM
template's streamk.py shared them until its deletion on 2026-11-27): the split of the last
wave's K trips over every CTA of a persistent grid, the module-scope workspace of partial accumulators and the per-thread flags,
and the contribution / gather code around them. Nothing here knows which kernel it serves.

The split, made by the kernel at run time from the launch shape (P = ``%nctaid.x``, c =
``%ctaid.x``, T tiles of Kt K trips, the same values in every thread of every CTA):

    W = T / P, R = T mod P          stream-K when W >= 1, R > 0, Kt >= 2 and P <= MAX_SLOTS;
                                    otherwise R = 0 (every tile data-parallel)
    T_dp = T - R                    tiles 0 .. T_dp - 1 whole: CTA c takes c, c + P, ...
    I = R * Kt                      the tail's trips, tile by tile; CTA c takes [c*I/P, (c+1)*I/P)

A CTA's range cut at tile boundaries gives its units (tile, first trip, trips): *whole* (first
0, all Kt), a *contribution* (first > 0: only a CTA's first stream-K unit can be one; its
partial goes to the CTA's workspace slot, then each thread sets its flag with st.release.gpu) or
*owned* (first 0, fewer than Kt trips: the owner waits with ld.acquire.gpu for the flags of the
later CTAs whose ranges begin inside the tile, adds their partials and resets the flags).

Why no wait closes a cycle, and why every flag is back at 0 when a launch ends, is the
launch-order model ``check_walk`` (run by the tests over many launch shapes): a contribution is
its CTA's first stream-K unit, preceded only by whole tiles; an owner waits only on later CTAs;
each contribution is gathered by exactly one owner. Every CTA of the persistent grid is resident
(one per SM). The workspace and flags belong to the loaded module, so the kernel's launches must
not overlap: its metadata says ``serial_launches`` and runtime/launcher.py's ``LaunchOrder``
orders them (docs/hopper-codegen.md, "Stream-K").
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
    emitted walks do (``Split`` and the roles' first_tile / next_tile / unit bounds), in Python,
    for the tests and the launch-order model (``check_walk``)."""
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


def check_walk(tiles: int, ctas: int, trips: int) -> list[str]:
    """The launch-order model of the flags, for one launch shape: the problems found (none: the
    walk is sound). Each CTA's units, in its order, must

    * cover every (tile, trip) exactly once over all CTAs;
    * put a contribution (first trip > 0) only as the CTA's first stream-K unit, after whole
      tiles only (so a contributor never waits for anything before it sets its flags);
    * have every contribution gathered by exactly one owner -- the CTA whose unit starts that
      tile -- which waits only on CTAs after itself (a wait graph from lower to higher CTA
      indices has no cycle), and whose gather list names exactly the tile's contributors.

    Then every flag set in a launch is reset by that launch (all zero when the next one starts)."""
    units = walk(tiles, ctas, trips)
    problems: list[str] = []
    seen: dict[tuple[int, int], int] = {}
    contributions: dict[int, int] = {}   # CTA -> the tile it contributes to
    owners: dict[int, int] = {}          # tile -> the CTA that starts it (split tiles)
    for c, mine in enumerate(units):
        for i, (t, first, n) in enumerate(mine):
            for k in range(first, first + n):
                if (t, k) in seen:
                    problems.append(f"tile {t} trip {k}: CTAs {seen[(t, k)]} and {c}")
                seen[(t, k)] = c
            if first > 0:
                if any(f != 0 or m != trips for _, f, m in mine[:i]):
                    problems.append(f"CTA {c}: a contribution to tile {t} after a partial unit")
                contributions[c] = t
            elif n < trips:
                owners[t] = c
    missing = tiles * trips - len(seen)
    if missing:
        problems.append(f"{missing} (tile, trip) pairs computed by no CTA")
    gathered: dict[int, int] = {}
    for t, owner in owners.items():
        for other in contributors(tiles, ctas, trips, owner, t):
            if other <= owner:
                problems.append(f"tile {t}: owner {owner} waits on CTA {other}, not a later one")
            if contributions.get(other) != t:
                problems.append(f"tile {t}: owner {owner} waits on CTA {other}, which contributes "
                                f"to {contributions.get(other)}")
            gathered[other] = gathered.get(other, 0) + 1
    for c, t in contributions.items():
        if gathered.get(c, 0) != 1:
            problems.append(f"CTA {c}'s contribution to tile {t} is gathered {gathered.get(c, 0)} times")
    return problems
