# bench-lib.sh - shell functions shared by scripts/bench-netns.sh and scripts/bench-mpi-netns.sh
# (sourced after `set -euo pipefail`; usage prints the calling script's header comment).

PROG=${0##*/}
die() { echo "$PROG: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

# bytes SIZE -> integer bytes (suffixes k, m, g = KiB, MiB, GiB)
bytes() {
  local s=${1,,} n u
  [[ $s =~ ^([0-9]+)([kmg]?)$ ]] || die "bad size $1"
  n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
  case $u in k) echo $(( n << 10 )) ;; m) echo $(( n << 20 )) ;; g) echo $(( n << 30 )) ;; *) echo "$n" ;; esac
}

# default_reps BYTES -> repetitions of a cell that gives none: <=256 KiB 20, <=1 MiB 10,
# <=16 MiB 3, bigger 2
default_reps() {
  if (( $1 <= 262144 )); then echo 20; elif (( $1 <= 1048576 )); then echo 10
  elif (( $1 <= 16777216 )); then echo 3; else echo 2; fi
}

# default_warmup BYTES -> untimed repetitions: 2 below 16 MiB, 1 from 16 MiB
default_warmup() { if (( $1 >= 16777216 )); then echo 1; else echo 2; fi; }
