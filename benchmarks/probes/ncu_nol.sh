#!/bin/bash
# ncu of examples/attention.tk and attention_nol.tk through the general lowering, each the binary
# its launch picks at the shape (tkjit/trip_dispatch.py), third launch: OUTDIR D:N[:causal]
# Writes OUTDIR/ncu-<kernel>.txt (details + benchmarks/ncu_sass_stalls.py) and OUTDIR/sass-<kernel>.csv.
out=$1; shape=$2
for lab in attention attention_nol; do
  timeout ${NCU_TIMEOUT:-100} ncu --clock-control none -k "regex:^${lab}\$" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --section SourceCounters --import-source no \
      -f -o /tmp/rep-$lab python3 benchmarks/attention_general.py --nol --profile $shape >/tmp/ncu-$lab.log 2>&1 \
      || tail -5 /tmp/ncu-$lab.log
  { echo "===== $lab $shape"; ncu -i /tmp/rep-$lab.ncu-rep --page details; } > $out/ncu-$lab.txt 2>&1
  ncu -i /tmp/rep-$lab.ncu-rep --page source --csv --print-source sass > $out/sass-$lab.csv 2>/dev/null
  { echo "===== $lab SASS stalls"; python3 benchmarks/ncu_sass_stalls.py $out/sass-$lab.csv 30; } >> $out/ncu-$lab.txt 2>&1
done
