"""On a GPU: stream-cols' off-by-default options of tests/test_stream_access_options.py on the norm
examples at D = 4096 and 8192 -- the hoisted chunk-loop barriers, the cache hints, and the cluster
of 16 CTAs (a non-portable size the launcher opts in to) -- at row counts that are and are not
multiples of BR, outputs poisoned with NaN and surrounded by poison, against float64 torch
(tests/gpu/test_norms_gpu.py's check)."""
from __future__ import annotations

import pytest
from test_norms_gpu import PORTABLE, _run

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("opts", ["loop_sync=hoist", "store_hint=cs l2_prefetch=256",
                                  "store_hint=evict_first load_hint=evict_first", "loop_sync=hoist reduce=chunk"])
@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm"])
@pytest.mark.parametrize("d", [4096, 8192])
def test_access_options_on_the_gpu(name, d, opts):
    for r in (1000, 33):
        _run(name, d, r, f"{PORTABLE}{{{opts}}}")


@pytest.mark.parametrize("name", ["rmsnorm", "residual_layernorm", "layernorm", "softmax"])
def test_a_cluster_of_16_ctas_on_the_gpu(name):
    for r in (1000, 33):
        kernel = _run(name, 8192, r, f"{PORTABLE}{{cluster=16}}")
        assert kernel.metadata["cluster"] == [16, 1, 1]
