"""pipeline{staging=slot} (off by default): in a persistent block loop a staged store's staging goes
in the one slot of a tile loaded once per tile that is dead by the store (the attention O staged in
Q's bytes, as FlashAttention-3 does), so the ring loop keeps the stage the staging would cost.

What must hold: the pipeline pass marks the store and gains the stage; smem-plan places the staging
at the tile's offset; the protocol meets before the staging is written, waits for the TMA stores'
reads (``StagingRead``) before the slot is released, and never releases it early; the epilogue
is not deferred; the checker passes that protocol and catches its broken variants; the roles
interpreter runs the option on the attention examples bit for bit against the plain interpreter
(and catches a release before the read wait); the default's PTX does not change (the hash check of
the examples and corpus, in the commit); ptxas takes the option's kernels with no spills."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import tkjit
from tkjit.interpreter.roles import ScheduleError, run_roles
from tkjit.passes import DEFAULT_PIPELINE, sync_protocol as sp
from tkjit.passes.mbarrier import schedule_of
from tkjit.passes.sync_check import SyncError, check_protocol, default_cases

from test_general_lowering import sync_outside_the_protocol

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SLOT = DEFAULT_PIPELINE.replace("pipeline,", "pipeline{staging=slot},")
AUTO = DEFAULT_PIPELINE  # staging=auto is the pipeline pass's default
KEEP = DEFAULT_PIPELINE.replace("pipeline,", "pipeline{staging=keep},")
EARLY = SLOT.replace("mbarrier", "mbarrier{release=early}")
END = SLOT.replace("mbarrier", "mbarrier{release=end}")
LEVEL1 = SLOT.replace("mbarrier", "mbarrier{split=off}")
"""attention_nol at D = 256 (pinned persistent) gets 2 stages from the option, and with them level 2
over split K/V rings, whose registers spill 8 bytes (two values of the persistent tile walk, stored
once, loaded twice a tile, outside the key loop: its consumers need about 236 registers of 232
there, 220 with one CTA per tile, which is why grid keeps it one CTA per tile by default); without
split rings the loop keeps level 1 (2 stages) and nothing spills."""
KERNELS = [("attention", {"CAUSAL": True}), ("attention", {}), ("attention_nol", {"CAUSAL": True}),
           ("attention_nol", {"D": 256}), ("attention_exp", {}), ("attention_exp", {"CAUSAL": True}),
           ("attention_mask", {})]
IDS = [n + "".join(f"-{k}{v}" for k, v in c.items()) for n, c in KERNELS]
_MADE: dict = {}


def _persistent(constants: dict, pipeline: str | None) -> str | None:
    """attention_nol at D = 256 keeps one CTA per tile unless the kernel names its schedule: in a
    persistent loop its staging would have to take Q's one slot (``grid.slot_bound``). These tests
    are about that slot, so they pin the persistent loop for it (``grid{schedule=persistent}``)."""
    if constants.get("D") != 256:
        return pipeline
    return (pipeline or DEFAULT_PIPELINE).replace("grid,", "grid{schedule=persistent},")


def _kernel(name: str, constants: dict, pipeline: str | None = SLOT):
    pipeline = _persistent(constants, pipeline)
    key = (name, tuple(sorted(constants.items())), pipeline)
    if key not in _MADE:
        _MADE[key] = tkjit.compile((EXAMPLES / f"{name}.tk").read_text(), filename=f"{name}.tk", cache=False,
                                   constants=constants or None, lowering="general", pipeline=pipeline)
    return _MADE[key]


def _stages(k) -> int:
    return next(op.attrs["stages"] for op in k.ir.walk() if "stage_bytes" in op.attrs)


def _store(k):
    return next(op for op in k.ir.walk() if op.NAME == "store" and "smem" in op.attrs)


def _flat(steps):
    out = []
    for st in steps:
        out.append(st)
        for field in ("body", "orelse"):
            out += _flat(getattr(st, field, ()))
    return out


@pytest.mark.parametrize("name,constants,before,after", [
    ("attention", {"CAUSAL": True}, 2, 3), ("attention_nol", {"CAUSAL": True}, 2, 3),
    ("attention_nol", {"D": 256}, 1, 2), ("attention_exp", {}, 2, 3), ("attention_mask", {}, 2, 3)])
def test_the_staging_in_the_slot_gives_the_ring_a_stage(name, constants, before, after):
    plain, slot = _kernel(name, constants, KEEP), _kernel(name, constants)
    assert (_stages(plain), _stages(slot)) == (before, after)
    assert "staging_in" not in _store(plain).attrs
    store, q = _store(slot), next(op for op in slot.ir.walk() if op.NAME == "load" and "bars" in op.attrs)
    assert store.attrs["staging_in"] == 0 and store.attrs["smem"] == q.attrs["smem"]
    text = str(slot.explain())
    assert "staging in the bytes of tile %q" in text and f"{before} -> {after} stages" in text
    assert "the bytes of tile %q, dead after its last product" in text  # smem-plan
    assert "released at the end of the tile, after the staged store's reads" in text  # mbarrier
    assert "deferred to the next tile" not in text  # the slot is needed by the next tile's first product
    assert store.attrs["epilogue"] == "staged"


def test_auto_takes_the_slot_only_out_of_a_one_stage_ring():
    """staging=auto (the default): the slot where a ring would otherwise keep a single stage
    (attention_nol D = 256, pinned persistent: 1 -> 2), not where it has 2 already (attention D = 128 causal, 2 -> 3,
    measured slower: the slot is released only after the store's reads)."""
    assert "staging_in" in _store(_kernel("attention_nol", {"D": 256}, AUTO)).attrs
    k = _kernel("attention", {"CAUSAL": True}, AUTO)
    assert "staging_in" not in _store(k).attrs
    assert "every ring keeps 2 or more stages beside it (the ring of for at" in str(k.explain())
    k = _kernel("attention", {}, AUTO)  # 176-key blocks: 2 stages either way
    assert "staging_in" not in _store(k).attrs
    assert "no ring loop would gain a stage" in str(k.explain())


def _protocol(name="attention", constants=None, pipeline=SLOT):
    return schedule_of(_kernel(name, constants or {"CAUSAL": True}, pipeline).ir).protocol


def test_the_slot_is_released_after_the_stores_read_it():
    proto = _protocol()
    steps = _flat(proto.consumer)
    kinds = [type(st) for st in steps]
    read = kinds.index(sp.StagingRead)
    begin = kinds.index(sp.StagingBegin)
    release = next(i for i, st in enumerate(steps) if isinstance(st, sp.Release) and st.ring == "q")
    assert kinds[begin - 1] is sp.ConsumerSync and begin < kinds.index(sp.StagedStore) < read < release
    check_protocol(proto, default_cases(proto))


def test_release_early_does_not_apply_to_the_slot():
    k = _kernel("attention", {}, EARLY)
    assert "release=early does not apply to it" in str(k.explain())
    steps = _flat(schedule_of(k.ir).protocol.consumer)
    release = next(i for i, st in enumerate(steps) if isinstance(st, sp.Release) and st.ring == "q")
    assert any(isinstance(st, sp.StagingRead) for st in steps[:release])


def _edit(proto: sp.Protocol, edit) -> sp.Protocol:
    """``proto`` with every block's steps passed through ``edit`` (a tuple -> tuple)."""
    def walk(steps):
        out = []
        for st in steps:
            if isinstance(st, sp.BLOCKS):
                fields = {"body": walk(st.body)}
                if getattr(st, "orelse", ()):
                    fields["orelse"] = walk(st.orelse)
                st = dataclasses.replace(st, **fields)
            out.append(st)
        return edit(tuple(out))
    return dataclasses.replace(proto, consumer=walk(proto.consumer))


def _release_before_read(steps):
    kinds = [type(st) for st in steps]
    if sp.StagingRead not in kinds:
        return steps
    read = kinds.index(sp.StagingRead)
    out = [st for st in steps if not (isinstance(st, (sp.Release, sp.Advance)) and st.ring == "q")]
    at = out.index(steps[read])
    return tuple(out[:at]) + (sp.MmaWait(0), sp.Release("q"), sp.Advance("q")) + tuple(out[at:])


def _no_wait(steps):
    return tuple(sp.StagingEnd(st.ring) if isinstance(st, sp.StagingRead) else st for st in steps)


def _no_meeting(steps):
    kinds = [type(st) for st in steps]
    if sp.StagingBegin not in kinds:
        return steps
    at = kinds.index(sp.StagingBegin) - 1
    assert kinds[at] is sp.ConsumerSync
    return steps[:at] + steps[at + 1:]


@pytest.mark.parametrize("edit,what", [
    (_release_before_read, "lands where an epilogue's staging tile lives"),
    (_no_wait, "still reads the staging there"),
    (_no_meeting, "writes its staging tile over stage q.0")],
    ids=["release-before-the-read-wait", "no-read-wait", "no-meeting-before-the-staging"])
def test_a_broken_slot_protocol_is_caught(edit, what):
    proto = _protocol()
    broken = _edit(proto, edit)
    assert broken != proto
    with pytest.raises(SyncError) as e:
        check_protocol(broken, default_cases(broken))
    assert e.value.violation.kind == "overwrite" and what in str(e.value), str(e.value)


def _args(name: str, constants: dict, n: int = 300, h: int = 2, hkv: int = 1):
    d = constants.get("D", 128)
    torch.manual_seed(n + d)
    q, k, v = (torch.randn(1, x, n, d).bfloat16() for x in (h, hkv, hkv))
    args = [q, k, v, torch.full((1, h, n, d), float("nan")).bfloat16(), d ** -0.5]
    if name == "attention":
        args.insert(4, torch.full((1, h, n), float("nan")))
    return args, ((3, 4) if name == "attention" else (3,))


def _copy(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _same(outputs, mine, ref) -> bool:
    return all(torch.equal(mine[i].float().nan_to_num(7.0), ref[i].float().nan_to_num(7.0)) for i in outputs)


ROLES = [("attention", {"CAUSAL": True}, SLOT), ("attention", {}, SLOT), ("attention", {}, END),
         ("attention_nol", {"CAUSAL": True}, SLOT), ("attention_nol", {"D": 256}, SLOT),
         ("attention_exp", {"CAUSAL": True}, SLOT), ("attention_mask", {}, SLOT)]


@pytest.mark.parametrize("name,constants,pipeline", ROLES,
                         ids=[n + "".join(f"-{k}{v}" for k, v in c.items()) + ("-end" if p == END else "")
                              for n, c, p in ROLES])
def test_the_roles_match_the_interpreter(name, constants, pipeline):
    """Several tiles per CTA (6 query tiles of two heads over one key/value head on 3 CTAs): the
    next tile's Q lands in the slot the staging of this tile's O just left. attention_exp's
    general schedule differs from the plain interpreter in the last bit of some outputs without the
    option too (its exp is taken as exp2 of a folded scale): there the option's schedule must equal
    the default one's bit for bit, and the interpreter to rounding."""
    k = _kernel(name, constants, pipeline)
    args, outputs = _args(name, constants)
    ref = _copy(args)
    k(*ref)
    plain = _kernel(name, constants, None) if name == "attention_exp" else None
    for seed in (0, 1, 2, 3):
        mine = _copy(args)
        run_roles(k.ir, mine, seed=seed)
        if plain is None:
            assert _same(outputs, mine, ref), f"schedule {seed} differs from the interpreter"
            continue
        base = _copy(args)
        run_roles(plain.ir, base, seed=seed)
        assert _same(outputs, mine, base), f"schedule {seed} differs from the default schedule"
        assert torch.allclose(mine[3].float(), ref[3].float(), atol=1e-2)


def test_the_roles_catch_a_release_before_the_read_wait(monkeypatch):
    """The protocol builder with the staging ended without the read wait (the checker off, so the
    compile gets through): a TMA load of the next tile's Q into the slot while a store may read it."""
    real = sp.consumer_staging
    monkeypatch.setattr(sp, "consumer_staging",
                        lambda item, store=None: _no_wait(real(item, store)))
    k = tkjit.compile((EXAMPLES / "attention.tk").read_text(), cache=False, constants={"CAUSAL": True},
                      lowering="general", pipeline=SLOT.replace("async-schedule", "async-schedule{check=off}"))
    args, _ = _args("attention", {"CAUSAL": True})
    with pytest.raises(ScheduleError, match="may still read the staging"):
        for seed in range(4):
            run_roles(k.ir, _copy(args), seed=seed)


SASS = [(n, c, LEVEL1 if c.get("D") == 256 else SLOT) for n, c in KERNELS]


@pytest.mark.parametrize("name,constants,pipeline", SASS, ids=IDS)
def test_ptxas_takes_the_option_with_no_spills(name, constants, pipeline):
    k = _kernel(name, constants, pipeline)
    try:
        sass = k.asm["sass"]
    except tkjit.errors.NotAvailableError as e:
        pytest.skip(str(e))
    assert re.search(r"\bHGMMA", sass) and "UTMALDG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass), "spilled"
    assert not [m for m in k.metadata["ptxas"]["messages"] if m["level"] == "warning"]
    ptx = k.asm["ptx"]
    assert sync_outside_the_protocol(ptx) == []
    read = ptx[ptx.index("// step: " + sp.StagingRead("q").text()):]
    wait = re.search(r"@(%p\d+) cp\.async\.bulk\.wait_group\.read 0;", read[:read.index("// end step")])
    assert wait, "the read wait is printed by its step"
    release = read[read.index("// step: release: arrive empty[q.s]"):]
    arrive = re.search(r"@(%p\d+) mbarrier\.arrive", release)
    assert arrive and arrive.group(1) == wait.group(1), "the thread that waited releases the slot"


def test_the_rewritten_ir_holds_the_read_wait_and_runs_read_back():
    """The async-schedule IR prints ``staging_read`` and the store's ``staging_in``, parses back to
    the same text and the same protocol, and the roles run that parsed IR as the interpreter."""
    import dataclasses
    from tkjit.ir.parser import parse_kernel
    from tkjit.ir.printer import print_kernel
    from tkjit.passes.async_schedule import protocol_from_ir
    k = _kernel("attention_nol", {"CAUSAL": True})
    text = k.asm["after:async-schedule"]
    assert 'staging_read {ring = "q"};' in text and "staging_in = 0" in text
    parsed = parse_kernel(text)
    assert print_kernel(parsed) == text

    def plain(proto):
        return dataclasses.replace(proto, rings=tuple(dataclasses.replace(r, where="") for r in proto.rings))
    assert plain(protocol_from_ir(parsed)) == plain(schedule_of(k.ir).protocol)
    args, outputs = _args("attention_nol", {"CAUSAL": True})
    ref = _copy(args)
    k(*ref)
    for seed in (0, 1):
        mine = _copy(args)
        run_roles(parsed, mine, seed=seed)
        assert _same(outputs, mine, ref)
