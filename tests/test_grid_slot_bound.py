"""grid keeps one CTA per tile where a persistent loop would have to put a store's staging in the one
slot of a tile loaded once per tile (``grid.slot_bound``): attention_nol at D = 256, causal or not,
under lowering='general'. There the persistent loop starts the next tile's Q only once this tile's
stores have read the staging, and its tile walk cost the consumers 16 registers beside level 2
(about 236 of the 232 they get: ptxas spilled 8 bytes), against 220 with one CTA per tile.

What must hold: the decision (IR attribute and explain text), the PTX equal to lowering='auto''s
(which keeps one CTA per tile for tiles loaded once per tile), ptxas with no spills; kernels whose
ring keeps 2 stages beside the staging (D = 128) stay persistent."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkjit
from tkjit.errors import NotAvailableError
from tkjit.passes.hopper import block_loop

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
D256 = [{"D": 256}, {"D": 256, "CAUSAL": True}]


def _compile(constants: dict, lowering: str):
    return tkjit.compile((EXAMPLES / "attention_nol.tk").read_text(), filename="attention_nol.tk",
                         cache=False, constants=constants, lowering=lowering)


def _code(ptx: str) -> str:
    return "\n".join(line for line in ptx.splitlines() if not line.strip().startswith("//"))


@pytest.mark.parametrize("constants", D256, ids=["D256", "D256-causal"])
def test_head_dim_256_keeps_one_cta_per_tile_under_general(constants):
    k = _compile(constants, "general")
    blocks = block_loop(k.ir)
    assert blocks.attrs.get("schedule") != "persistent" and "by_trips" not in blocks.attrs
    text = str(k.explain())
    assert "CTAs, one per tile" in text
    assert "unless that staging took the one slot of %q" in text
    assert "staging in the bytes of tile" not in text  # the pipeline keeps the staging over the ring
    assert _code(k.asm["ptx"]) == _code(_compile(constants, "auto").asm["ptx"])


@pytest.mark.parametrize("constants", D256, ids=["D256", "D256-causal"])
def test_head_dim_256_under_general_does_not_spill(constants):
    k = _compile(constants, "general")
    try:
        sass = k.asm["sass"]
    except NotAvailableError as e:
        pytest.skip(str(e))
    assert not re.search(r"\b(LDL|STL)\b", sass), "spilled"
    fn = k.metadata["ptxas"]["functions"][0]
    assert fn["spill_store_bytes"] == 0 and fn["spill_load_bytes"] == 0
    assert "spills registers" not in str(k.explain())


def test_a_ring_with_two_stages_beside_the_staging_stays_persistent():
    """D = 128: Q (32 KB), the 176-key ring's 2 stages and O's staging fit side by side, so the
    persistent loop needs no slot and keeps its overlap."""
    k = _compile({"D": 128}, "general")
    assert block_loop(k.ir).attrs.get("schedule") == "persistent"
    assert "unless that staging took the one slot" not in str(k.explain())


def test_a_named_persistent_schedule_still_takes_the_slot():
    text = (EXAMPLES / "attention_nol.tk").read_text().replace(
        "in blocks(B, H, N / BQ) {", "in blocks(B, H, N / BQ) schedule(persistent) {")
    k = tkjit.compile(text, filename="attention_nol.tk", cache=False, constants={"D": 256}, lowering="general")
    assert block_loop(k.ir).attrs.get("schedule") == "persistent"
    assert "staging in the bytes of tile %q" in str(k.explain())
