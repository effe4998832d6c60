#!/bin/bash
# ncu of benchmarks/probes/by_trips_binaries.py kernels: OUTDIR D:N LABEL... (L_pers nol_pers nol_grid ...)
out=$1; shape=$2; shift 2
for lab in "$@"; do
  ncu --clock-control none -k regex:attention --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --section MemoryWorkloadAnalysis --section SourceCounters --import-source no \
      -f -o /tmp/rep-$lab python3 benchmarks/probes/by_trips_binaries.py --profile $shape:$lab >/tmp/ncu-$lab.log 2>&1 || tail -5 /tmp/ncu-$lab.log
  { echo "===== $lab"; ncu -i /tmp/rep-$lab.ncu-rep --page details; } >> $out/ncu-$lab.txt
  ncu -i /tmp/rep-$lab.ncu-rep --page source --csv --print-source sass > /tmp/sass-$lab.csv 2>/dev/null
  { echo "===== $lab SASS stalls"; python3 benchmarks/ncu_sass_stalls.py /tmp/sass-$lab.csv 25; } >> $out/ncu-$lab.txt 2>&1
done
