# bench-bound.jq - the lower bound of a `kind: "bench"` record from the measured TCP payload
# rate, used by scripts/bench-netns.sh (records of other kinds pass unchanged):
#   jq -c -f scripts/bench-bound.jq FILE.jsonl
# Needs op, workers (p), bytes (n), median_s, B_bits, B_inter_bits, racks (K).  B = B_bits/8;
# with racks behind an uplink slower than the hosts, B_i = B_inter_bits/8 and the root's rack
# holds ceil(p/K) hosts (netns-cluster.sh: host i in rack floor(i*K/p)).
#   broadcast, reduce   n/B, or n/B_i with racks (every element enters each rack / the
#                       root's rack at least once)
#   allreduce           2(p-1)/p n/B
#   allgather (n = total), reduce-scatter, regroup      (p-1)/p n/B
#   gather (n = total), scatter (n = the root's table)  (p-1)/p n/B (the root's link), or with
#                       racks, if larger, f n/B_i with f = (p - ceil(p/K))/p (the root's uplink)
# With host_rate_bits (netns-cluster.sh --host-rate H: pairs at R/d, each host at most H), B
# is scaled by H/R (rate_bits): no host moves more than H, so the bounds stay lower bounds.
# Adds bound_s, bound_formula, bound_basis ("B" or "B_inter") and ratio = median_s / bound_s.
def bench_bound:
  (if .host_rate_bits != null and .rate_bits != null and .rate_bits > 0
   then .B_bits * .host_rate_bits / .rate_bits / 8 else .B_bits / 8 end) as $B
  | .workers as $p | .bytes as $n | (.racks // 0) as $K
  | (if $K > 1 and .B_inter_bits != null and .B_inter_bits < .B_bits then .B_inter_bits / 8
     else null end) as $Bi
  | (if .op == "broadcast" or .op == "reduce" then
       (if $Bi then [$n / $Bi, "n/B", "B_inter"] else [$n / $B, "n/B", "B"] end)
     elif .op == "allreduce" then [2 * ($p - 1) / $p * $n / $B, "2(p-1)/p n/B", "B"]
     elif .op == "allgather" or .op == "reduce-scatter" or .op == "regroup" then
       [($p - 1) / $p * $n / $B, "(p-1)/p n/B", "B"]
     elif .op == "gather" or .op == "scatter" then
       (if $K > 1 then ($p - ((($p + $K - 1) / $K) | floor)) / $p else 0 end) as $f
       | (if $Bi and $f * $n / $Bi > ($p - 1) / $p * $n / $B
          then [$f * $n / $Bi, "(p-ceil(p/K))/p n/B_inter", "B_inter"]
          else [($p - 1) / $p * $n / $B, "(p-1)/p n/B", "B"] end)
     else [null, null, "B"] end) as $bd
  | . + {bound_s: $bd[0], bound_formula: $bd[1], bound_basis: $bd[2],
         ratio: (if $bd[0] != null and $bd[0] > 0 then .median_s / $bd[0] else null end)};
if .kind == "bench" then bench_bound else . end
