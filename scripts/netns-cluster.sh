#!/usr/bin/env bash
# netns-cluster.sh - emulate N hosts on one Linux machine with network
# namespaces, bridges and tc shaping, to benchmark Harp-RS collectives at a
# controlled bandwidth.  Needs root, iproute2 (ip, tc, ss), iputils-ping and,
# for `selftest`, iperf3 and coreutils `timeout`.
#
# USAGE
#   netns-cluster.sh up N [--rate R] [--racks K --uplink U] [--uneven SEED]
#                         [--host-rate H] [--prefix P] [--delay D]
#   netns-cluster.sh down [--prefix P]
#   netns-cluster.sh exec I CMD...      run CMD in host I's namespace (0-based);
#                                       CMD's exit code is passed through
#   netns-cluster.sh hosts [--port BASE] [--prefix P]
#                                       print one `ip:port` line per host in
#                                       rank order (port BASE+i, BASE 7700);
#                                       with racks, `#rack K` precedes the
#                                       first host of each rack
#   netns-cluster.sh status [--prefix P]
#   netns-cluster.sh selftest [N]       bring up shapes, measure with iperf3,
#                                       assert, tear down (N >= 4, default 4)
#
#   Defaults: prefix `harp` (or $NETNS_CLUSTER_PREFIX; `exec` only uses that
#   variable), rate 200mbit, no racks, no delay, even rates.
#   Rates use tc syntax (bit/kbit/mbit/gbit, kibit/mibit/gibit, bps/kbps/...;
#   a bare number is bit/s).  Delays use tc time syntax (100us, 1ms, ...).
#   Bad arguments print the usage and exit 2; runtime failures exit 1.
#
# TOPOLOGY
#   * Host i (0 <= i < N <= 254) is namespace ${P}h<i>; its interface `eth0`
#     has 10.77.0.(i+1)/16.  `lo` is up in every namespace; IPv6 is disabled
#     in all of them (no RS/DAD chatter in the measurements).
#   * Everything else lives in the switch namespace ${P}sw; nothing is added
#     to the root namespace.  Host i's veth peer there is `h<i>`.
#   * Flat: all `h<i>` are ports of bridge `core`.
#   * --racks K --uplink U: host i is in rack floor(i*K/N) (contiguous
#     blocks, 1 <= K <= N).  Rack k has bridge `rack<k>`, joined to `core` by
#     the veth pair rk<k>up (port of rack<k>) / rk<k>dn (port of core).  Both
#     ends are shaped to U, so each direction of a rack uplink carries at most
#     U (rk<k>up egress = rack->core, rk<k>dn egress = core->rack).
#
# SHAPING (tc htb everywhere; leaf qdisc fq_codel if the kernel has it,
#          otherwise pfifo; burst = max(32 KB, 4 ms at the rate))
#   * send:    htb on host eth0 (egress, inside ${P}h<i>): class 1:1 at R,
#              default child 1:10 ceil R.
#   * receive: htb on the switch-side peer h<i> (its egress is the host's
#              ingress), rate R.
#   * --delay D: the host-egress leaves become `netem delay D` (htb root,
#              netem leaf), i.e. one-way delay D per host, RTT 2*D between
#              two hosts.  Requires sch_netem; `up` fails clearly without it.
#   * --uneven SEED (non-negative integer): every host pair {a,b} gets a
#              rate R/d, d in {1,2,4}, drawn deterministically from (SEED,
#              min(a,b), max(a,b)), hence symmetric.  On host a's eth0 a
#              child class 1:<100+b> (ceil R/d) under 1:1 (ceil R) gets the
#              traffic for 10.77.0.(b+1) through a u32 filter (the kernel
#              here lacks flower, u32 works everywhere).  Non-IP traffic
#              (ARP) uses 1:10.  The receive limit R stays per host.
#              `status` prints the table as an N x N matrix of Mbit/s
#              (row = sender, column = receiver, "-" on the diagonal).
#   * --host-rate H (only with --uneven; H >= R): each host sends and
#              receives at most H in all (class 1:1 and the switch-side
#              limit), while each pair keeps its R/d.  With H = R (the
#              default) a host's own link is the limit of a gather or a
#              scatter; with H > R the pairs are (as between cloud VMs whose
#              pair throughput depends on placement, CMPI's setting), e.g.
#              a root receives from several 50 Mbit/s pairs at once.
#
# STATE
#   The configuration is stored as the ifalias of bridge `core` in ${P}sw,
#   so it disappears with the namespaces; `hosts`/`status` read it back.
#
# BEHAVIOUR
#   * `up` refuses to run when any namespace ${P}sw or ${P}h<digits> exists
#     (run `down` first); a partially built cluster is torn down on failure.
#     It waits (max ~5 s) until host 0 pings every other host.
#   * `down` kills processes still running inside those namespaces (TERM,
#     then KILL after 2 s), deletes the namespaces (which deletes all
#     veths/bridges) and exits 0 when there is nothing to remove.  Only names
#     ${P}sw and ${P}h<digits> are touched.
#   * `selftest` uses prefix `harpst` (NETNS_CLUSTER_SELFTEST_PREFIX), and
#     runs: (1) flat 200mbit: iperf3 h0->h1 and ping between all pairs;
#     (2) 2 racks, 200mbit, uplink 100mbit: intra-rack h0->h1 (~200) and
#     inter-rack h0->h(N-1) (~100); (3) uneven seed 42: one reduced pair vs
#     its table entry; (4) the same with --host-rate 800mbit: that pair again,
#     and all other hosts sending to h0 at once against min(800, the sum of
#     their pair rates to h0).  Pass window: measured/configured in [0.85, 1.05]
#     (iperf3 -J receiver bits_per_second, -t 3 after a 1 s omitted warm-up).
#     Prints configured vs measured, then `selftest: N passed, M failed`;
#     exits 1 on any failure; always tears down.  Takes ~30-40 s.
#   * Every wait is bounded (timeout wrappers, deadline loops).
set -euo pipefail

PROG=${0##*/}
SELF=$(readlink -f "$0")
DEFAULT_PREFIX=${NETNS_CLUSTER_PREFIX:-harp}
SELFTEST_PREFIX=${NETNS_CLUSTER_SELFTEST_PREFIX:-harpst}
NET=10.77.0
META_TAG=harp-netns-v1

usage() {
  cat >&2 <<EOF
usage:
  $PROG up N [--rate R] [--racks K --uplink U] [--uneven SEED] [--host-rate H] [--prefix P] [--delay D]
  $PROG down [--prefix P]
  $PROG exec I CMD...
  $PROG hosts [--port BASE] [--prefix P]
  $PROG status [--prefix P]
  $PROG selftest [N]
defaults: prefix $DEFAULT_PREFIX, rate 200mbit, no racks, no delay (see header of $SELF)
EOF
  exit 2
}

die() { echo "$PROG: $*" >&2; exit 1; }
bad() { echo "$PROG: $*" >&2; usage; }
log() { echo "$PROG: $*" >&2; }

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }
need_cmds() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || die "missing command '$c' (apt-get install -y iproute2 iputils-ping iperf3)"
  done
}

# --- small helpers ---------------------------------------------------------

# uint_in VAL LO HI: VAL is a decimal integer within [LO, HI]
uint_in() {
  [[ $1 =~ ^[0-9]{1,6}$ ]] || return 1
  (( 10#$1 >= $2 && 10#$1 <= $3 ))
}

check_prefix() {
  [[ $1 =~ ^[A-Za-z][A-Za-z0-9_-]{0,23}$ ]] || bad "bad prefix '$1' (letters, digits, _ and -, max 24)"
}

# parse_rate STR -> integer bit/s on stdout (tc syntax); non-zero if invalid
parse_rate() {
  local s=${1,,} num unit mult
  [[ $s =~ ^([0-9]+(\.[0-9]+)?)([a-z]*)$ ]] || return 1
  num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
  case $unit in
    ''|bit) mult=1 ;;
    kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;; tbit) mult=1000000000000 ;;
    kibit) mult=1024 ;; mibit) mult=1048576 ;; gibit) mult=1073741824 ;;
    bps) mult=8 ;; kbps) mult=8000 ;; mbps) mult=8000000 ;; gbps) mult=8000000000 ;;
    kibps) mult=8192 ;; mibps) mult=8388608 ;; gibps) mult=8589934592 ;;
    *) return 1 ;;
  esac
  awk -v n="$num" -v m="$mult" 'BEGIN { v = n * m; if (v < 8000 || v > 1e12) exit 1; printf "%.0f\n", v }'
}

# fmt_rate BITS -> compact tc-style string (200mbit, 1gbit, 12500kbit)
fmt_rate() {
  local b=$1
  if (( b % 1000000000 == 0 )); then echo "$((b / 1000000000))gbit"
  elif (( b % 1000000 == 0 )); then echo "$((b / 1000000))mbit"
  elif (( b % 1000 == 0 )); then echo "$((b / 1000))kbit"
  else echo "${b}bit"; fi
}

# fmt_mbit BITS -> "191.2mbit"
fmt_mbit() { awk -v b="$1" 'BEGIN { printf "%.1fmbit\n", b / 1e6 }'; }

# htb_opts BITS -> "rate ... ceil ... burst ... cburst ... quantum ..."
htb_opts() {
  local bits=$1 ceil=${2:-$1} burst
  burst=$(( ceil / 8 / 250 ))                 # 4 ms worth of bytes at ceil
  (( burst < 32768 )) && burst=32768
  echo "rate ${bits}bit ceil ${ceil}bit burst $burst cburst $burst quantum 60000"
}

# pair_div SEED A B -> 1, 2 or 4 (symmetric, deterministic)
pair_div() {
  local seed=$1 a=$2 b=$3 t h
  if (( a > b )); then t=$a a=$b b=$t; fi
  h=$(( (seed * 2654435761 + a * 2246822519 + b * 3266489917 + 374761393) & 0xFFFFFFFF ))
  h=$(( ((h ^ (h >> 15)) * 2246822519) & 0xFFFFFFFF ))
  h=$(( ((h ^ (h >> 13)) * 3266489917) & 0xFFFFFFFF ))
  h=$(( h ^ (h >> 16) ))
  echo $(( 1 << (h % 3) ))
}

rack_of() { echo $(( $1 * $3 / $2 )); }     # rack_of I N K
host_ns() { echo "${1}h$2"; }               # host_ns P I
host_ip() { echo "$NET.$(( $1 + 1 ))"; }

# list_ns P -> names of this cluster's namespaces, one per line
list_ns() {
  local p=$1
  ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E "^${p}(sw|h[0-9]+)\$" || true
}

# load_meta P -> sets M_N M_RATE M_RACKS M_UPLINK M_SEED M_DELAY M_LEAF
load_meta() {
  local p=$1 alias kv
  ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "${p}sw" ||
    die "no cluster with prefix '$p' (run '$PROG up N --prefix $p')"
  alias=$(ip netns exec "${p}sw" cat /sys/class/net/core/ifalias 2>/dev/null) || alias=
  [[ $alias == "$META_TAG "* ]] || die "namespace ${p}sw has no cluster metadata (not created by $PROG?)"
  M_N='' M_RATE='' M_HOST='' M_RACKS=0 M_UPLINK=0 M_SEED=- M_DELAY=- M_LEAF='?'
  for kv in ${alias#"$META_TAG "}; do
    case $kv in
      n=*) M_N=${kv#n=} ;;
      rate=*) M_RATE=${kv#rate=} ;;
      host=*) M_HOST=${kv#host=} ;;
      racks=*) M_RACKS=${kv#racks=} ;;
      uplink=*) M_UPLINK=${kv#uplink=} ;;
      seed=*) M_SEED=${kv#seed=} ;;
      delay=*) M_DELAY=${kv#delay=} ;;
      leaf=*) M_LEAF=${kv#leaf=} ;;
    esac
  done
  [[ $M_N =~ ^[0-9]+$ && $M_RATE =~ ^[0-9]+$ ]] || die "corrupt cluster metadata: $alias"
  [[ -n $M_HOST ]] || M_HOST=$M_RATE
}

# --- shaping ---------------------------------------------------------------

LEAF=pfifo
UP_PREFIX=

# probe_qdisc NS KIND ARGS... : can this kernel instantiate the qdisc?
probe_qdisc() {
  local ns=$1 ok=1; shift
  ip -n "$ns" link add nprobe0 type veth peer name nprobe1
  if tc -n "$ns" qdisc add dev nprobe0 root "$@" >/dev/null 2>&1; then ok=0; fi
  ip -n "$ns" link del nprobe0
  return "$ok"
}

# add_leaf: netem when delayed, else fq_codel if available, else pfifo
add_leaf() {   # add_leaf NS DEV PARENT HANDLE DELAY
  local ns=$1 dev=$2 parent=$3 handle=$4 delay=$5
  if [[ $delay != - ]]; then
    tc -n "$ns" qdisc add dev "$dev" parent "$parent" handle "$handle" netem delay "$delay" limit 10000
  elif [[ $LEAF == fq_codel ]]; then
    tc -n "$ns" qdisc add dev "$dev" parent "$parent" handle "$handle" fq_codel
  else
    tc -n "$ns" qdisc add dev "$dev" parent "$parent" handle "$handle" pfifo limit 1000
  fi
}

# shape_simple NS DEV BITS [DELAY]: htb root 1:, 1:1 at BITS, default leaf 1:10
shape_simple() {
  local ns=$1 dev=$2 bits=$3 delay=${4:--}
  tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 10
  # htb_opts output is deliberately word-split (here and below)
  # shellcheck disable=SC2046
  tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb $(htb_opts "$bits")
  # shellcheck disable=SC2046
  tc -n "$ns" class add dev "$dev" parent 1:1 classid 1:10 htb $(htb_opts "$bits")
  add_leaf "$ns" "$dev" 1:10 10: "$delay"
}

# shape_uneven NS I N BITS SEED DELAY HBITS: per-destination classes on host egress,
# pair j at BITS/d under a host class of HBITS
shape_uneven() {
  local ns=$1 i=$2 n=$3 bits=$4 seed=$5 delay=$6 hbits=$7 j div pr guar
  guar=$(( bits / n ))
  tc -n "$ns" qdisc add dev eth0 root handle 1: htb default 10
  # shellcheck disable=SC2046
  tc -n "$ns" class add dev eth0 parent 1: classid 1:1 htb $(htb_opts "$hbits")
  # shellcheck disable=SC2046
  tc -n "$ns" class add dev eth0 parent 1:1 classid 1:10 htb $(htb_opts "$guar" "$bits")
  add_leaf "$ns" eth0 1:10 10: "$delay"
  for (( j = 0; j < n; j++ )); do
    (( j == i )) && continue
    div=$(pair_div "$seed" "$i" "$j")
    pr=$(( bits / div ))
    # classid/handle minors are parsed as hex by tc; decimal digits stay unique
    # shellcheck disable=SC2046
    tc -n "$ns" class add dev eth0 parent 1:1 classid "1:$((100 + j))" htb $(htb_opts "$(( guar < pr ? guar : pr ))" "$pr")
    add_leaf "$ns" eth0 "1:$((100 + j))" "$((100 + j)):" "$delay"
    tc -n "$ns" filter add dev eth0 parent 1: protocol ip prio 1 u32 \
      match ip dst "$(host_ip "$j")/32" flowid "1:$((100 + j))"
  done
}

# --- commands --------------------------------------------------------------

ns_quiet() {   # ns_quiet NS: lo up, no IPv6
  local ns=$1
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1 || true
}

cmd_up() {
  local n='' rate=200mbit racks='' uplink='' seed='' prefix=$DEFAULT_PREFIX delay='' hrate=''
  [[ $# -ge 1 ]] || bad "up: missing N"
  n=$1; shift
  uint_in "$n" 1 254 || bad "up: N must be an integer in 1..254"
  n=$((10#$n))
  while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || bad "up: option $1 needs a value"
    case $1 in
      --rate) rate=$2 ;;
      --racks) racks=$2 ;;
      --uplink) uplink=$2 ;;
      --uneven) seed=$2 ;;
      --host-rate) hrate=$2 ;;
      --prefix) prefix=$2 ;;
      --delay) delay=$2 ;;
      *) bad "up: unknown option '$1'" ;;
    esac
    shift 2
  done
  check_prefix "$prefix"
  local rbits ubits=0 k=0
  rbits=$(parse_rate "$rate") || bad "up: bad rate '$rate'"
  if [[ -n $racks || -n $uplink ]]; then
    [[ -n $racks && -n $uplink ]] || bad "up: --racks and --uplink go together"
    uint_in "$racks" 1 "$n" || bad "up: --racks must be in 1..N"
    ubits=$(parse_rate "$uplink") || bad "up: bad uplink rate '$uplink'"
    k=$((10#$racks))
  fi
  if [[ -n $seed ]]; then [[ $seed =~ ^[0-9]{1,9}$ ]] || bad "up: --uneven SEED must be a non-negative integer"; else seed=-; fi
  local hbits=$rbits
  if [[ -n $hrate ]]; then
    [[ $seed != - ]] || bad "up: --host-rate needs --uneven (pairs at R/d, each host at H)"
    hbits=$(parse_rate "$hrate") || bad "up: bad host rate '$hrate'"
    (( hbits >= rbits )) || bad "up: --host-rate ($hrate) must be at least --rate ($rate)"
  fi
  if [[ -n $delay ]]; then
    [[ $delay =~ ^[0-9]+(\.[0-9]+)?(s|sec|secs|ms|msec|msecs|us|usec|usecs)?$ ]] || bad "up: bad delay '$delay'"
  else delay=-; fi
  need_root; need_cmds ip tc ping

  local existing
  existing=$(list_ns "$prefix")
  [[ -z $existing ]] || die "namespaces with prefix '$prefix' already exist ($(echo "$existing" | tr '\n' ' ' | sed 's/ $//')); run '$PROG down --prefix $prefix' first"

  # Anything failing from here on tears the partial cluster down.
  UP_PREFIX=$prefix
  trap 'st=$?; if (( st != 0 )); then log "up failed, tearing down"; do_down "$UP_PREFIX" >/dev/null 2>&1 || true; fi' EXIT

  local sw="${prefix}sw" i r ns br
  ip netns add "$sw"
  ns_quiet "$sw"
  if probe_qdisc "$sw" fq_codel; then LEAF=fq_codel; else LEAF=pfifo; fi
  if [[ $delay != - ]] && ! probe_qdisc "$sw" netem delay "$delay"; then
    die "--delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM / sch_netem)"
  fi
  ip -n "$sw" link add core type bridge stp_state 0
  ip -n "$sw" link set core alias "$META_TAG n=$n rate=$rbits host=$hbits racks=$k uplink=$ubits seed=$seed delay=$delay leaf=$LEAF"
  ip -n "$sw" link set core up
  for (( r = 0; r < k; r++ )); do
    ip -n "$sw" link add "rack$r" type bridge stp_state 0
    ip -n "$sw" link set "rack$r" up
    ip -n "$sw" link add "rk${r}up" type veth peer name "rk${r}dn"
    ip -n "$sw" link set "rk${r}up" master "rack$r"
    ip -n "$sw" link set "rk${r}dn" master core
    shape_simple "$sw" "rk${r}up" "$ubits"
    shape_simple "$sw" "rk${r}dn" "$ubits"
    ip -n "$sw" link set "rk${r}up" up
    ip -n "$sw" link set "rk${r}dn" up
  done
  for (( i = 0; i < n; i++ )); do
    ns=$(host_ns "$prefix" "$i")
    ip netns add "$ns"
    ns_quiet "$ns"
    ip -n "$sw" link add "h$i" type veth peer name eth0 netns "$ns"
    if (( k > 0 )); then br="rack$(rack_of "$i" "$n" "$k")"; else br=core; fi
    ip -n "$sw" link set "h$i" master "$br"
    shape_simple "$sw" "h$i" "$hbits"                       # receive limit
    if [[ $seed != - ]]; then
      shape_uneven "$ns" "$i" "$n" "$rbits" "$seed" "$delay" "$hbits" # send, per pair
    else
      shape_simple "$ns" eth0 "$rbits" "$delay"              # send limit
    fi
    ip -n "$ns" addr add "$(host_ip "$i")/16" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "h$i" up
  done

  # Readiness: host 0 must reach every host (bounded: ~5 s overall).
  local deadline=$(( SECONDS + 5 )) ok
  for (( i = 1; i < n; i++ )); do
    ok=0
    while (( SECONDS <= deadline )); do
      if ip netns exec "$(host_ns "$prefix" 0)" ping -c1 -W1 -q "$(host_ip "$i")" >/dev/null 2>&1; then ok=1; break; fi
      sleep 0.2
    done
    (( ok )) || die "host 0 cannot reach host $i ($(host_ip "$i")) after 5 s"
  done
  trap - EXIT
  echo "up: $n hosts, prefix $prefix, rate $(fmt_rate "$rbits")$( (( hbits != rbits )) && echo " per pair, host $(fmt_rate "$hbits")")$( (( k > 0 )) && echo ", $k racks, uplink $(fmt_rate "$ubits")")$([[ $seed != - ]] && echo ", uneven seed $seed")$([[ $delay != - ]] && echo ", delay $delay"), leaf $LEAF"
}

do_down() {
  local p=$1 names ns pids pid t
  names=$(list_ns "$p")
  if [[ -z $names ]]; then echo "down: no namespaces with prefix $p"; return 0; fi
  for ns in $names; do
    pids=$(ip netns pids "$ns" 2>/dev/null | grep -vx "$$" || true)
    [[ -n $pids ]] || continue
    for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
    for (( t = 0; t < 20; t++ )); do
      [[ -z $(ip netns pids "$ns" 2>/dev/null | grep -vx "$$" || true) ]] && break
      sleep 0.1
    done
    for pid in $(ip netns pids "$ns" 2>/dev/null | grep -vx "$$" || true); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in $names; do ip netns del "$ns" 2>/dev/null || log "could not delete namespace $ns"; done
  [[ -z $(list_ns "$p") ]] || die "some namespaces with prefix '$p' remain"
  echo "down: removed $(echo "$names" | wc -l) namespaces with prefix $p"
}

cmd_down() {
  local prefix=$DEFAULT_PREFIX
  while [[ $# -gt 0 ]]; do
    case $1 in
      --prefix) [[ $# -ge 2 ]] || bad "down: --prefix needs a value"; prefix=$2; shift 2 ;;
      *) bad "down: unknown argument '$1'" ;;
    esac
  done
  check_prefix "$prefix"
  need_root
  do_down "$prefix"
}

cmd_exec() {
  [[ $# -ge 2 ]] || bad "exec: need I and CMD"
  local i=$1 ns; shift
  [[ $i =~ ^[0-9]+$ ]] || bad "exec: host index must be a non-negative integer"
  check_prefix "$DEFAULT_PREFIX"
  ns=$(host_ns "$DEFAULT_PREFIX" "$((10#$i))")
  ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$ns" || die "no namespace $ns (is the cluster up? N too small?)"
  exec ip netns exec "$ns" "$@"
}

cmd_hosts() {
  local base=7700 prefix=$DEFAULT_PREFIX i r last=-1
  while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || bad "hosts: option $1 needs a value"
    case $1 in
      --port) base=$2 ;;
      --prefix) prefix=$2 ;;
      *) bad "hosts: unknown option '$1'" ;;
    esac
    shift 2
  done
  uint_in "$base" 1 65535 || bad "hosts: bad port '$base'"
  base=$((10#$base))
  check_prefix "$prefix"
  load_meta "$prefix"
  (( base + M_N - 1 <= 65535 )) || bad "hosts: ports would exceed 65535"
  for (( i = 0; i < M_N; i++ )); do
    if (( M_RACKS > 0 )); then
      r=$(rack_of "$i" "$M_N" "$M_RACKS")
      if (( r != last )); then echo "#rack $r"; last=$r; fi
    fi
    echo "$(host_ip "$i"):$(( base + i ))"
  done
}

cmd_status() {
  local prefix=$DEFAULT_PREFIX i j r ns tx rx
  while [[ $# -gt 0 ]]; do
    case $1 in
      --prefix) [[ $# -ge 2 ]] || bad "status: --prefix needs a value"; prefix=$2; shift 2 ;;
      *) bad "status: unknown argument '$1'" ;;
    esac
  done
  check_prefix "$prefix"
  load_meta "$prefix"
  echo "cluster '$prefix': $M_N hosts, rate $(fmt_rate "$M_RATE") send+receive per host$( (( M_HOST != M_RATE )) && echo " (pairs; each host at most $(fmt_rate "$M_HOST") in all)")," \
    "racks $( (( M_RACKS > 0 )) && echo "$M_RACKS (uplink $(fmt_rate "$M_UPLINK") each way)" || echo none)," \
    "delay $M_DELAY, uneven seed $M_SEED, leaf $M_LEAF"
  printf '%-5s %-14s %-15s %-5s %12s %12s\n' rank namespace address rack tx_bytes rx_bytes
  for (( i = 0; i < M_N; i++ )); do
    ns=$(host_ns "$prefix" "$i")
    tx=$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes 2>/dev/null || echo '?')
    rx=$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes 2>/dev/null || echo '?')
    if (( M_RACKS > 0 )); then r=$(rack_of "$i" "$M_N" "$M_RACKS"); else r=-; fi
    printf '%-5s %-14s %-15s %-5s %12s %12s\n' "$i" "$ns" "$(host_ip "$i")/16" "$r" "$tx" "$rx"
  done
  if [[ $M_SEED != - ]]; then
    echo "per-pair rate in Mbit/s (row = sender, column = receiver; symmetric; seed $M_SEED):"
    printf '%6s' ""
    for (( j = 0; j < M_N; j++ )); do printf '%7s' "h$j"; done
    echo
    for (( i = 0; i < M_N; i++ )); do
      printf '%6s' "h$i"
      for (( j = 0; j < M_N; j++ )); do
        if (( i == j )); then printf '%7s' -
        else printf '%7s' "$(awk -v b="$(( M_RATE / $(pair_div "$M_SEED" "$i" "$j") ))" 'BEGIN { printf "%g", b / 1e6 }')"; fi
      done
      echo
    done
  fi
}

# --- selftest --------------------------------------------------------------

ST_TMP='' ST_PASS=0 ST_FAIL=0 ST_PORT=5300 ST_ROWS=()

st_cleanup() {
  local f pid
  if [[ -n $ST_TMP && -d $ST_TMP ]]; then
    for f in "$ST_TMP"/*.pid; do
      [[ -f $f ]] || continue
      pid=$(cat "$f" 2>/dev/null || true)
      if [[ $pid =~ ^[0-9]+$ ]]; then kill "$pid" 2>/dev/null || true; fi
    done
    rm -rf "$ST_TMP"
  fi
  timeout 30 "$SELF" down --prefix "$SELFTEST_PREFIX" >/dev/null 2>&1 || true
}

st_row() {   # st_row SHAPE WHAT CONFIGURED MEASURED RATIO OK
  local res=FAIL
  if [[ $6 == 1 ]]; then res=PASS; ST_PASS=$((ST_PASS + 1)); else ST_FAIL=$((ST_FAIL + 1)); fi
  ST_ROWS+=("$(printf '%-7s %-22s %-11s %-11s %-6s %s' "$1" "$2" "$3" "$4" "$5" "$res")")
  echo "  ${ST_ROWS[-1]}"
}

st_up() {   # st_up ARGS... -> 0 if the cluster came up
  local out
  if out=$(timeout 40 "$SELF" up "$@" --prefix "$SELFTEST_PREFIX" 2>&1); then
    echo "  $out"; return 0
  fi
  echo "  up $* FAILED: $out"; return 1
}

st_down() { timeout 30 "$SELF" down --prefix "$SELFTEST_PREFIX" >/dev/null 2>&1 || true; }

# st_measure SRC DST PORT -> measured receiver bit/s on stdout (empty on failure)
st_measure() {
  local src=$1 dst=$2 port=$3 sns dns pidf t json bps
  sns=$(host_ns "$SELFTEST_PREFIX" "$src") dns=$(host_ns "$SELFTEST_PREFIX" "$dst")
  pidf="$ST_TMP/iperf3-$port.pid" json="$ST_TMP/iperf3-$port.json"
  timeout 5 ip netns exec "$dns" iperf3 -s -D -1 -B "$(host_ip "$dst")" -p "$port" \
    -I "$pidf" --logfile "$ST_TMP/server-$port.log" >/dev/null 2>&1 || return 0
  for (( t = 0; t < 50; t++ )); do   # wait for the listener, max 5 s
    ip netns exec "$dns" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    sleep 0.1
  done
  timeout 15 ip netns exec "$sns" iperf3 -c "$(host_ip "$dst")" -B "$(host_ip "$src")" \
    -p "$port" -t 3 -O 1 -J >"$json" 2>/dev/null || true
  if [[ -f $pidf ]]; then kill "$(cat "$pidf")" 2>/dev/null || true; fi
  bps=$(awk '/"sum_received"/ { f = 1 }
             f && /"bits_per_second"/ { v = $2; gsub(/[^0-9.eE+-]/, "", v); print v; exit }' "$json" 2>/dev/null || true)
  [[ -n $bps ]] && awk -v v="$bps" 'BEGIN { printf "%.0f\n", v }'
  return 0
}

# st_check SHAPE SRC DST CONF_BITS LABEL
st_check() {
  local shape=$1 src=$2 dst=$3 conf=$4 label=$5 got ratio ok
  ST_PORT=$((ST_PORT + 1))
  got=$(st_measure "$src" "$dst" "$ST_PORT")
  if [[ -z $got ]]; then
    st_row "$shape" "h$src->h$dst $label" "$(fmt_rate "$conf")" "no-data" - 0
    return 0
  fi
  ratio=$(awk -v g="$got" -v c="$conf" 'BEGIN { printf "%.3f", g / c }')
  ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.85 && r <= 1.05) ? 1 : 0 }')
  st_row "$shape" "h$src->h$dst $label" "$(fmt_rate "$conf")" "$(fmt_mbit "$got")" "$ratio" "$ok"
}

# st_measure_into DST SRC... -> the receiver bit/s of all SRC sending to DST at once, summed
# (empty if any measurement failed)
st_measure_into() {
  local dst=$1 dns src port pids=() sum=0 bps t
  shift
  dns=$(host_ns "$SELFTEST_PREFIX" "$dst")
  for src in "$@"; do
    ST_PORT=$((ST_PORT + 1)); port=$ST_PORT
    timeout 5 ip netns exec "$dns" iperf3 -s -D -1 -B "$(host_ip "$dst")" -p "$port" \
      -I "$ST_TMP/iperf3-$port.pid" --logfile "$ST_TMP/server-$port.log" >/dev/null 2>&1 || return 0
    for (( t = 0; t < 50; t++ )); do
      ip netns exec "$dns" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
      sleep 0.1
    done
  done
  port=$((ST_PORT - $# + 1))
  for src in "$@"; do
    timeout 15 ip netns exec "$(host_ns "$SELFTEST_PREFIX" "$src")" iperf3 -c "$(host_ip "$dst")" \
      -B "$(host_ip "$src")" -p "$port" -t 3 -O 1 -J >"$ST_TMP/into-$port.json" 2>/dev/null &
    pids+=($!)
    port=$((port + 1))
  done
  wait "${pids[@]}" 2>/dev/null || true
  port=$((ST_PORT - $# + 1))
  for src in "$@"; do
    bps=$(awk '/"sum_received"/ { f = 1 }
               f && /"bits_per_second"/ { v = $2; gsub(/[^0-9.eE+-]/, "", v); printf "%.0f", v; exit }' \
      "$ST_TMP/into-$port.json" 2>/dev/null || true)
    [[ -n $bps ]] || return 0
    [[ -f $ST_TMP/iperf3-$port.pid ]] && kill "$(cat "$ST_TMP/iperf3-$port.pid")" 2>/dev/null
    sum=$((sum + bps)); port=$((port + 1))
  done
  echo "$sum"
}

cmd_selftest() {
  local n=4
  if [[ $# -gt 0 ]]; then n=$1; shift; fi
  [[ $# -eq 0 ]] || bad "selftest: too many arguments"
  uint_in "$n" 4 16 || bad "selftest: N must be in 4..16"
  n=$((10#$n))
  need_root; need_cmds ip tc ping ss iperf3 timeout awk
  check_prefix "$SELFTEST_PREFIX"
  local start=$SECONDS i j total okp div rate=200000000 uneven_dst=1 best=1 hostsout expect
  st_down
  ST_TMP=$(mktemp -d /tmp/netns-cluster-selftest.XXXXXX)
  trap st_cleanup EXIT
  trap 'exit 130' INT TERM
  echo "selftest: N=$n, prefix $SELFTEST_PREFIX, pass window [0.85, 1.05] x configured"
  printf '  %-7s %-22s %-11s %-11s %-6s %s\n' shape measurement configured measured ratio result

  # (1) flat
  if st_up "$n" --rate 200mbit; then
    st_check flat 0 1 "$rate" ""
    total=0 okp=0
    for (( i = 0; i < n; i++ )); do
      for (( j = 0; j < n; j++ )); do
        (( i == j )) && continue
        total=$((total + 1))
        if timeout 3 ip netns exec "$(host_ns "$SELFTEST_PREFIX" "$i")" ping -c1 -W1 -q "$(host_ip "$j")" >/dev/null 2>&1; then
          okp=$((okp + 1))
        fi
      done
    done
    st_row flat "ping all pairs" "$total" "$okp ok" - "$( (( okp == total )) && echo 1 || echo 0)"
  else
    st_row flat "up" - - - 0
  fi
  st_down

  # (2) two racks, uplink 100mbit
  if st_up "$n" --rate 200mbit --racks 2 --uplink 100mbit; then
    hostsout=$(NETNS_CLUSTER_PREFIX=$SELFTEST_PREFIX "$SELF" hosts 2>&1 | tr '\n' ' ' || true)
    expect="#rack 0 "
    for (( i = 0; i < n; i++ )); do
      (( i == n / 2 )) && expect+="#rack 1 "
      expect+="$(host_ip "$i"):$((7700 + i)) "
    done
    st_row racks "hosts file" "2 racks" "$( [[ $hostsout == "$expect" ]] && echo match || echo differs)" - \
      "$( [[ $hostsout == "$expect" ]] && echo 1 || echo 0)"
    st_check racks 0 1 "$rate" "intra"
    st_check racks 0 $((n - 1)) 100000000 "inter"
  else
    st_row racks "up" - - - 0
  fi
  st_down

  # (3) uneven, seed 42: measure the most reduced pair from host 0
  for (( j = 1; j < n; j++ )); do
    div=$(pair_div 42 0 "$j")
    if (( div > best )); then best=$div uneven_dst=$j; fi
  done
  if st_up "$n" --rate 200mbit --uneven 42; then
    st_check uneven 0 "$uneven_dst" $(( rate / best )) "seed42"
  else
    st_row uneven "up" - - - 0
  fi
  st_down

  # (4) uneven, seed 42, host rate 4 x 200mbit: the pair still at its rate, and every other
  #     host sending to h0 at once gets min(host rate, sum of the pair rates into h0) through
  local sum_pairs=0 conf got srcs=()
  for (( j = 1; j < n; j++ )); do
    sum_pairs=$(( sum_pairs + rate / $(pair_div 42 "$j" 0) )); srcs+=("$j")
  done
  conf=$(( sum_pairs < 4 * rate ? sum_pairs : 4 * rate ))
  if st_up "$n" --rate 200mbit --uneven 42 --host-rate 800mbit; then
    st_check hostcap 0 "$uneven_dst" $(( rate / best )) "pair"
    got=$(st_measure_into 0 "${srcs[@]}")
    if [[ -z $got ]]; then
      st_row hostcap "all->h0 at once" "$(fmt_rate "$conf")" "no-data" - 0
    else
      local ratio ok
      ratio=$(awk -v g="$got" -v c="$conf" 'BEGIN { printf "%.3f", g / c }')
      ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.85 && r <= 1.05) ? 1 : 0 }')
      st_row hostcap "all->h0 at once" "$(fmt_rate "$conf")" "$(fmt_mbit "$got")" "$ratio" "$ok"
    fi
  else
    st_row hostcap "up" - - - 0
  fi
  st_down

  if [[ -n $(list_ns "$SELFTEST_PREFIX") ]]; then
    st_row all "teardown" "0 ns" "left" - 0
  else
    st_row all "teardown" "0 ns" "0 ns" - 1
  fi
  echo "selftest: $ST_PASS passed, $ST_FAIL failed ($((SECONDS - start)) s)"
  (( ST_FAIL == 0 ))
}

# --- main ------------------------------------------------------------------

[[ $# -ge 1 ]] || usage
cmd=$1; shift
case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  exec) cmd_exec "$@" ;;
  hosts) cmd_hosts "$@" ;;
  status) cmd_status "$@" ;;
  selftest) cmd_selftest "$@" ;;
  -h|--help|help) usage ;;
  *) bad "unknown command '$cmd'" ;;
esac
