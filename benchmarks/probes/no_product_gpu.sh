#!/bin/bash
# GPU probe for issue 17's no-product rows (session 15, helper noprod):
#   benchmarks/probes/no_product_gpu.sh OUTDIR [ab] [tests] [ncu] [variants]
# ab: benchmarks/no_product_ab.py (general, auto and the register-tile backend, same run);
# tests: the GPU tests of the norms, the no-product kernels and the attention backward (its row
# sums take the general lowering under auto); ncu: softmax D=1024 (the same CTAs an SM on both
# backends) general vs register-tile, details page and SASS stall table; variants: A/Bs of the
# general kernel at a pinned .maxnreg (reg-budget{maxnreg}). File names carry no '=' (the device
# returns no such file).
out=$1; shift
P='canonicalize,stream-cols,mask-branch,scale-fold,layout,row-sums,branch-tail,grid,warp-spec,pipeline,smem-plan,own-trips,reg-budget{maxnreg=CAP},epilogue,mbarrier,async-schedule'
for what in "$@"; do
  case $what in
    ab) timeout 120 python3 benchmarks/no_product_ab.py --out $out/ab.json ;;
    tests)
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_norms_gpu.py tests/gpu/test_general_no_product_gpu.py \
        tests/gpu/test_norms_cluster_gpu.py "tests/gpu/test_attention_variants_gpu.py::test_backward_against_float64_autograd" \
        > $out/gpu_tests.log 2>&1; echo "tests rc=$?"; tail -4 $out/gpu_tests.log ;;
    ncu)
      for low in general register-tile; do
        f="$out/ncu_softmax_1024_$low.txt"
        timeout 45 ncu --clock-control none -k regex:'^softmax' --launch-skip 2 --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
          --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters --import-source no \
          -f -o /tmp/rep python3 benchmarks/no_product_ab.py --profile "softmax D=1024:$low" > /tmp/ncu.log 2>&1 || tail -5 /tmp/ncu.log
        ncu -i /tmp/rep.ncu-rep --page details > "$f" 2>&1
        ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass > /tmp/sass.csv 2>/dev/null
        { echo "===== SASS stalls"; python3 benchmarks/ncu_sass_stalls.py /tmp/sass.csv 25; } >> "$f" 2>&1
        echo "== ncu softmax D=1024 $low: $(grep -E 'Duration|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|Registers Per|Block Limit (Registers|Shared)|Executed Instructions  ' "$f" | tr -s ' ' | tr '\n' ';')"
      done ;;
    variants)
      for v in "rmsnorm D=1024:64" "softmax D=1024:56"; do
        row=${v%:*}; cap=${v##*:}; name=$(echo "$row" | tr -c 'A-Za-z0-9\n' '_')
        echo "== $row maxnreg $cap"
        timeout 40 python3 benchmarks/no_product_ab.py --only "$row" --general-pipeline "${P/CAP/$cap}" --out "$out/var_${name}_$cap.json"
      done ;;
  esac
done
