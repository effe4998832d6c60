"""The compile-time check of the push exchange between the CTAs of a cluster (``cluster_sum
{exchange = "push"}``, emit_cluster.py).

The emitter records, as it writes the PTX, each protocol step of one CTA's program (every CTA of
a cluster runs the same program), with the loops and ifs of the block body that enclose it:

- ``init e``: the exchange's mbarrier initialised (count 1) and armed once for ``expect`` bytes;
- ``arrive`` / ``cwait``: the cluster barrier that publishes the initialisation;
- ``push e``: the CTA's partial (``bytes``) stored with ``st.async`` into each rank of ``to``,
  completing ``bytes`` on that rank's mbarrier of exchange ``e`` when it lands;
- ``wait e``: ``mbarrier.try_wait.parity`` on the CTA's own mbarrier of ``e`` with ``parity``;
- ``read e``: the k slots of ``e`` read from the CTA's own shared memory.

``check_push_protocol`` explores every interleaving of ``min(k, 3)`` CTAs (the program is the
same for every rank; stores land at any later time, in any order), with each loop of the block
body run twice and each ``if`` taken or not by each CTA independently, and raises
NotAvailableError at the first exchange that can go wrong: a store that reaches an mbarrier
before its initialisation, or a CTA after it exited, or a slot whose previous partial its owner
has not read yet; a read before all k partials of that use landed; an mbarrier armed for a
different byte count than the stores it counts; or a deadlock. tests/test_cluster_protocol.py
breaks each of these and expects the check to catch it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import NotAvailableError

MODEL_CTAS = 3
"""CTAs explored: the steps are the same for every rank, so three expose every ordering of a
sender, a receiver and a third party; the byte counts are checked against the real k."""


@dataclass(frozen=True)
class Step:
    kind: str                 # init, arrive, cwait, push, wait, read
    exchange: int = -1
    where: tuple = ()         # (("for" | "if", id), ...) enclosing the step inside the block body
    nbytes: int = 0           # push: bytes per destination; init: bytes expected
    to: tuple = ()            # push: destination ranks (of the real k)
    parity: int = 0           # wait
    span: object = None


@dataclass
class PushProtocol:
    """The steps one CTA runs (recorded by the emitter in program order) for a cluster of k."""

    k: int
    steps: list[Step] = field(default_factory=list)

    def add(self, kind: str, **kw) -> None:
        self.steps.append(Step(kind, **kw))


def _programs(steps: list[Step]) -> list[tuple[Step, ...]]:
    """Every straight-line program the steps allow: a loop's steps twice, an if's taken or not."""
    def expand(items, depth):
        out = [()]
        i = 0
        while i < len(items):
            s = items[i]
            if len(s.where) == depth:
                out = [p + (s,) for p in out]
                i += 1
                continue
            ctl = s.where[depth]
            j = i
            while j < len(items) and len(items[j].where) > depth and items[j].where[depth] == ctl:
                j += 1
            inner = expand(items[i:j], depth + 1)
            if ctl[0] == "for":
                choices = [a + b for a in inner for b in inner]
            else:
                choices = [()] + inner
            out = [p + c for p in out for c in choices]
            i = j
        return out
    return expand(steps, 0)


def _fail(step: Step | None, why: str):
    span = step.span if step is not None else None
    where = f" (the exchange at {span.location()})" if span is not None else ""
    raise NotAvailableError(f"cluster exchange protocol: {why}{where}", span)


def check_push_protocol(proto: PushProtocol) -> int:
    """Raise NotAvailableError where the recorded push protocol can go wrong; returns the number of
    states explored."""
    k = proto.k
    for s in proto.steps:
        if s.kind == "push" and sorted(s.to) != list(range(k)):
            _fail(s, f"exchange {s.exchange} stores its partial to ranks {sorted(s.to)}, not to each of the {k} "
                     "CTAs of the cluster exactly once")
    inits = {s.exchange: s for s in proto.steps if s.kind == "init"}
    for s in proto.steps:
        if s.kind == "push":
            armed = inits.get(s.exchange)
            if armed is None:
                _fail(s, f"exchange {s.exchange} has no mbarrier")
            if armed.nbytes != k * s.nbytes:
                _fail(s, f"exchange {s.exchange}'s mbarrier expects {armed.nbytes} B but {k} CTAs store "
                         f"{s.nbytes} B each into it")
    n = min(k, MODEL_CTAS)
    # the model's n ranks: a push to every real rank is a push to every model rank, and an
    # mbarrier armed for k partials is armed for n
    import dataclasses
    model = [dataclasses.replace(s, nbytes=s.nbytes * n // k) if s.kind == "init" else s for s in proto.steps]
    programs = _programs(model)
    seen: set = set()
    explored = 0
    for choice in _choices(len(programs), n):
        progs = [programs[c] for c in choice]
        explored += _explore(progs, n, seen)
    return explored


def _choices(m: int, n: int):
    if n == 0:
        yield ()
        return
    for rest in _choices(m, n - 1):
        for c in range(m):
            yield rest + (c,)


def _explore(progs, n: int, seen: set) -> int:
    # state: pcs, bars ((inited, phase, pending, tx) per cta*exchange), landed, reads, flight, arrivals, cwaits
    exchanges = sorted({s.exchange for p in progs for s in p if s.exchange >= 0})
    ex_index = {e: i for i, e in enumerate(exchanges)}
    ne = len(exchanges)
    start = (tuple([0] * n), tuple([(False, 0, 0, 0)] * (n * ne)), tuple([()] * (n * ne)),
             tuple([0] * (n * ne)), (), tuple([0] * n), tuple([0] * n), tuple([0] * (n * ne)))
    stack = [start]
    count = 0
    while stack:
        state = stack.pop()
        key = (tuple(id(p) for p in progs), state)
        if key in seen:
            continue
        seen.add(key)
        count += 1
        moves = list(_moves(progs, n, ex_index, state))
        if not moves:
            pcs = state[0]
            stuck = [(r, progs[r][pcs[r]]) for r in range(n) if pcs[r] < len(progs[r])]
            if stuck or state[4]:
                r, s = stuck[0] if stuck else (None, None)
                what = "the cluster barrier" if s is not None and s.exchange < 0 else f"'{s and s.kind}' of exchange {s and s.exchange}"
                _fail(s, f"deadlock: CTA {r} waits forever at {what}"
                      if s is not None else "stores still in flight after every CTA exited")
            continue
        stack.extend(moves)
    return count


def _complete(bar):
    inited, phase, pending, tx = bar
    if inited and pending == 0 and tx == 0:
        return (inited, phase + 1, 1, 0)
    return bar


def _moves(progs, n, ex_index, state):
    pcs, bars, landed, reads, flight, arrivals, cwaits, sent = state
    ne = len(ex_index)
    # a store in flight lands
    for i, (src, dst, e, use, nbytes, step) in enumerate(flight):
        slot = dst * ne + ex_index[e]
        if pcs[dst] >= len(progs[dst]):
            _fail(step, f"a partial of exchange {e} reaches a CTA after it exited")
        inited, phase, pending, tx = bars[slot]
        if not inited:
            _fail(step, f"a partial of exchange {e} reaches a CTA's mbarrier before its initialisation is "
                        "visible (a cluster barrier must separate mbarrier.init from the first remote store)")
        if use != reads[slot]:
            _fail(step, f"a partial of exchange {e} (use {use}) overwrites a slot whose partial of use "
                        f"{reads[slot]} its CTA has not read yet")
        nbars = list(bars)
        nbars[slot] = _complete((inited, phase, pending, tx - nbytes))
        nlanded = list(landed)
        nlanded[slot] = landed[slot] + ((use, src),)
        yield (pcs, tuple(nbars), tuple(nlanded), reads, flight[:i] + flight[i + 1:], arrivals, cwaits, sent)
    for r in range(n):
        if pcs[r] >= len(progs[r]):
            continue
        s = progs[r][pcs[r]]
        npcs = pcs[:r] + (pcs[r] + 1,) + pcs[r + 1:]
        slot = r * ne + ex_index[s.exchange] if s.exchange >= 0 else -1
        if s.kind == "init":
            nbars = list(bars)
            inited, phase, pending, tx = bars[slot]
            if inited:
                _fail(s, f"exchange {s.exchange}'s mbarrier is initialised twice without mbarrier.inval")
            nbars[slot] = _complete((True, 0, 0, s.nbytes))  # init(count 1) + arrive.expect_tx
            yield (npcs, tuple(nbars), landed, reads, flight, arrivals, cwaits, sent)
        elif s.kind == "arrive":
            yield (npcs, bars, landed, reads, flight, arrivals[:r] + (arrivals[r] + 1,) + arrivals[r + 1:], cwaits, sent)
        elif s.kind == "cwait":
            if min(arrivals) > cwaits[r]:
                yield (npcs, bars, landed, reads, flight, arrivals, cwaits[:r] + (cwaits[r] + 1,) + cwaits[r + 1:], sent)
        elif s.kind == "push":
            use = sent[slot]
            new = tuple(sorted(flight + tuple((r, d, s.exchange, use, s.nbytes, s) for d in range(n)),
                               key=lambda f: (f[0], f[1], f[2], f[3])))
            nsent = sent[:slot] + (use + 1,) + sent[slot + 1:]
            yield (npcs, bars, landed, reads, new, arrivals, cwaits, nsent)
        elif s.kind == "wait":
            if bars[slot][0] and bars[slot][1] % 2 != s.parity:
                yield (npcs, bars, landed, reads, flight, arrivals, cwaits, sent)
        elif s.kind == "read":
            use = reads[slot]
            got = sorted(src for u, src in landed[slot] if u == use)
            if got != list(range(n)):
                _fail(s, f"exchange {s.exchange} (use {use}) reads the slots before the partials of all CTAs "
                         f"landed (landed: {got})")
            nreads = list(reads)
            nreads[slot] = use + 1
            nlanded = list(landed)
            nlanded[slot] = tuple(x for x in landed[slot] if x[0] != use)
            yield (npcs, bars, tuple(nlanded), tuple(nreads), flight, arrivals, cwaits, sent)
        else:
            raise AssertionError(s.kind)
