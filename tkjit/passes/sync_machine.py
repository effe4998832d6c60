"""The barrier machine the synchronization checker explores: roles, mbarriers, TMA, wgmma groups.

A ``State`` is immutable and hashable; ``Machine.moves(state)`` lists what can happen next and
``Machine.step(state, move)`` does it, raising ``Found`` when the move breaks a rule.

Modelled exactly as PTX §9.7.13.15 says: a barrier has a phase count, pending arrivals and a
signed tx-count; a phase completes when arrivals reach 0 and tx reaches 0, then the arrival
count reloads; ``wait(parity)`` passes while the current phase's parity differs from ``parity``
(so it also passes on a phase two behind -- the aliasing a wrong phase bit falls into). A TMA
load is issued by the producer and lands later, at any moment, in any order (one move each). A
wgmma group reads its stages until a ``wait_group`` retires it.

The loads of one fill land as one move when the ring's expect-tx equals the stage's bytes: the
full phase then completes only when the last of them lands, and a read before that is flagged
whatever landed, so their order is unobservable. When the bytes disagree every load lands on
its own (that order is what makes the phase complete early).

A role's move runs from one wait to the next (or to the end of an epilogue's staging, which
others must be able to observe): a role's other actions only make the next state of the rest of
the CTA *more* permissive the later they happen, and the checks below are made at the earliest
moment, so interleaving inside a move adds no behaviour.

Rules (``Found.kind``): ``overwrite`` (a fill issued into a stage before every consumer released
the previous fill), ``early-read`` (wgmma reads a fill not fully landed: the full phase
completed early), ``wrong-phase`` (a wait passed on an older phase of the same parity),
``release-before-read`` (arrive on empty while a wgmma reading the stage is in flight),
``bad-release`` (releasing a fill this consumer has not waited for, or twice), ``over-arrival``,
``unconsumed`` (a fill some consumer never waited for) and ``in-flight-at-exit`` (both checked
at the end), ``deadlock``, and ``overwrite`` again when an epilogue's staging tile is written
over a ring that is still read or filled.

A ring tile read into registers (``Read``, ld.shared) is checked as a wgmma's read of its stages
(``early-read``, ``overwrite``, ``wrong-phase``), done at once: nothing stays in flight, so no
``wait_group`` retires it; a read of a fill this consumer already released is
``release-before-read``.

Consumer-written tiles (``TileWrite``: a register tile stored to shared memory for a wgmma): each
consumer writes its rows, counted per consumer; a meeting of the consumers (the named barrier
completing) publishes what every consumer had written by then. A wgmma may read the tile only
when every consumer's rows are the ones the reader saw published (``early-read`` when a write is
newer than the last meeting, ``overwrite`` when another consumer already wrote the next
contents), and a consumer may write it only while no wgmma of any consumer reading it is in
flight (``overwrite``).

The staged epilogue (``StagedStore``): each consumer's own staging buffers, its bulk-store groups
and its warps' meetings (``_epilogue``): a write over a buffer a store may still read is an
``overwrite``, a store of a buffer its warps have not all written (no meeting since) an
``early-read``, a bulk store still in flight at the end ``in-flight-at-exit``. A staging written
over a ring's stages (``StagingBegin`` .. ``StagingEnd``) is read by the consumer's TMA stores
issued meanwhile until its issuing thread's wait retires them all (``StoreWait(0)``, ``StagingRead``,
``StoreDrain``): a TMA load into one of those stages before then is an ``overwrite`` (the next
tile's copy of a one-shot tile landing under a store that still reads its slot).

Ping-pong (``Protocol.pingpong``): each consumer runs its own program (the CTA's tiles c, c + N,
...), so each fill has one reader, its *owner* (the consumer of the tile the producer filled it
for): a consumer must read exactly its own fills (``wrong-fill`` when it waits for more of a
stage than it owns; ``wrong-phase``/``overwrite`` when it reads another's), a stage may be
refilled once its owner released it, and at the end each consumer has waited for all of its own.
The turn barriers are named barriers of two warpgroups (the waiter's ``bar.sync`` and the
passer's ``bar.arrive``): one role arriving twice in a phase (``over-arrival``) would complete it
without its partner.
"""
from __future__ import annotations

from dataclasses import dataclass

from .sync_protocol import Protocol
from .sync_unroll import (ACC_READ, ARRIVE, EXPECT, MMA, MMA_WAIT, READ, RELEASE, STAGING_BEGIN, STAGING_END, STAGING_SYNC,
                          STAGING_WRITE, STORE_DRAIN, STORE_WAIT, TILE_WRITE, TMA, TMA_STORE, TURN_ARRIVE, WAIT, Action,
                          Layout, unroll)


class Found(Exception):
    """A broken rule: ``kind``, the stage it concerns (or None) and a sentence saying why."""

    def __init__(self, kind: str, stage: int | None, why: str):
        super().__init__(why)
        self.kind, self.stage, self.why = kind, stage, why
        self.at = ""  # the role and action that broke it, set by Machine.step


@dataclass(frozen=True)
class State:
    pcs: tuple[int, ...]                 # per role: index of its next action
    bars: tuple[int, ...]                # per barrier: completed phases, pending arrivals, tx
    stages: tuple[int, ...]              # per stage: fills, issued-load mask, landed mask, staging users
    inflight: tuple[int, ...]            # TMA loads issued, not landed: see _key
    reads: tuple[int, ...]               # per consumer, per stage: fills acquired, released
    groups: tuple[tuple[tuple[int, ...], ...], ...]  # per consumer: wgmma groups in flight
    written: tuple[int, ...] = ()        # per written tile, per consumer: writes, writes published
    epi: tuple = ()                      # per consumer: (bulk-store groups in flight, free, dirty, published)
    alias: tuple = ()                    # per consumer: (stages its staging is over, stages its stores read)


class _Scratch:
    """A mutable copy of a state while a move runs."""

    def __init__(self, st: State):
        self.pcs = list(st.pcs)
        self.bars = list(st.bars)
        self.stages = list(st.stages)
        self.inflight = list(st.inflight)
        self.reads = list(st.reads)
        self.groups = [list(g) for g in st.groups]
        self.written = list(st.written)
        self.epi = list(st.epi)
        self.alias = list(st.alias)

    def freeze(self) -> State:
        return State(tuple(self.pcs), tuple(self.bars), tuple(self.stages),
                     tuple(sorted(self.inflight)), tuple(self.reads),
                     tuple(tuple(g) for g in self.groups), tuple(self.written), tuple(self.epi),
                     tuple(self.alias))


class Machine:
    def __init__(self, proto: Protocol, case: tuple[int, ...]):
        self.proto, self.case = proto, case
        self.layout = Layout.of(proto)
        self.consumers = proto.consumers
        self.programs: list[list[Action]] = [unroll(proto, proto.producer, case, self.layout)]
        self.pingpong = proto.pingpong
        self.turn_bars = proto.pingpong or proto.turns
        """Named turn barriers (ping-pong tiles or in-loop turns): each consumer runs its own program."""
        if self.turn_bars or any(not isinstance(entry, int) for entry in case):  # per consumer
            self.programs += [unroll(proto, proto.consumer, case, self.layout, c)
                              for c in range(self.consumers)]
        else:
            self.programs += [unroll(proto, proto.consumer, case, self.layout)] * self.consumers
        self.rings = [proto.ring(self.layout.stage_ring[g]) for g in range(self.layout.n_stages)]
        self.owners = self._fill_owners() if self.pingpong else None
        self.seg_end = [self._segments(p) for p in self.programs]
        self.exact = {g for g, r in enumerate(self.rings)
                      if r.expect_tx == r.stage_bytes and r.full_arrivals == 1}

    def _fill_owners(self) -> list[list[int]]:
        """Per stage, the consumer owning each fill in order (fill f is ``owners[g][f - 1]``):
        the consumer of the tile the producer armed it for."""
        owners: list[list[int]] = [[] for _ in range(self.layout.n_stages)]
        for act in self.programs[0]:
            if act.op == EXPECT:
                owners[act.arg // 2].append(act.tile % self.consumers)
        return owners

    def own_fill(self, c: int, g: int, k: int) -> int | None:
        """The fill number consumer c's ``k``-th wait on stage g is for (1-based), None if it
        owns fewer than k fills of the stage."""
        if self.owners is None:
            return k
        mine = [f + 1 for f, owner in enumerate(self.owners[g]) if owner == c]
        return mine[k - 1] if 1 <= k <= len(mine) else None

    @staticmethod
    def _segments(program: list[Action]) -> list[int]:
        """For each pc, where the move starting there ends (the next wait after it)."""
        ends, nxt = [0] * (len(program) + 1), len(program)
        ends[-1] = nxt
        for pc in range(len(program) - 1, -1, -1):
            ends[pc] = nxt
            if program[pc].op in (WAIT, STAGING_END):
                nxt = pc
        return ends

    def role_name(self, r: int) -> str:
        return "producer" if r == 0 else f"consumer {r - 1}"

    # -- state ----------------------------------------------------------------------------
    def initial(self) -> State:
        n = self.layout.n_stages
        bars: list[int] = []
        for g in range(n):
            ring = self.rings[g]
            bars += [0, ring.full_arrivals, 0, 0, ring.empty_arrivals, 0]
        bars += [0, self.consumers, 0]  # the consumers' named barrier
        if self.turn_bars:
            bars += [0, 2, 0] * self.consumers  # turn barriers: pending roles, arrived-role mask
        return State(tuple(0 for _ in self.programs), tuple(bars), (0,) * (4 * n), (),
                     (0,) * (2 * n * self.consumers), tuple(() for _ in range(self.consumers)),
                     (0,) * (2 * len(self.layout.tiles) * self.consumers),
                     (((), (1 << len(self.layout.buffers)) - 1, 0, 0),) * self.consumers,
                     ((0, 0),) * self.consumers)

    def count(self, bar: int) -> int:
        if bar == self.layout.sync_bar:
            return self.consumers
        if bar > self.layout.sync_bar:
            return 2
        ring = self.rings[bar // 2]
        return ring.empty_arrivals if bar % 2 else ring.full_arrivals

    def finished(self, st: State) -> bool:
        return all(pc == len(p) for pc, p in zip(st.pcs, self.programs))

    def can_pass(self, st: State, bar: int, parity: int) -> bool:
        return (st.bars[3 * bar] & 1) != parity

    @staticmethod
    def _key(fill: int, g: int, i: int) -> int:
        return (fill << 12) | (g << 4) | i

    @staticmethod
    def _unkey(key: int) -> tuple[int, int, int]:
        return key >> 12, (key >> 4) & 0xFF, key & 0xF

    def moves(self, st: State) -> list[tuple[str, int]]:
        """("role", r) for each role that can run its next move, ("land", key) per TMA in flight."""
        out: list[tuple[str, int]] = []
        for r, (pc, prog) in enumerate(zip(st.pcs, self.programs)):
            if pc == len(prog):
                continue
            act = prog[pc]
            if act.op != WAIT or self.can_pass(st, act.arg, act.val):
                out.append(("role", r))
        whole: set[int] = set()
        for key in st.inflight:
            fill, g, _ = self._unkey(key)
            if g in self.exact:
                whole.add(self._key(fill, g, 0))
            else:
                out.append(("land", key))
        out += [("land-fill", key) for key in sorted(whole)]
        return out

    def describe_move(self, st: State, move: tuple[str, int]) -> str:
        kind, x = move
        if kind == "land":
            _, g, i = self._unkey(x)
            load = self.rings[g].loads[i]
            return f"TMA {load.name} lands in stage {self.layout.stage_name(g)} ({load.nbytes} B)"
        if kind == "land-fill":
            fill, g, _ = self._unkey(x)
            names = ", ".join(self.rings[g].loads[i].name for i in self._fill_keys(st, x))
            return f"TMA {names} land in stage {self.layout.stage_name(g)} (fill {fill})"
        prog, pc = self.programs[x], st.pcs[x]
        acts = prog[pc:self.seg_end[x][pc]]
        return f"{self.role_name(x)} ({acts[0].where}): " + "; ".join(a.label for a in acts)

    # -- transitions ----------------------------------------------------------------------
    def step(self, st: State, move: tuple[str, int]) -> State:
        s = _Scratch(st)
        kind, x = move
        if kind == "land":
            self._land(s, x)
        elif kind == "land-fill":
            for i in self._fill_keys(st, x):
                self._land(s, x | i)
        else:
            prog, pc = self.programs[x], st.pcs[x]
            end = self.seg_end[x][pc]
            for act in prog[pc:end]:
                try:
                    self._do(s, x, act)
                except Found as f:
                    f.at = f"{self.role_name(x)}'s {act.label} ({act.where})"
                    raise
            s.pcs[x] = end
        return s.freeze()

    def _fill_keys(self, st: State, key: int) -> list[int]:
        """The load indices of fill ``key`` still in flight."""
        return [k & 0xF for k in st.inflight if k & ~0xF == key]

    def _arrive(self, s: _Scratch, bar: int) -> None:
        s.bars[3 * bar + 1] -= 1
        if s.bars[3 * bar + 1] < 0:
            raise Found("over-arrival", bar // 2,
                        f"{self.layout.bar_name(bar)} got more than its {self.count(bar)} "
                        f"arrival(s) in one phase")
        self._complete(s, bar)

    def _arrive_turn(self, s: _Scratch, bar: int, role: int) -> None:
        """A warpgroup arrives on a named barrier of two warpgroups (the tx slot holds the mask
        of roles that arrived in this phase)."""
        if s.bars[3 * bar + 2] >> role & 1:
            raise Found("over-arrival", None, f"{self.role_name(role)} arrived twice on "
                        f"{self.layout.bar_name(bar)} in one phase: the named barrier completes "
                        "without the other warpgroup")
        s.bars[3 * bar + 1] -= 1
        s.bars[3 * bar + 2] |= 1 << role
        if s.bars[3 * bar + 1] == 0:
            s.bars[3 * bar] += 1
            s.bars[3 * bar + 1], s.bars[3 * bar + 2] = 2, 0

    def _complete(self, s: _Scratch, bar: int) -> None:
        if s.bars[3 * bar + 1] == 0 and s.bars[3 * bar + 2] == 0:
            s.bars[3 * bar] += 1
            s.bars[3 * bar + 1] = self.count(bar)
            if bar == self.layout.sync_bar:
                self._publish(s)

    def _wix(self, t: int, c: int) -> int:
        return 2 * (t * self.consumers + c)

    def _publish(self, s: _Scratch) -> None:
        """The consumers met: each written tile's rows as every consumer has written them so far
        are what every consumer now sees."""
        for t in range(len(self.layout.tiles)):
            done = min(s.written[self._wix(t, c)] for c in range(self.consumers))
            for c in range(self.consumers):
                s.written[self._wix(t, c) + 1] = done

    def _write_tile(self, s: _Scratch, c: int, t: int) -> None:
        name, g = self.layout.tiles[t], self.layout.n_stages + t
        for other in range(self.consumers):
            if any(g in grp for grp in s.groups[other]):
                raise Found("overwrite", None, f"consumer {c} writes tile {name} while consumer "
                            f"{other}'s wgmma reading its previous contents is still in flight")
        s.written[self._wix(t, c)] += 1

    def _read_tile(self, s: _Scratch, c: int, t: int) -> None:
        name = self.layout.tiles[t]
        seen = s.written[self._wix(t, c) + 1]
        rows = [s.written[self._wix(t, other)] for other in range(self.consumers)]
        if seen == 0 or rows[c] > seen:
            raise Found("early-read", None, f"consumer {c}'s wgmma reads tile {name} before the "
                        "consumers met after writing it (no named barrier orders every "
                        "consumer's rows before the read)")
        ahead = [other for other, n in enumerate(rows) if n > seen]
        if ahead:
            raise Found("overwrite", None, f"consumer {ahead[0]} wrote tile {name} again before "
                        f"consumer {c}'s wgmma read its previous contents")

    def _land(self, s: _Scratch, key: int) -> None:
        s.inflight.remove(key)
        fill, g, i = self._unkey(key)
        if fill != s.stages[4 * g]:
            raise Found("overwrite", g, f"TMA {self.rings[g].loads[i].name} of fill {fill} landed "
                        f"in stage {self.layout.stage_name(g)} after fill {s.stages[4 * g]} began")
        s.stages[4 * g + 2] |= 1 << i
        s.bars[3 * (2 * g) + 2] -= self.rings[g].loads[i].nbytes
        self._complete(s, 2 * g)

    def _do(self, s: _Scratch, role: int, act: Action) -> None:
        if act.op == WAIT:
            if role > 0 and act.arg % 2 == 0 and act.arg < self.layout.sync_bar:
                s.reads[self._rix(role - 1, act.arg // 2)] += 1
        elif act.op == ARRIVE:
            self._arrive(s, act.arg)
        elif act.op == TURN_ARRIVE:
            self._arrive_turn(s, act.arg, role)
        elif act.op == STAGING_BEGIN:
            over, reading = s.alias[role - 1]
            for g in range(act.arg, act.arg + act.val):
                self._check_staging(s, role - 1, g)
                s.stages[4 * g + 3] += 1
                over |= 1 << g
            s.alias[role - 1] = (over, reading)
        elif act.op == STAGING_END:
            over, reading = s.alias[role - 1]
            for g in range(act.arg, act.arg + act.val):
                s.stages[4 * g + 3] -= 1
                over &= ~(1 << g)
            s.alias[role - 1] = (over, reading)
        elif act.op == EXPECT:
            fills = s.stages[4 * (act.arg // 2)]
            if fills:  # arming the next fill: the previous one must be released by then
                self._check_free(s, act.arg // 2, fills)
            s.bars[3 * act.arg + 2] += act.val
            self._arrive(s, act.arg)
        elif act.op == TMA:
            self._tma(s, act.arg, act.val)
        elif act.op == TILE_WRITE:
            self._write_tile(s, role - 1, act.arg)
        elif act.op == MMA:
            for g in act.reads:
                if g >= self.layout.n_stages:
                    self._read_tile(s, role - 1, g - self.layout.n_stages)
                    continue
                self._read(s, role - 1, g)
            s.groups[role - 1].append(act.reads)
        elif act.op == READ:  # a synchronous read: done now, nothing left in flight
            for g in act.reads:
                self._read(s, role - 1, g, "register read (ld.shared)")
        elif act.op == ACC_READ:
            if s.groups[role - 1]:
                raise Found("early-read", None, f"consumer {role - 1}'s stream-K fix-up reads the "
                            f"accumulators with {len(s.groups[role - 1])} wgmma group(s) in flight")
        elif act.op == MMA_WAIT:
            c = role - 1
            del s.groups[c][:max(0, len(s.groups[c]) - act.arg)]
        elif act.op == RELEASE:
            self._release(s, role - 1, act.arg // 2)
            self._arrive(s, act.arg)
        elif act.op in (STORE_WAIT, STAGING_SYNC, STAGING_WRITE, TMA_STORE, STORE_DRAIN):
            self._epilogue(s, role - 1, act)
            over, reading = s.alias[role - 1]
            if act.op == TMA_STORE:  # reads the staging where it is: over those stages, if any
                s.alias[role - 1] = (over, reading | over)
            elif not s.epi[role - 1][0]:  # every store of the consumer has read its staging
                s.alias[role - 1] = (over, 0)

    def _epilogue(self, s: _Scratch, c: int, act: Action) -> None:
        """The staged epilogue of consumer ``c`` over its own staging buffers: ``groups`` are its
        committed bulk-store groups not yet retired by a wait (each a mask of the buffers it
        reads); a buffer is *free* for the consumer's warps once a meeting of its warps follows
        the issuing thread's wait that retired every group reading it; a write makes it *dirty*
        until the next meeting *publishes* it, and only a published buffer may be TMA-stored."""
        groups, free, dirty, published = s.epi[c]
        if act.op == STORE_WAIT:
            groups = groups[len(groups) - act.arg:] if act.arg else ()
        elif act.op == STORE_DRAIN:
            groups = ()
        elif act.op == STAGING_SYNC:
            busy = 0
            for g in groups:
                busy |= g
            free = ((1 << len(self.layout.buffers)) - 1) & ~busy
            published, dirty = published | dirty, 0
        elif act.op == STAGING_WRITE:
            bit = 1 << act.arg
            if not free & bit:
                raise Found("overwrite", None, f"consumer {c}'s warps write {self.layout.buffer_name(act.arg)} "
                            "while a TMA store committed before may still read it (no wait_group.read by "
                            "the issuing thread with a meeting of the warps after it)")
            dirty, published = dirty | bit, published & ~bit
        else:  # TMA_STORE
            bit = 1 << act.arg
            name = self.layout.buffer_name(act.arg)
            if dirty & bit:
                raise Found("early-read", None, f"consumer {c}'s TMA store reads {name} before its warps "
                            "met after writing it (another warp's rows may not be written yet)")
            if not published & bit:
                raise Found("early-read", None, f"consumer {c}'s TMA store reads {name}, which no write "
                            "since its last store filled")
            groups, free, published = groups + (bit,), free & ~bit, published & ~bit
        s.epi[c] = (groups, free, dirty, published)

    def _rix(self, c: int, g: int) -> int:
        return 2 * (c * self.layout.n_stages + g)

    def _tma(self, s: _Scratch, g: int, i: int) -> None:
        fills, issued = s.stages[4 * g], s.stages[4 * g + 1]
        if s.stages[4 * g + 3]:
            raise Found("overwrite", g, f"the producer's TMA into stage {self.layout.stage_name(g)} "
                        "lands where an epilogue's staging tile lives: the ring is reused for "
                        "staging while the producer still fills it")
        late = [c for c, (_, reading) in enumerate(s.alias) if reading >> g & 1]
        if late:
            raise Found("overwrite", g, f"the producer's TMA into stage {self.layout.stage_name(g)} may "
                        f"land while consumer {late[0]}'s TMA store still reads the staging there (no "
                        "cp.async.bulk.wait_group.read 0 by its issuing thread before the release)")
        if fills == 0 or issued & (1 << i):
            if fills > 0:
                self._check_free(s, g, fills)
            fills += 1
            s.stages[4 * g:4 * g + 3] = [fills, 1 << i, 0]
        else:
            s.stages[4 * g + 1] |= 1 << i
        s.inflight.append(self._key(fills, g, i))

    def _check_free(self, s: _Scratch, g: int, fills: int) -> None:
        """Fill ``fills + 1`` may start only once every consumer (ping-pong: its owner) released
        fill ``fills``."""
        if self.owners is not None:
            owner = self.owners[g][fills - 1]
            need = self.owners[g][:fills].count(owner)
            late = [owner] if s.reads[self._rix(owner, g) + 1] < need else []
        else:
            late = [c for c in range(self.consumers) if s.reads[self._rix(c, g) + 1] < fills]
        if not late:
            return
        name, ring = self.layout.stage_name(g), self.rings[g]
        empty = 2 * g + 1
        done = s.bars[3 * empty]
        who = ", ".join(f"consumer {c}" for c in late)
        what = (f"the producer started fill {fills + 1} of stage {name} while {who} had not "
                f"released fill {fills}")
        if done < fills:
            raise Found("wrong-phase", g, f"{what}: its wait on empty[{name}] passed although "
                        f"phase {fills - 1} had not completed (the barrier was in phase {done}, "
                        f"whose parity matched an older phase)")
        if self.owners is None and ring.empty_arrivals < self.consumers:
            raise Found("overwrite", g, f"{what}: empty[{name}] completes after "
                        f"{ring.empty_arrivals} arrival(s) but {self.consumers} consumers read "
                        f"the stage")
        raise Found("overwrite", g, what)

    def _read(self, s: _Scratch, c: int, g: int, reader: str = "wgmma") -> None:
        """A wgmma (or ``reader``) reads the fill this consumer last waited for; it must be there,
        whole; a register read must come before this consumer released it (a wgmma's reads are
        checked at its release instead: ``_release``)."""
        acquired = s.reads[self._rix(c, g)]
        want = self.own_fill(c, g, acquired) if acquired else 0
        fills, landed = s.stages[4 * g], s.stages[4 * g + 2]
        ring, name = self.rings[g], self.layout.stage_name(g)
        if want is None:
            raise Found("wrong-fill", g, f"consumer {c}'s {reader} read stage {name} for the "
                        f"{acquired}th time, but only {self.owners[g].count(c)} of its fills are "
                        "for this consumer's tiles (it reads the other consumer's data)")
        everything = (1 << len(ring.loads)) - 1
        if s.stages[4 * g + 3]:
            raise Found("overwrite", g, f"consumer {c}'s {reader} reads stage {name} while an "
                        "epilogue's staging tile lives there")
        if reader != "wgmma" and acquired and s.reads[self._rix(c, g) + 1] >= acquired:
            raise Found("release-before-read", g, f"consumer {c}'s {reader} reads stage {name} after "
                        f"releasing fill {want} (the producer may refill it meanwhile)")
        if want >= 1 and fills == want and landed == everything:
            return
        if want == 0:
            raise Found("early-read", g, f"consumer {c}'s {reader} read stage {name} without "
                        f"waiting on full[{name}]")
        what = f"consumer {c}'s {reader} read fill {want} of stage {name}"
        if fills > want:
            raise Found("overwrite", g, f"{what} after fill {fills} had overwritten it")
        done = s.bars[3 * 2 * g]
        if done < want:
            raise Found("wrong-phase", g, f"{what} before it arrived: its wait on full[{name}] "
                        f"passed although phase {want - 1} had not completed (the barrier was "
                        f"in phase {done}, whose parity matched an older phase)")
        got = sum(ld.nbytes for i, ld in enumerate(ring.loads) if landed >> i & 1) \
            if fills == want else 0
        raise Found("early-read", g, f"{what} before it arrived: full[{name}] completed phase "
                    f"{want - 1} with {got} of the stage's {ring.stage_bytes} bytes landed "
                    f"(expect_tx is {ring.expect_tx} B)")

    def _check_staging(self, s: _Scratch, c: int, g: int) -> None:
        """An epilogue may write over stage ``g`` once nobody reads or fills it any more."""
        name = self.layout.stage_name(g)
        what = f"consumer {c}'s epilogue writes its staging tile over stage {name}"
        for other in range(self.consumers):
            if any(g in grp for grp in s.groups[other]):
                raise Found("overwrite", g, f"{what} while consumer {other}'s wgmma still reads "
                            "it (the consumers did not all finish before the epilogue)")
            if s.reads[self._rix(other, g)] < s.stages[4 * g]:
                raise Found("overwrite", g, f"{what} while it holds fill {s.stages[4 * g]}, "
                            f"which consumer {other} has not waited for yet: the ring is reused "
                            "for staging while the producer still fills it")
        if any(self._unkey(key)[1] == g for key in s.inflight):
            raise Found("overwrite", g, f"{what} while a TMA into it is in flight")

    def _release(self, s: _Scratch, c: int, g: int) -> None:
        ix, name = self._rix(c, g), self.layout.stage_name(g)
        if any(g in grp for grp in s.groups[c]):
            raise Found("release-before-read", g, f"consumer {c} released stage {name} while its "
                        f"wgmma reading it was still in flight (no wait_group retired it)")
        acquired, released = s.reads[ix], s.reads[ix + 1]
        if released >= acquired:
            raise Found("bad-release", g, f"consumer {c} released stage {name} after waiting for "
                        f"{acquired} of its fill(s) and releasing {released}")
        s.reads[ix + 1] = released + 1

    # -- end states -----------------------------------------------------------------------
    def check_end(self, st: State) -> None:
        if self.turn_bars:  # a named barrier left mid-phase at exit
            for c in range(self.consumers):
                bar = self.layout.turn_bar(c)
                if st.bars[3 * bar + 2]:
                    raise Found("unmatched-arrival", None, f"{self.layout.bar_name(bar)} ends with an "
                                "arrival no wait took: a hand-over of the turn with no turn after it")
        for c in range(self.consumers):
            if st.epi and st.epi[c][0]:
                raise Found("in-flight-at-exit", None, f"consumer {c} finished with {len(st.epi[c][0])} "
                            "bulk-store group(s) in flight (no cp.async.bulk.wait_group 0 before exit)")
            if st.groups[c]:
                g = st.groups[c][0][0] if st.groups[c][0] else None
                raise Found("in-flight-at-exit", g if g is not None and g < self.layout.n_stages else None,
                            f"consumer {c} finished with {len(st.groups[c])} wgmma group(s) in flight")
            for g in range(self.layout.n_stages):
                fills, acquired = st.stages[4 * g], st.reads[self._rix(c, g)]
                if self.owners is not None:
                    fills = self.owners[g][:fills].count(c)
                if acquired != fills:
                    raise Found("unconsumed", g, f"stage {self.layout.stage_name(g)} was filled "
                                f"{fills} time(s) but consumer {c} waited for {acquired}")

    def blocked(self, st: State) -> list[str]:
        """For a deadlock: what each unfinished role waits for, and the barrier's state."""
        lines = []
        for r, (pc, prog) in enumerate(zip(st.pcs, self.programs)):
            if pc == len(prog):
                continue
            act = prog[pc]
            done, pending, tx = st.bars[3 * act.arg:3 * act.arg + 3]
            count = self.count(act.arg)
            lines.append(f"{self.role_name(r)} blocks in {act.label} ({act.where}): the barrier is in phase "
                         f"{done} (parity {done & 1}) with {count - pending} of {count} "
                         f"arrivals and tx {tx}")
        return lines
