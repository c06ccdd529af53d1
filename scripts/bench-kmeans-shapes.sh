#!/bin/bash
# s/iteration of harp kmeans on the three shapes, 1 worker x 2 threads, 10 iterations.
# Data: harp gen points --n 1000000 --dim 32 --seed 7 --init 256 --files 4 --output $D/a
#       harp gen points --n 100000 --dim 512 --seed 8 --init 1000 --files 2 --format f32 --output $D/b
#       harp gen points --n 2000000 --dim 3 --seed 9 --init 10000 --clusters 100 --files 2 --format f32 --output $D/c
H=${HARP:-target/release/harp}
D=${DATA:-/tmp/kmb}
run() { # name precision args...
  local name=$1 p=$2; shift 2
  $H kmeans --workers 1 --threads 2 --iterations 10 --precision $p --output $D/out-$name-$p --overwrite "$@" > /dev/null
  python3 -c "
import json;s=json.load(open('$D/out-$name-$p/summary.json'));it=s['iterations']
tot=sum(i['compute_s']+i['comm_s'] for i in it)
print('$name', '$p', s['assign'], 'mean_s_per_it=%.4f'%(tot/len(it)), 'min=%.4f'%min(i['compute_s'] for i in it), 'load_s=%.2f'%s['load_s'])"
}
uptime
for p in f64 f32; do
run 1Mx32_k256 $p --input $D/a/points --init $D/a/init.txt
run 100Kx512_k1000 $p --input $D/b/points --format f32 --init $D/b/init.txt
run 2Mx3_k10000 $p --input $D/c/points --format f32 --init $D/c/init.txt
done
uptime
