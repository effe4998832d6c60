"""On a GPU: stream-cols{cluster=k} (a row block's columns split over a cluster of k CTAs, row
reductions combined through distributed shared memory) on every norm example at D = 4096 and
8192, k = 2, 4, 8 and auto, at row counts that are and are not multiples of BR, outputs poisoned
with NaN and surrounded by poison (nothing written outside them), against float64 torch and
(R <= 40, D = 4096) against the interpreter running the same IR with its CTAs in threads."""
from __future__ import annotations

import pytest
from test_norms_gpu import PORTABLE, _run

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cluster", ["2", "4", "8", "auto"])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_row_block_split_over_a_cluster_on_the_gpu(name, d, cluster):
    for r in (1000, 33):
        kernel = _run(name, d, r, f"{PORTABLE}{{cluster={cluster}}}")
        k = kernel.metadata.get("cluster", [1])[0]
        if cluster != "auto":
            assert k == int(cluster)
        assert (k > 1) == ("cluster_sum" in kernel.asm["after:stream-cols"])
