#!/bin/bash
# Per-iteration compute seconds, share of distances and peak RSS of harp kmeans on the peers
# script's data, --assign gemm / yinyang / hamerly, f32 input, 1 worker x 2 threads: 20 iterations of each
# path twice (interleaved), then runs to --tolerance 1e-4. Data: scripts/bench-kmeans-peers.sh
# --shapes A,B writes it (DATA=its --data-dir otherwise). Peak RSS from /usr/bin/time.
H=${HARP:-target/release/harp}
O=${OUT:-/tmp/bench-kmeans-paths}
mkdir -p "$O"
D=${DATA:-target/bench-kmeans-peers/data}
run() { # shape-dir init assign precision iterations [extra...]
  local dir=$1 init=$2 a=$3 p=$4 n=$5; shift 5
  local out=$O/out-$a-$p
  HARP_KMEANS_FILTERS=1 /usr/bin/time -f "%M" -o $O/rss $H kmeans --workers 1 --threads 2 --iterations $n \
    --precision $p --format f32 --input $D/$dir/points --init $D/$dir/$init --assign $a \
    --output $out --overwrite "$@" > /dev/null 2> $O/err || echo "FAILED $dir $a $p"
  python3 -c "
import json;s=json.load(open('$out/summary.json'));it=s['iterations']
print('$dir', '$a', '$p', '$*', 'stop', s.get('stop_reason'), 'iterations', len(it), 'total_compute_s %.2f'%sum(i['compute_s'] for i in it), 'peak_rss_mb %d'%($(cat $O/rss)//1024))
print('  s:', ' '.join('%.3f'%i['compute_s'] for i in it))
print('  distances:', ' '.join('%.3f'%i['distances'] if i.get('distances') is not None else '-' for i in it))
kept=[l.split('kept ')[1].split(',')[0] for l in open('$O/err') if 'kept after exact' in l]
if kept: print('  kept without a distance, per iteration:', ' '.join(kept))"
}
uptime
for a in gemm yinyang hamerly; do run B-n100000-d512-seed2 init-k1000.txt $a f32 20; done
for a in gemm yinyang hamerly; do run A-n1000000-d32-seed1 init-k256.txt $a f32 20; done
for a in hamerly yinyang gemm; do run B-n100000-d512-seed2 init-k1000.txt $a f32 20; done
for a in hamerly yinyang gemm; do run A-n1000000-d32-seed1 init-k256.txt $a f32 20; done
uptime
for a in gemm yinyang; do run B-n100000-d512-seed2 init-k1000.txt $a f64 200 --tolerance 1e-4; done
for a in gemm yinyang hamerly; do run A-n1000000-d32-seed1 init-k256.txt $a f32 200 --tolerance 1e-4; done
uptime
