"""On a GPU: stream-cols{cluster=k} (a row block's columns split over a cluster of k CTAs, row
reductions combined through distributed shared memory) on every norm example and the softmax
example at D = 4096 and 8192, k = 2, 4, 8 and auto, with the push exchange (the default: st.async
into every peer, one local mbarrier wait) and, at auto, the barrier exchange, at row counts that
are and are not multiples of BR, outputs poisoned with NaN and surrounded by poison (nothing
written outside them), against float64 torch and (R <= 40, D = 4096) against the interpreter
running the same IR with its CTAs in threads."""
from __future__ import annotations

import pytest
from test_norms_gpu import PORTABLE, _run

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cluster, exchange", [("2", "push"), ("4", "push"), ("8", "push"), ("auto", "push"),
                                               ("auto", "barrier")])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm", "softmax"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_row_block_split_over_a_cluster_on_the_gpu(name, d, cluster, exchange):
    for r in (1000, 33):
        kernel = _run(name, d, r, f"{PORTABLE}{{cluster={cluster} exchange={exchange}}}")
        k = kernel.metadata.get("cluster", [1])[0]
        if cluster != "auto":
            assert k == int(cluster)
        ir = kernel.asm["after:stream-cols"]
        assert (k > 1) == ("cluster_sum" in ir or "cluster_moments" in ir)
        assert (k > 1) == (f'exchange = "{exchange}"' in ir)
        assert ("st.async" in kernel.asm["ptx"]) == (k > 1 and exchange == "push")
