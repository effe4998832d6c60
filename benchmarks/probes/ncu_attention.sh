#!/bin/bash
# ncu of examples/attention.tk through each lowering, one shape at a time (GPU).
#   benchmarks/probes/ncu_attention.sh OUTDIR 64:16384:causal 128:8192:causal ...
# Per shape and lowering: the third launch's details page (speed of light, warp states,
# scheduler, occupancy, memory) and the SASS stall summary (benchmarks/ncu_sass_stalls.py),
# into OUTDIR/ncu-<shape>.txt.
out=$1; shift
for shape in "$@"; do
  f=$out/ncu-${shape//:/-}.txt
  for low in general template; do
    ncu --clock-control none -k regex:attention --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section SourceCounters --import-source no \
        -f -o /tmp/rep-$low python3 benchmarks/attention_general.py --profile $shape:$low >/tmp/ncu-$low.log 2>&1 \
      || { echo "ncu failed for $shape $low"; tail -20 /tmp/ncu-$low.log; }
    { echo "===== $shape $low"; ncu -i /tmp/rep-$low.ncu-rep --page details; } >> $f
    ncu -i /tmp/rep-$low.ncu-rep --page source --csv --print-source sass > /tmp/sass-$low.csv 2>/dev/null
    { echo "===== $shape $low SASS stalls"; python3 benchmarks/ncu_sass_stalls.py /tmp/sass-$low.csv 30; } >> $f 2>&1
  done
done
