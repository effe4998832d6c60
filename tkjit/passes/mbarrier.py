"""mbarrier: the barrier rings and the producer/consumer protocol, built from the annotated IR
and checked on the CPU before any PTX exists.

``protocol_of(kernel)`` (after warp-spec, pipeline and smem-plan) gives the ``Protocol`` the PTX
emitter follows: one ring per pipelined loop (full[s] armed by the producer's arrive.expect_tx
with the stage's bytes, empty[s] counting one arrival per consumer warpgroup), a 1-stage ring
per tile loaded once per tile, and the epilogues whose staging tile smem-plan put over a ring
(every consumer meets on a named barrier before any writes there). The pass records the rings in
the decision log; the ``async-schedule`` pass then writes the protocol as IR and checks what it
reads back from that IR (``sync_at_compile``: the protocol the emitter walks, not this object).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import PassError
from ..ir.core import Kernel, Op, Value
from ..ir.ops import MMA_OPS, Copy, For, Load, Store, Yield
from ..ir.types import TileType
from .hopper import (block_loop, check_supported_loads, depends_on, fill_in_flight, is_shared, nbytes,
                     one_shot_loads, pipelined_loops, reads_any, shared_loads)
from .manager import Pass, PassContext, register_pass
from .smem_buffers import stage_data_bytes, stage_stride, staging_host, staging_sizes
from .sync_protocol import (ExchangeUse, FillUse, FillWaitUse, Item, LoopPlan, OneShotUse, Protocol, Ring, ScratchUse, SplitReduce,
                            StagingReuse,
                            StoreItem, StreamKUnits, TileProduct, own_trips_consumer, standard_protocol, with_turns)
from .sync_protocol import Load as RingLoad

LEVEL2_STAGES = 3
"""Level 2 holds each stage until the next trip's second product retires, so the producer refills
it about half a trip ahead of its use; with 2 stages that starves the ring. Measured (H200,
2026-11-27, examples/attention.tk D=128, 176-key blocks, 2 stages, same run): 0.51-0.58x of the
template with level 2, 0.69-0.75x without (``benchmarks/results/2026-11-27-nvidia-h200-s10-attn-2.json``).
Below 3 stages the pass gives the second product's tiles a ring of their own instead (``split``)."""


PACK_MEASURED = ("ptxas keeps the order: packed first, it alternated the 32 F2FP packs with the "
                 "64 FMULs of the rescale in causal attention_nol D = 128 and dropped the FMULs' operand "
                 "reuse; ncu, H200, N = 2048: dispatch stalls in the loop 1,523 -> 2,429 samples and "
                 "SM-active cycles +2.8% against attention.tk, whose L store had left ptxas grouping "
                 "them, nol 0.974x of it (benchmarks/results/2026-11-27-nvidia-h200-s16-nol-*); packed "
                 "after, both loops are the same instructions in the same order but for 2 ULDC and the "
                 "diagonal block's FSEL/FMNMX order (benchmarks/probes/sass_loop_diff.py)")
PACK_FIRST_MEASURED = (
    "its carried tile is at most 64 columns wide and every tile runs the same trips, where packing "
    "first measured faster (H200, 2026-11-27, same run, time packed after over packed first: "
    "attention_nol D = 64 non-causal N = 4096 1.021 in both scripts, attention.tk 1.010; D = 64 "
    "causal 0.99-1.00, D = 96 non-causal 0.98, D = 128 0.97-1.01, so those pack after; "
    "benchmarks/results/2026-11-27-nvidia-h200-s16-nol-pack.json, -s16-pack-family.json)")


def narrow_uniform(kernel: Kernel, loop: For) -> bool:
    """Whether a level-2 loop packs first under ``pack=auto``: its carried tile at most 64 columns
    wide and its trip count the same for every tile (PACK_FIRST_MEASURED)."""
    from ..ir.types import TileType
    carried = [v.type for v in loop.results if isinstance(v.type, TileType)]
    indices = set(block_loop(kernel).regions[0].args)
    return bool(carried) and max(t.cols for t in carried) <= 64 and \
        not any(depends_on(v, indices) for v in loop.operands[:3])


TURNS_MEASURED = (
    "measured (H200, 2026-11-27, same run, turns against none, benchmarks/results/2026-11-27-"
    "nvidia-h200-s15-turns-*.json): examples/attention.tk D = 128 causal, N = 1k..16k, "
    "+1.7/+2.7/+1.2/0.0/-0.4%; attention_nol D = 128 causal +2.2%, its GQA form +1.0%, "
    "attention_exp causal +0.8%; where the trips do not grow (non-causal) turns measured -1.1..+0.4% "
    "(softcap -1.1%, D = 96 -0.6%, D = 128 +-0.3%) and with three consumers (D = 64) -0.5%, so "
    "auto leaves them off there")
"""Why ``turns=auto`` takes turns where it does (the decision log quotes it)."""


class _Builder:
    def __init__(self, kernel: Kernel, overlap: bool = True):
        self.kernel = kernel
        self.overlap = overlap
        self.split = bool(kernel.attrs.get("split_rings", True))  # the pass option split=off: False
        self.turns = kernel.attrs.get("turns", "auto")  # the pass option: on, off or auto
        self.turn_loops: list[For] = []  # level-2 loops whose consumers take turns
        self.split_bars: dict[str, int] = {}  # a split-off ring -> its barriers' shared offset
        self.ring_loop: dict[str, For] = {}  # every loop ring (split-off ones too) -> its loop
        self.level2: list[For] = []  # loops software-pipelined one product behind
        consumers = kernel.attrs.get("consumers")
        if not isinstance(consumers, int):
            raise PassError("mbarrier: the kernel has no consumer count; run warp-spec first")
        self.consumers = consumers
        self.pingpong = bool(kernel.attrs.get("pingpong"))
        self.readers = 1 if self.pingpong else consumers  # consumers reading each fill
        self.rings: list[Ring] = []
        self.items: list[Item] = []
        self.ring_of: dict[Value, str] = {}
        self.load_of: dict[Load, tuple[str, str]] = {}  # IR load -> (ring, load name)
        self.loop_of: dict[For, str] = {}  # pipelined loop -> its ring
        self.reused: list[Store] = []  # stores whose staging goes over a ring, in item order
        self.extent: dict[str, tuple[int, int]] = {}  # ring -> shared bytes [start, end)
        self.names: set[str] = set()
        self.early: tuple[str, ...] = ()  # one-shot rings released after their last product
        self.kept_to_end: list[str] = []  # one-slot one-shot tiles something but a product reads
        self.split_k = int(block_loop(kernel).attrs.get("split", 1) or 1)
        """Split-K: CTAs (a cluster) sharing each tile's reduction loop (the block loop's ``split``)."""
        self.split_loop: For | None = None
        self.stream_k_loop: For | None = None
        """Stream-K (the grid pass's ``stream_k``): the loop whose trips the CTAs share in units."""
        from .pairs import pair_plan
        self.pair = pair_plan(kernel)
        """Multicast: the pair of CTAs (``pair.ctas`` 2) sharing the loads ``pair.loads``."""
        self.written: dict[Copy, str] = {}
        """Register tiles the consumers store to shared memory in a ring loop (``TileWrite``) -> name."""
        self.own: dict[str, For] = {}
        """Rings whose consumers run their own trips (the own-trips pass's loops) -> the loop."""
        self.own_refused: dict[For, str] = {}
        """Loops the own-trips pass marked whose protocol keeps the tile's trips here -> why."""
        self.store_of: dict[str, Store] = {}
        """The protocol's name of each store the epilogue pass staged -> the IR store."""
        self.hosts: dict[str, Store] = {}
        """One-shot rings whose one slot holds a staged store's staging (``pipeline{staging=slot}``)
        -> that store: released at the end of the tile, after ``StagingRead``."""
        self.scratch_ops: list[Op] = []
        """The block body's ops each ``ScratchSync`` step stands for, in order."""
        self.held: list[For] = []
        """Loops whose register-A product stays in flight (``LoopPlan.held``)."""
        self.not_held: dict[For, str] = {}
        """Loops with a register-A product drained every trip -> why (``held_fits``)."""

    def level2_fits(self, loop: For) -> bool:
        """Level 2 holds the second product's register A (its previous trip's, read by the wgmma
        in flight) beside the first product's result and the accumulator: it is chosen only where
        those and 32 more (``level2_need``) fit the most a consumer can get, beside a producer of
        24 (reg-budget then keeps the producer at 24 when they need it). The A of the current
        trip is made only after the previous product's wait, into registers of its own, so one
        copy is live while the softmax runs. Measured (H200, 2026-11-27, against FlexAttention,
        same runs): softcap 2.11 -> 2.50x, ALiBi 1.16 -> 1.23x, the fused MLP 1.35 -> 1.43x
        cuBLAS."""
        if pipelined(loop) is None:
            return False
        from .hopper import SETMAXNREG_MIN, consumer_registers
        room = (self.kernel.attrs["regs"][1] if "regs" in self.kernel.attrs
                else consumer_registers(self.consumers, SETMAXNREG_MIN))
        return level2_need(loop, self.share) <= room

    def held_fits(self, loop: For) -> bool:
        """Whether a trip's register-A product is held in flight (``held_a``, the ``hold``
        option): on where one consumer at a time runs its products (auto) or where asked (on), and
        where the copy of its A beside everything else live at the peak (liveness) and 32 more
        fits the consumers' registers. Where not, the trip drains its group before the next one
        makes its A, and ``not_held`` says why."""
        product = held_a(loop)
        hold = self.kernel.attrs.get("hold", "auto")
        if product is None or hold == "off":
            return False
        cols = product.result.type.cols
        if hold == "auto" and not self.pingpong and self.consumers > 1 and cols < HOLD_MIN_COLS:
            self.not_held[loop] = (f"its {self.consumers} cooperative consumers' groups, {cols} columns wide, fill "
                                   "each other's gaps on the tensor cores (mbarrier{hold=on} holds it anyway)")
            return False
        from .hopper import SETMAXNREG_MIN, consumer_registers
        from .liveness import CONSUMER_OVERHEAD, consumer_pressure, fragment_registers
        owners = 1 if self.pingpong else self.consumers
        room = (self.kernel.attrs["regs"][1] if "regs" in self.kernel.attrs
                else consumer_registers(self.consumers, SETMAXNREG_MIN))
        need = consumer_pressure(self.kernel, owners).peak + CONSUMER_OVERHEAD
        copy = fragment_registers(product.operands[0].type, owners)
        if need + copy > room:
            self.not_held[loop] = (f"the copy of its A ({copy} registers) beside the {need} a consumer "
                                   f"thread needs exceeds its {room}")
            return False
        return True

    @property
    def share(self) -> int:
        """Threads splitting each tile's rows: every consumer's, or one's (ping-pong)."""
        return 128 * (1 if self.pingpong else self.consumers)

    def unique(self, hint: str | None, fallback: str) -> str:
        base = hint or fallback
        name, i = base, 1
        while name in self.names:
            i += 1
            name = f"{base}{i}"
        self.names.add(name)
        return name

    def build(self) -> Protocol:
        blocks = block_loop(self.kernel)
        check_supported_loads(self.kernel)
        scratch = self.scratch_uses(blocks)
        in_flight: dict = {}  # a filled block's value -> its tile, while its copies are in flight
        for op in blocks.regions[0].ops:
            if in_flight and reads_any(op, in_flight):  # its copies land before its first reader
                self.items.append(FillWaitUse(tuple(in_flight.values())))
                in_flight.clear()
            if isinstance(op, Load) and is_shared(op.result) and op.attrs.get("fill") == "cp.async":
                tile = self.unique(op.result.hint, "tile")  # no ring: the consumers' own copies
                self.items.append(FillUse(tile, not fill_in_flight(op)))
                if fill_in_flight(op):
                    in_flight[op.result] = tile
                else:  # its cp.async.wait_all and meeting land every copy in flight too
                    in_flight.clear()
            elif isinstance(op, Load) and is_shared(op.result):
                self.one_shot(op)
            elif isinstance(op, For) and shared_loads(op.regions[0]):
                self.loop(op)
            elif isinstance(op, MMA_OPS):  # a product of tiles loaded once per tile
                rings = tuple(dict.fromkeys(self.ring_of[v] for v in op.operands if v in self.ring_of))
                if rings:
                    self.items.append(TileProduct(rings))
            elif isinstance(op, Store) and "smem" in op.attrs:
                self.staging(op)
                item = self.store_item(op)
                if item is not None:
                    self.items.append(item)
            elif any(isinstance(inner, For) and shared_loads(inner.regions[0])
                     for inner in op.walk() if inner is not op):
                raise PassError("a loop that loads shared tiles must sit directly in the block "
                                "body for the producer to follow it", op.span)
            if op in scratch:
                self.items.append(ScratchUse(scratch[op]))
                self.scratch_ops.append(op)
            ctas = exchange_ctas(op)
            if ctas:  # a row reduction the CTAs of a cluster exchange (its step stands for the op)
                self.items.append(ExchangeUse(op.NAME, ctas))
                self.scratch_ops.append(op)
        if in_flight:  # nothing leaves the tile with its copies in flight
            self.items.append(FillWaitUse(tuple(in_flight.values())))
        self.stream_k_units(blocks)
        # split-K gives each cluster one tile: its ring is reused for the partials
        persistent = blocks.attrs.get("schedule") == "persistent" and self.split_k == 1
        early = self.early = self.early_rings() if persistent else ()
        proto = standard_protocol(self.kernel.name, self.consumers, persistent, tuple(self.rings),
                                  tuple(self.items), pingpong=self.pingpong, cluster=self.pair.ctas,
                                  early=early, producer=bool(self.kernel.attrs.get("producer", True)))
        for ring in self.own:
            proto = replace(proto, consumer=own_trips_consumer(proto.consumer, ring))
        if self.turn_loops:  # the chain of turns opened and closed once per CTA
            proto = replace(proto, consumer=with_turns(proto.consumer))
        return proto

    def scratch_uses(self, blocks) -> dict:
        """The block body's ops whose cross-warp reductions meet around the consumers' shared
        scratch (codegen/hopper/lower_layout.scratch_uses: the rule the lowering places the
        scratch by) -> those reductions' names; each gets a ``ScratchSync`` step. Not in a ring
        loop (its trips' steps anchor to products) nor with ping-pong consumers (one program per
        pipelined loop): there the barrier stays outside the protocol, which the PTX lint reports."""
        if self.pingpong:
            return {}
        from ..codegen.hopper.lower_layout import scratch_uses
        return {op: names for op, names in scratch_uses(self.kernel, blocks.regions[0]).items()
                if not (isinstance(op, For) and shared_loads(op.regions[0]))}

    def own_trips(self, op: For, name: str, split: bool, writes: list) -> None:
        """A loop the own-trips pass marked gets per-consumer trips (``own_trips_consumer``) where
        the protocol has them: cooperative consumers on one ring, no consumer-written tile, no
        split-K, stream-K or multicast pair."""
        why = ("ping-pong consumers compute whole tiles" if self.pingpong else
               "the loop's second product has a ring of its own (split rings)" if split else
               "the consumers write a shared tile in the loop (they meet every trip)" if writes else
               "split-K" if self.split_k > 1 else
               "stream-K" if int(self.kernel.attrs.get("stream_k", 0) or 0) > 0 else
               "a multicast pair" if self.pair.ctas > 1 else None)
        if why is None:
            self.own[name] = op
        else:
            self.own_refused[op] = why

    def stream_k_units(self, blocks) -> None:
        """Stream-K where the grid pass asks for it and the tile is one ring loop with products,
        in a persistent grid of whole tiles (no split-K, no ping-pong), nothing else in the tile
        taking a protocol step: its fix-up (``StreamKFixup``) is then the tile's last consumer
        step. Otherwise none, and the general lowering refuses the option (saying why)."""
        if int(self.kernel.attrs.get("stream_k", 0) or 0) <= 0 or self.split_k > 1 or self.pingpong:
            return
        if self.pair.ctas > 1:  # the pair's walk decides the CTA's tiles (lower_stream_k.not_applied)
            return
        others = [i for i in self.items if not isinstance(i, StoreItem)]  # staged stores end the tile
        if blocks.attrs.get("schedule") != "persistent" or len(others) != 1:
            return
        (item,) = others
        if not isinstance(item, LoopPlan) or not item.mmas or item.writes or item.stores:
            return
        loop = next(op for op, name in self.loop_of.items() if name == item.ring)
        self.items.insert(self.items.index(item) + 1, StreamKUnits(item.ring))
        self.stream_k_loop = loop

    def store_item(self, op: Store) -> StoreItem | None:
        """The protocol's epilogue of a store the epilogue pass staged (its ``epilogue`` attribute;
        none without that pass, or for split-K, where each CTA stores its part from registers)."""
        if op.attrs.get("epilogue") not in ("staged", "deferred") or self.split_k > 1:
            return None
        from .epilogue import staging_rounds
        name = self.unique(op.operands[0].hint, "store")
        self.store_of[name] = op
        return StoreItem(name, staging_rounds(op.operands[1].type.cols, op.attrs["epilogue_cols"]),
                         deferred=op.attrs["epilogue"] == "deferred")

    def early_rings(self) -> tuple[str, ...]:
        """The one-slot tiles loaded once per tile released right after the last product reading
        them (``release`` early or auto): those no op but a product reads, so nothing reads them
        after the last product (auto and early alike; ``release=end``: none)."""
        if not self.kernel.attrs.get("early_release"):
            return ()
        out = []
        for value, name in self.ring_of.items():
            ring = next(r for r in self.rings if r.name == name)
            if not ring.one_shot or ring.stages != 1 or name in self.hosts:
                continue  # (a slot holding a staging: released after its TMA store read it)
            readers = [op for op in self.kernel.walk() if value in op.operands]
            if readers and all(isinstance(op, MMA_OPS) for op in readers):
                out.append(name)
            else:
                self.kept_to_end.append(name)
        return tuple(out)

    def one_shot(self, op: Load) -> None:
        name = self.unique(op.result.hint, "tile")
        t = op.result.type
        # ``slots`` (the pipeline pass): 2 where the next tile's copy loads while this tile runs
        self.rings.append(Ring(name, op.attrs.get("slots", 1), (RingLoad(name, t.nbytes),), t.nbytes,
                               self.consumers, one_shot=True, where=_where(op)))
        self.items.append(OneShotUse(name))
        self.ring_of[op.result] = name
        self.load_of[op] = (name, name)
        if "smem" in op.attrs:
            self.extent[name] = (op.attrs["smem"], op.attrs["smem"] + t.nbytes)

    def loop(self, op: For) -> None:
        if "stages" not in op.attrs:
            raise PassError("mbarrier: this loop has no stage count; run the pipeline pass first",
                            op.span)
        name = self.unique(op.regions[0].args[0].hint, "loop")
        loads = shared_loads(op.regions[0])
        groups = self.split_groups(op, loads)
        if groups is None:
            groups = (loads,)
        names = [name] + [self.unique(f"{name}_{g[0].result.hint or 'b'}", f"{name}_b") for g in groups[1:]]
        stages = op.attrs["stages"]
        for ring_name, group in zip(names, groups):
            ring_loads = tuple(RingLoad(ld.result.hint or f"load{i}", ld.result.type.nbytes)
                               for i, ld in enumerate(group))
            expect = (op.attrs.get("stage_bytes", stage_data_bytes(op)) if len(groups) == 1
                      else sum(ld.result.type.nbytes for ld in group))
            shared = self.pair.ctas if any(ld in self.pair.loads for ld in group) else 1
            self.rings.append(Ring(ring_name, stages, ring_loads, expect, self.readers,
                                   where=_where(op), cluster=shared))
            for ld, ring_load in zip(group, ring_loads):
                self.ring_of[ld.result] = ring_name
                self.load_of[ld] = (ring_name, ring_load.name)
            self.ring_loop[ring_name] = op
            if all("smem" in ld.attrs for ld in loads):
                start = min(ld.attrs["smem"] for ld in loads)
                self.extent[ring_name] = (start, start + stages * stage_stride(op))
        self.loop_of[op] = name
        if len(names) > 1:
            base = self.kernel.attrs.get("split_bars", self.kernel.attrs.get("smem", 0))
            base += 16 * stages * sum(1 for other in self.split_bars.values())  # (one split loop)
            self.split_bars[names[1]] = base
        reads, tile_reads, writes, stores, copies = [], [], [], [], []
        for inner in op.walk():
            if isinstance(inner, Store) and inner.parent is op.regions[0]:
                item = self.store_item(inner)
                if item is not None:
                    stores.append((len(reads) + len(writes) + len(copies), item))
            elif is_tile_write(inner):
                tile = self.unique(inner.result.hint, "tile")
                self.written[inner] = tile
                writes.append((len(reads), tile))
            elif is_ring_read(inner) and inner.parent is op.regions[0] and inner.operands[0] in self.ring_of:
                # a tile of a ring read into registers (lower_tile_read): a Read step of the trip
                copies.append((len(reads) + len(writes) + len(copies), (self.ring_of[inner.operands[0]],)))
            elif isinstance(inner, (*MMA_OPS, Copy)):
                rings = tuple(dict.fromkeys(self.ring_of[v] for v in inner.operands if v in self.ring_of))
                tiles = tuple(dict.fromkeys(self.written[v.owner] for v in inner.operands
                                            if v.owner in self.written))
                if rings or tiles:
                    reads.append(rings)
                    tile_reads.append(tiles)
        if self.pingpong:  # consumers on alternate tiles cannot meet: the lowering refuses it
            writes = []
        if op.attrs.get("own_trips"):
            self.own_trips(op, name, len(names) > 1, writes)
        level2 = not writes and not stores and self.level2_allowed(op, split=len(names) > 1)
        turns = level2 and self.consumers >= 2 and not self.pingpong and not op.attrs.get("own_trips") \
            and name not in self.own and len(reads) == 2 and self.turns_for(op)
        held = (not level2 and not writes and not stores and len(reads) == 1 and op.attrs.get("stages", 1) >= 2
                and not op.attrs.get("own_trips") and self.split_k == 1
                and int(self.kernel.attrs.get("stream_k", 0) or 0) <= 0 and self.held_fits(op))
        # (held_loop needs a previous stage to keep; own trips, split-K and stream-K keep their drain)
        self.items.append(LoopPlan(name, tuple(reads), pipelined=level2, in_flight=in_flight(op), held=held,
                                   split=names[1] if len(names) > 1 and level2 else "",
                                   writes=tuple(writes), tile_reads=tuple(tile_reads) if writes else (),
                                   stores=tuple(stores), turns=turns, copies=tuple(copies)))
        if level2:
            self.level2.append(op)
        if held:
            self.held.append(op)
        if turns:
            self.turn_loops.append(op)
        if self.split_k > 1 and reads and self.split_loop is None:
            self.items.append(SplitReduce(name, self.split_k))
            self.split_loop = op

    def turns_for(self, op: For) -> bool:
        """The option ``turns``: on, off, or auto: on where two consumers share a level-2 loop
        whose trip count grows with a block index (causal attention: ``TURNS_MEASURED``)."""
        if self.turns in ("on", "off"):
            return self.turns == "on"
        indices = set(block_loop(self.kernel).regions[0].args)
        return self.consumers == 2 and any(depends_on(v, indices) for v in op.operands[:3])

    def level2_allowed(self, op: For, split: bool) -> bool:
        """Level 2 where it fits, with 3 stages or a ring of its own for the second product."""
        stages = op.attrs.get("stages", 0)
        return self.overlap and (stages >= LEVEL2_STAGES or (split and stages >= 2)) and \
            self.level2_fits(op)

    def split_groups(self, op: For, loads: list[Load]):
        """(the first product's loads, the second product's) when the option asks for split
        rings, the loop is a level-2 candidate with fewer than LEVEL2_STAGES stages, and each
        load is read by exactly one of its two products; else None."""
        if not self.split or not self.overlap or op.attrs.get("stages", 0) >= LEVEL2_STAGES or \
                op.attrs.get("stages", 0) < 2:
            return None
        parts = pipelined(op)
        if parts is None or ring_reads(op):  # (split_loop releases the first ring before the
            return None                      # register work, and waits for the second at its end)
        first, second, _ = parts
        a = [ld for ld in loads if ld.result in first.operands]
        b = [ld for ld in loads if ld.result in second.operands]
        if not a or not b or len(a) + len(b) != len(loads) or set(a) & set(b):
            return None
        if not self.level2_fits(op):
            return None
        return a, b

    def staging(self, op: Store) -> None:
        if self.split_k > 1:  # split-K stores each CTA's part from registers: nothing is staged
            return
        size, _ = staging_sizes(op, self.consumers, op.attrs.get("staging_cols"),
                                self.pingpong)[op.attrs.get("staging", "tile")]
        lo, hi = op.attrs["smem"], op.attrs["smem"] + size
        over = tuple(name for name, (a, b) in self.extent.items() if a < hi and lo < b)
        host = staging_host(self.kernel, op)
        if host is not None and op.attrs.get("epilogue") not in ("staged", "deferred"):
            return  # stored from registers: nothing is written in the slot
        persistent = block_loop(self.kernel).attrs.get("schedule") == "persistent"
        if over:
            self.items.append(StagingReuse(over, read=host is not None and persistent))
            self.reused.append(op)
            if host is not None and persistent:
                self.hosts[self.ring_of[host.result]] = op


def exchange_ctas(op: Op) -> int:
    """k where ``op`` is a row reduction whose partials the k > 1 CTAs of a cluster push to each
    other (codegen/emit_cluster.py: a ``ClusterExchange`` step stands for it), else 0."""
    from ..codegen.emit_cluster import push_ctas
    return push_ctas(op)


def is_tile_write(op: Op) -> bool:
    """A register tile copied into a shared tile (``s: st<..> = cvt<bf16>(state)``): the consumers
    write it for a later wgmma (``sync_protocol.tile_write``)."""
    return isinstance(op, Copy) and is_shared(op.result) and not is_shared(op.operands[0])


def is_ring_read(op: Op) -> bool:
    """A shared tile the producer loads (by TMA, into a ring) copied into a register tile
    (``r: rt<f32>[..] = s``; codegen/hopper/lower_tile_read.py): in a ring loop's trip, the
    protocol's ``Read`` step (``sync_protocol.place_read``)."""
    return isinstance(op, Copy) and is_shared(op.operands[0]) and not is_shared(op.result) and \
        isinstance(op.operands[0].owner, Load) and op.operands[0].owner.attrs.get("fill") != "cp.async"


def ring_reads(loop: For) -> list[Op]:
    """The copies of ring tiles into registers directly in ``loop``'s body, in order (each one a
    ``Read`` step of the trip: interleave.trip_anchor)."""
    return [op for op in loop.regions[0].ops if is_ring_read(op)]


def pipelined(loop: For):
    """Level 2: (first product, second product, the loop argument the second accumulates) when
    the trip has two products, the first reading shared tiles, the second reading a register A
    computed from the first's result and accumulating into a loop-carried tile that nothing else
    reads on the way; else None. Then the second product can run one trip behind, under the
    next trip's register work (sync_protocol.pipelined_loop)."""
    from .hopper import depends_on
    body = loop.regions[0]
    mmas = [op for op in body.ops if isinstance(op, MMA_OPS)]
    term = body.terminator
    if len(mmas) != 2 or not isinstance(term, Yield):
        return None
    first, second = mmas
    if not is_shared(first.operands[0]) or is_shared(second.operands[0]) or len(second.operands) < 3:
        return None
    if not depends_on(second.operands[0], {first.result}):
        return None
    if list(term.operands).count(second.result) != 1:
        return None
    arg = body.args[1 + list(term.operands).index(second.result)]
    chain = {arg}
    for op in body.ops:  # the ops reading the carried tile, up to the second product
        if op is second:
            break
        if any(x in chain for x in op.operands):
            chain.update(op.results)
    if depends_on(second.operands[0], chain) or depends_on(first.result, chain):
        return None
    if second.operands[2] not in chain:
        return None
    for op in body.ops:
        if op is second or op is term:
            continue
        if second.result in op.operands:
            return None
        if any(x in chain for x in op.operands) and not any(depends_on(second.operands[2], set(op.results))
                                                            for _ in (0,)):
            return None  # something else reads the carried tile's chain
    return first, second, arg


def level2_need(loop: For, share: int) -> int:
    """Registers per consumer thread a level-2 trip keeps live at once: the first product's f32
    result, the second product's packed 16-bit register A (the previous trip's, read by the
    wgmma in flight), its f32 accumulator, and 32 for addresses and loop state (``share``: the
    threads splitting each tile's rows)."""
    first, second, _ = pipelined(loop)
    s, a, o = first.result.type, second.operands[0].type, second.result.type
    return (s.rows * s.cols + a.rows * a.cols * a.dtype.nbytes // 4 + o.rows * o.cols) // share + 32


def level2_needs(kernel: Kernel) -> list[tuple[For, int]]:
    """(loop, ``level2_need``) of each loop the mbarrier pass software-pipelines (reg-budget keeps
    the producer at 24 where a need does not fit beside one of 40)."""
    if not kernel.attrs.get("overlap", True):
        return []
    builder = _Builder(kernel)
    return [(loop, level2_need(loop, builder.share)) for loop in pipelined_loops(kernel)
            if builder.level2_allowed(loop, split=builder.split_groups(loop, shared_loads(loop.regions[0]))
                                      is not None)]


HOLD_MEASURED = ("H200, 2026-11-28, same runs against hold=off, identical binaries within 0.5%: ping-pong "
                 "consumers with an f32 A 1.15x; cooperative ones at 256 columns with an f32 A 1.08x, a "
                 "dequantized A 1.01-1.03x, RMSNorm's sums beside an RS product 1.01x; at 128 columns the "
                 "last 0.89x (benchmarks/results/2026-11-28-nvidia-h200-s19-held-aa.json, "
                 "...-s19-widen-probe-2.json)")
"""What ``hold`` was measured to do."""
HOLD_MIN_COLS = 256
"""Cooperative consumers hold a register-A product (``hold=auto``) from this width of its
accumulator: a narrower one's group is short beside the trip's register work, and the other
consumer's groups already fill the tensor cores (``HOLD_MEASURED``)."""


def in_flight(loop: For) -> bool:
    """Whether the trip's last product can stay in flight into the next trip: its A operand is a
    shared tile (a register A must not change while the wgmma reads it; ``held_a`` keeps one in
    flight by copying it), its result is read only by the yield, and the loop argument it is
    carried into only as the accumulator of that same product (``carried_only``)."""
    body = loop.regions[0]
    mmas = [op for op in body.ops if isinstance(op, MMA_OPS)]
    if not mmas:
        return True
    return is_shared(mmas[-1].operands[0]) and carried_only(loop, mmas[-1])


def carried_only(loop: For, last: Op) -> bool:
    """``last``'s result is read only by the yield, and the loop argument it is carried into only
    as the accumulator of ``last`` itself (so nothing but the next wgmma touches the registers a
    wgmma still writes)."""
    body = loop.regions[0]
    term = body.terminator
    if not isinstance(term, Yield) or len(last.operands) < 3:
        return False
    uses = [op for op in loop.walk() if op is not loop and last.result in op.operands]
    if uses != [term] or term.operands.count(last.result) != 1:
        return False
    arg = body.args[1 + list(term.operands).index(last.result)]
    readers = [op for op in loop.walk() if op is not loop and arg in op.operands]
    return readers == [last] and last.operands[2] is arg and list(last.operands).count(arg) == 1


def held_a(loop: For) -> Op | None:
    """The trip's one product when it reads a register A (a 16-bit register tile the trip makes,
    e.g. ``cvt<bf16>(mul_col(ar, s))`` of a ring tile read into registers) and is carried as
    ``in_flight`` asks: then its group can stay in flight into the next trip, its A copied into
    registers of its own when it is issued (``sync_protocol.held_loop``). Else None."""
    mmas = [op for op in loop.regions[0].ops if isinstance(op, MMA_OPS)]
    if len(mmas) != 1 or is_shared(mmas[0].operands[0]):
        return None
    a = mmas[0].operands[0].type
    if not isinstance(a, TileType) or a.dtype.bits != 16 or not carried_only(loop, mmas[0]):
        return None
    return mmas[0]


@dataclass
class Schedule:
    """The protocol of an annotated kernel and where its names live in the IR: each TMA load's IR
    op, each ring's loop. The emitter finds them through these maps, and follows ``protocol``
    only where the async-schedule pass could not write the schedule as IR (elsewhere it walks
    the protocol read back from that IR, which equals this one and is the one checked)."""

    protocol: Protocol
    load_of: dict
    """IR load -> (ring, load name)."""
    loop_of: dict
    """Pipelined IR loop -> its ring."""
    level2: list = field(default_factory=list)
    """The loops whose second product runs one trip behind (LoopPlan.pipelined)."""
    staged_over_rings: list = field(default_factory=list)
    """The stores whose staging tile goes over a ring (each StagingReuse item's), in order."""
    ring_loop: dict = field(default_factory=dict)
    """Every loop ring (a split-off second ring too) -> its IR loop (stage stride, trips)."""
    split_bars: dict = field(default_factory=dict)
    """A split-off ring -> the shared offset of its full[s]/empty[s] (after smem-plan's map)."""
    split: int = 1
    """Split-K: the CTAs of a cluster sharing ``split_loop``'s trips (1: no split)."""
    split_loop: object = None
    written: dict = field(default_factory=dict)
    """IR copy of a register tile into a shared tile -> the protocol's name of that tile."""
    stream_k_loop: object = None
    """Stream-K: the ring loop whose tiles' trips the CTAs share in units (None: no stream-K)."""
    pair: object = None
    """Multicast (passes/pairs.py): ``pair.ctas`` CTAs per cluster (1: none) and the loads they
    share (IR load -> how the box halves)."""
    store_of: dict = field(default_factory=dict)
    """The protocol's name of each staged store (``StagedStore``, ``HoldStore``) -> the IR store."""
    scratch_ops: list = field(default_factory=list)
    """The block body's ops the ``ScratchSync`` steps stand for, in order (the k-th step, the k-th)."""


def schedule_of(kernel: Kernel) -> Schedule:
    """``protocol_of`` with the IR ops its rings and loads come from."""
    builder = _Builder(kernel, bool(kernel.attrs.get("overlap", True)))
    proto = builder.build()
    return Schedule(proto, dict(builder.load_of), dict(builder.loop_of), list(builder.level2),
                    list(builder.reused), dict(builder.ring_loop), dict(builder.split_bars),
                    builder.split_k if builder.split_loop is not None else 1, builder.split_loop,
                    dict(builder.written), builder.stream_k_loop, builder.pair, dict(builder.store_of),
                    list(builder.scratch_ops))


def _where(op: Op) -> str:
    return op.span.location() if op.span is not None else ""


def protocol_of(kernel: Kernel) -> Protocol:
    """The synchronization protocol of an annotated kernel (after warp-spec, pipeline, smem-plan)."""
    return _Builder(kernel, bool(kernel.attrs.get("overlap", True))).build()


@register_pass
@dataclass(frozen=True)
class Mbarrier(Pass):
    """The ``mbarrier`` pass: full/empty mbarrier rings, one-shot barriers, the producer/consumer
    protocol (checked as the async-schedule pass writes it: module docstring)."""

    name = "mbarrier"
    summary = "full/empty mbarrier rings, one-shot barriers, the producer/consumer protocol"
    target_specific = True
    overlap: str = "auto"
    """Level-2 software pipelining of a trip's second product (auto: where it applies; off)."""
    split: str = "auto"
    """auto: a level-2 loop with fewer than 3 stages gets a ring of its own for the second
    product's tiles (``sync_protocol.split_loop``), so level 2 keeps its refill distance; off.
    Measured (H200, 2026-11-27, examples/attention.tk D=128, 176-key blocks, 2 stages, same
    run, ratio to the template): 0.79-0.87x split, 0.71-0.75x with one ring and level 1
    (``benchmarks/results/2026-11-27-nvidia-h200-s10-attn-3-split.json``)."""

    turns: str = "auto"
    """Ping-pong turns in level-2 loops (FlashAttention-3's warpgroup scheduling barriers,
    ``LoopPlan.turns``), where two or more cooperative consumers run the same trips (no
    per-consumer trips, no ping-pong tiles): on; off; auto: where two consumers share a loop whose
    trip count grows with a block index (``TURNS_MEASURED``)."""

    release: str = "auto"
    """When a persistent tile's one-slot tiles loaded once per tile are released: early (right
    after the last product reading them, where only products read them: the producer loads the
    next tile's copy under this tile's epilogue), end (of the tile), or auto (early where the tiles
    do equal work, end where the launch picks the grid (``by_trips``: measured slower there))."""

    pack: str = "auto"
    """Where a level-2 trip packs its second product's register A (cvt<bf16>(p)): auto, after the
    ops that rescale the carried tile (mul_row(o, alpha)) but first where that tile is at most 64
    columns wide and the trips are the same for every tile (``narrow_uniform``), or first, before
    them (as until session 16). The two are independent, and ptxas keeps the order it is given: packed first, it
    alternated the packs with the rescale's FMULs (``PACK_MEASURED``)."""

    hold: str = "auto"
    """A trip whose one product reads a register A it makes (a dequantized or converted ring
    tile): on, its group stays in flight into the next trip, which makes its A under it and
    retires it just before issuing its own (``sync_protocol.held_loop``), where the copy of A
    fits the consumers' registers; off, every trip drains its group before the next starts;
    auto, on where one consumer at a time runs its products (ping-pong, or one consumer: a drained
    trip leaves the tensor cores idle for its register work there) and for cooperative consumers
    whose product is ``HOLD_MIN_COLS`` wide; narrower cooperative groups fill each other's gaps
    and the held copy only adds instructions (``HOLD_MEASURED``)."""

    def run(self, kernel: Kernel, ctx: PassContext) -> Kernel:
        if self.hold not in ("auto", "on", "off"):
            raise PassError(f"mbarrier: hold must be auto, on or off, got '{self.hold}'")
        if self.hold != "auto":
            kernel.attrs["hold"] = self.hold
        if self.pack not in ("auto", "first"):
            raise PassError(f"mbarrier: pack must be auto or first, got '{self.pack}'")
        if self.release not in ("auto", "end", "early"):
            raise PassError(f"mbarrier: release must be auto, end or early, got '{self.release}'")
        by_trips = "by_trips" in block_loop(kernel).attrs  # the launch may give a CTA one tile
        persistent_once = block_loop(kernel).attrs.get("schedule") == "persistent" and one_shot_loads(kernel)
        if self.release == "early" or (self.release == "auto" and not by_trips and persistent_once):
            kernel.attrs["early_release"] = True  # (auto: only where there is a next tile's copy)
        if self.overlap not in ("auto", "off"):
            raise PassError(f"mbarrier: overlap must be auto or off, got '{self.overlap}'")
        if self.overlap == "off":
            kernel.attrs["overlap"] = False
        if self.split not in ("auto", "on", "off"):
            raise PassError(f"mbarrier: split must be auto or off, got '{self.split}'")
        if self.split == "off":
            kernel.attrs["split_rings"] = False
        if self.turns not in ("auto", "on", "off"):
            raise PassError(f"mbarrier: turns must be auto, on or off, got '{self.turns}'")
        if self.turns != "auto":
            kernel.attrs["turns"] = self.turns
        from .pairs import asked_for
        if ctx.options.unaligned_rows and asked_for(kernel) > 1:
            kernel.attrs["unaligned_rows"] = True  # the pair is not taken there (passes/pairs.py)
        builder = _Builder(kernel, self.overlap != "off")
        proto = builder.build()
        if builder.split_bars and "split_bars" not in kernel.attrs:
            kernel.attrs["split_bars"] = kernel.attrs["smem"]  # right after smem-plan's map
            for ring, at in builder.split_bars.items():
                end = at + 16 * proto.ring(ring).stages
                ctx.decide(f"ring {ring}", "a ring of its own for the second product's tiles",
                           f"level 2 holds those tiles a trip longer than the first product's: with "
                           f"{proto.ring(ring).stages} stages one shared ring would refill half a trip "
                           f"ahead; its full/empty barriers at bytes {at:,} .. {end - 1:,}, after "
                           f"smem-plan's map (the kernel's shared memory: {end:,} B)")
        for name in (r.name for r in proto.rings if r.one_shot and proto.persistent and r.stages == 1):
            if name in builder.hosts:
                store = builder.hosts[name]
                where = f" at {store.span.location()}" if store.span else ""
                ctx.decide(f"ring {name}", "released at the end of the tile, after the staged store's reads",
                           f"the staging of the store{where} lives in its one slot (pipeline{{staging=slot}}): "
                           "every consumer meets before writing it (no wgmma still reads the tile), and "
                           "each releases the slot only after its TMA-issuing thread waited for the "
                           "stores' reads (staging_read: cp.async.bulk.wait_group.read 0), so the "
                           "producer's next copy never lands under a store"
                           + ("; release=early does not apply to it" if self.release == "early" else
                              "; an early release does not apply to it" if kernel.attrs.get("early_release") else ""))
            elif name in builder.early:
                ctx.decide(f"ring {name}", "released right after the last product reading it",
                           "mbarrier{release=early}" if self.release == "early" else
                           "a one-slot tile loaded once per tile in a persistent loop over tiles of "
                           "equal work that only products read: once they drained (wait_group 0) "
                           "nothing reads it, so the producer loads the next tile's copy under this "
                           "tile's epilogue (measured, H200, 2026-11-27, examples/attention.tk D = 128 "
                           "against its template, same run, N = 1k..16k: at the end of the tile "
                           "0.94/0.98/1.00/1.01/1.02, early 1.02/1.03/1.03/1.03/1.04; option "
                           "release=end keeps it to the tile's end)")
            elif name in builder.kept_to_end:
                ctx.decide(f"ring {name}", "released at the end of the tile",
                           "something other than a product reads it, possibly after the last product")
            elif by_trips and self.release == "auto":
                ctx.decide(f"ring {name}", "released at the end of the tile",
                           "the launch picks the grid (by_trips): past the trip bound each CTA runs "
                           "one tile and there is no next copy to load early (measured, H200, "
                           "2026-11-27, causal examples/attention.tk D = 128 against its template, "
                           "same run, N = 1k..16k: early 1.10/1.00/0.98/0.94/0.98, at the end "
                           "1.04/1.03/1.00/0.96/1.01; option release=early). Where the longest loop "
                           "is short enough for a persistent grid, the launch takes this kernel "
                           "compiled with release=early instead (tkjit/trip_dispatch.py)")
        for loop in builder.turn_loops:
            why = "mbarrier{turns=on}" if self.turns == "on" else (
                f"two consumers share a level-2 loop whose trip count grows with a block index: "
                f"{TURNS_MEASURED}")
            ctx.decide(f"loop at {_where(loop)}", "ping-pong turns on the tensor cores",
                       f"{why}. Each trip, a consumer waits for its turn (named barrier 6 + c) before "
                       f"issuing its two products and hands it to the next right after, so one "
                       f"consumer's softmax runs under another's wgmmas; the last of the "
                       f"{builder.consumers} consumers opens the chain, consumer 0 closes it")
        for loop in builder.held:
            why = ("mbarrier{hold=on}" if kernel.attrs.get("hold") == "on" else
                   "one consumer at a time runs its products, so a drained trip would leave the tensor "
                   "cores idle for its register work (mbarrier{hold=off}: drained every trip)"
                   if builder.pingpong or builder.consumers == 1 else
                   f"its cooperative consumers' products are {HOLD_MIN_COLS} columns wide, long beside the "
                   "trip's register work (mbarrier{hold=off}: drained every trip)")
            ctx.decide(f"loop at {_where(loop)}", "the register-A product stays in flight",
                       "the trip's one product reads a register A the trip makes: the next trip reads "
                       "its ring tile and makes its A under this trip's product, then retires it "
                       "(wait_group 0), releases its stage, copies the A into the product's own "
                       f"registers and issues; {why}. {HOLD_MEASURED}")
        for loop, why in builder.not_held.items():
            ctx.decide(f"loop at {_where(loop)}", "the register-A product is drained every trip",
                       f"its A is made in registers each trip and the next trip's must not overwrite it "
                       f"while the product runs; it is not held in flight because {why}. {HOLD_MEASURED}")
        for loop in builder.level2:
            first = self.pack == "first" or (self.pack == "auto" and narrow_uniform(kernel, loop))
            if first:
                loop.attrs["pack"] = "first"  # codegen/hopper/interleave.level2_parts
            where = ("mbarrier{pack=first}: packed before the carried tile's rescale" if self.pack == "first"
                     else f"before the carried tile's rescale: {PACK_FIRST_MEASURED}" if first
                     else f"after the carried tile's rescale ({PACK_MEASURED})")
            ctx.decide(f"loop at {_where(loop)}", "level 2: the second product runs one trip behind",
                       "the trip's second product reads registers made from the first's result and "
                       "accumulates into a carried tile: trip j issues its first product, then trip "
                       "j-1's second, and runs its register work while the second one computes "
                       "(FlashAttention-3's overlap); the previous stage is released once both are "
                       f"done. Its register A is packed for the next trip {where}")
        for ring, loop in builder.own.items():
            ctx.decide(f"loop at {_where(loop)}", "per-consumer trip counts in the protocol",
                       f"the own-trips pass marked it: each consumer loops over its own trips of ring "
                       f"{ring} (drain and release included), then takes the tile's later trips idle "
                       "(wait for the stage's fill, release it, advance), so every fill is released by "
                       f"all {builder.consumers} consumers and the producer loads the tile's trips")
        for loop, why in builder.own_refused.items():
            ctx.decide(f"loop at {_where(loop)}", "every consumer runs the tile's trips",
                       f"the own-trips pass marked it, but the protocol has no per-consumer trips with {why}")
        for ring in proto.rings:
            ctx.decide(f"ring {ring.name}" + (f" ({ring.where})" if ring.where else ""),
                       _ring_decision(ring), _ring_reason(ring, proto, builder.early), stages=ring.stages,
                       expect_tx=ring.expect_tx, empty_arrivals=ring.empty_arrivals)
        for item in (i for i in builder.items if isinstance(i, StagingReuse)):
            ctx.decide(f"epilogue over ring {', '.join(item.rings)}", "consumers meet on a named "
                       f"barrier ({proto.consumers} x 128 threads) before writing the staging tile",
                       "smem-plan put the staging tile over the ring; a consumer may still have "
                       "wgmmas reading it until every consumer has drained its own")
        for copy, tile in builder.written.items():
            ctx.decide(f"tile %{tile} ({_where(copy)})", "written by the consumers for a wgmma: named "
                       f"barrier, st.shared + fence.proxy.async, named barrier ({proto.consumers} x 128 threads)",
                       "no TMA fills it: the consumers store their rows of the register tile in the "
                       "swizzled layout the layout pass chose, fence the writes for the async proxy "
                       "(wgmma reads through it), and meet before any wgmma reads them; they meet "
                       "before writing too, each having drained its wgmmas (the trip drains every "
                       "group), so no wgmma still reads the previous contents; level 2 is not "
                       "taken for this loop", tile=tile)
        if builder.split_loop is not None:
            ring = builder.loop_of[builder.split_loop]
            ctx.decide(f"loop at {_where(builder.split_loop)}", f"split-K over a cluster of {builder.split_k} CTAs",
                       f"the block loop's split = {builder.split_k}: CTA r of each tile's cluster runs trips "
                       f"[r*ceil(T/{builder.split_k}), (r+1)*ceil(T/{builder.split_k})) of ring {ring}'s loop; after "
                       "it every consumer meets at a cluster barrier (its ring drained), sends each peer "
                       "that peer's part of its partial accumulators through distributed shared memory "
                       f"over the peer's ring {ring}, meets again, and adds the partials of its own part, "
                       "which it stores from registers (a staging tile smem-plan planned for the "
                       "tile's store is left unused)", split=builder.split_k, ring=ring)
        if builder.stream_k_loop is not None:
            ring = builder.loop_of[builder.stream_k_loop]
            ctx.decide(f"loop at {_where(builder.stream_k_loop)}", "stream-K: the last wave's trips over every CTA",
                       "asked for by the grid pass (stream_k = 1): each tile's ring loop runs one unit of "
                       f"its trips; the consumers' last step of the tile is the fix-up after ring {ring}'s "
                       "drain (a contribution stores its partial to the module's workspace and sets its "
                       "flags, ending the tile; the unit starting the tile adds the later CTAs' partials), "
                       "checked as a read of the accumulators with no wgmma group in flight; the flags "
                       "between CTAs are the launch-order model of tail_split.check_walk", ring=ring)
        elif int(kernel.attrs.get("stream_k", 0) or 0) > 0:
            ctx.decide(f"@{kernel.name}", "no stream-K fix-up in the protocol",
                       "stream_k = 1 needs a persistent grid of whole tiles (no split-K, no ping-pong, no "
                       "multicast pair) "
                       "whose tile is one ring loop with products and nothing else taking a protocol "
                       "step; the general lowering refuses the option here")
        if builder.pair.asked:
            pair = builder.pair
            ctx.decide("block loop", f"multicast: pairs of CTAs share {len(pair.loads)} load(s)" if pair.ctas > 1
                       else "multicast not taken", pair.why, multicast=pair.ctas,
                       rings=[r.name for r in proto.rings if r.cluster > 1])
        return kernel


def _ring_decision(ring: Ring) -> str:
    if ring.one_shot and ring.stages > 1:
        return (f"one-shot, {ring.stages} slots: full[s] count 1 + expect_tx "
                f"{nbytes(ring.expect_tx)}, empty[s] count {ring.empty_arrivals}")
    if ring.one_shot:
        return (f"one-shot full/empty pair: full count 1 + expect_tx {nbytes(ring.expect_tx)}, "
                f"empty count {ring.empty_arrivals}")
    empty = (f"{ring.empty_arrivals} x {ring.cluster} (every consumer of the pair's {ring.cluster} CTAs)"
             if ring.cluster > 1 else f"{ring.empty_arrivals}")
    return (f"{ring.stages} stages: full[s] count 1 + expect_tx {nbytes(ring.expect_tx)}, "
            f"empty[s] count {empty}")


def _ring_reason(ring: Ring, proto: Protocol, early: tuple[str, ...] = ()) -> str:
    loads = " + ".join(f"{ld.name} {nbytes(ld.nbytes)}" for ld in ring.loads)
    arm = (f"the producer's one arrive.expect_tx arms full with the bytes its TMA loads "
           f"complete ({loads}); each of the {proto.consumers} consumer warpgroups arrives on "
           "empty once no wgmma of its reads the stage")
    if proto.pingpong:  # one reader per fill: the consumer of the tile it was filled for
        arm = arm.replace(f"each of the {proto.consumers} consumer warpgroups arrives",
                          "the one consumer whose tile the fill is for (ping-pong) arrives")
    if ring.one_shot and ring.stages > 1:
        return (f"loaded once per tile into {ring.stages} slots used in turn: {arm}, at the end of "
                "the tile; the producer fills the next tile's slot (waiting on its empty[s] with "
                "parity ph^1) while the consumers read this one's, so the next tile's copy lands "
                "under this tile's work; ph flips when s wraps to 0 and carries on from tile to tile")
    if ring.one_shot:
        when = ("right after the last product reading it drained" if ring.name in early
                else "at the end of the tile")
        return f"loaded once per tile: {arm}, {when}; the phase bit flips every tile"
    from .sync_protocol import Mma, Read, all_steps
    reads = sum(isinstance(st, Read) and ring.name in st.rings for st in all_steps(proto.consumer))
    held = any(isinstance(st, Mma) and st.held and ring.name in st.rings for st in all_steps(proto.consumer))
    read = (f"; the consumers also read a tile of each stage into registers ({reads} ld.shared "
            "step(s) a trip: the copy's Read, after the stage's full wait and before that release, "
            "done before the next step)" if reads else "")
    retire = ("the next trip's wait_group 0, after its register work and before its own wgmma, retires it"
              if held else "wait_group 1 after the next trip's wgmma retires the older ones")
    return (f"{arm} ({retire}){read}; the "
            "producer waits on empty[s] with parity ph^1 (a fresh barrier's preceding phase "
            "counts as complete), consumers on full[s] with ph; ph flips when s wraps to 0 and "
            "carries on from tile to tile")
