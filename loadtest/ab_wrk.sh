#!/bin/bash
# A/B of two servers running at once: wrk on one then the other in 3 s slices, the order alternating
# per round, so both see the same machine. Prints one line per slice.
#   loadtest/ab_wrk.sh PORT_A PORT_B BODY.json [connections...]   (ROUNDS=4 by default)
set -euo pipefail
a=$1 b=$2 body=$3
shift 3
lua=$(mktemp --suffix .lua)
trap 'rm -f "$lua"' EXIT
printf 'local f = io.open("%s", "rb")\nwrk.method = "POST"\nwrk.body = f:read("*a")\nf:close()\nwrk.headers["Content-Type"] = "application/json"\n' "$body" > "$lua"
if [ $# -eq 0 ]; then set -- 1 8 64; fi
for c in "$@"; do
  for r in $(seq 1 "${ROUNDS:-4}"); do
    if [ $((r % 2)) -eq 1 ]; then order="$a $b"; else order="$b $a"; fi
    for port in $order; do
      rps=$(wrk -t1 -c"$c" -d3s -s "$lua" "http://127.0.0.1:$port/predict" | awk '/Requests\/sec/{print $2}')
      echo "c=$c round=$r port=$port rps=$rps"
    done
  done
done
