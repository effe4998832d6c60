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

from .tail_split import (GATHER_BATCH, MAX_SLOTS, MIN_TRIPS, SPIN_NS, THREADS, VEC, Split,  # noqa: F401
                         addresses, contribute, contributors, declarations, flag_address, gather,
                         slot_offset, symbols, walk)
