#!/usr/bin/env bash
# The cross-release exchange: every release writes its set, every release
# reads every set, then the writer x reader table.
#
#   PY010=/path/to/python-with-jax-0.10 PY011=... PY012=... \
#     tests/compat/exchange/run_all.sh OUTDIR
#
# Each PY0xx is a Python with that JAX release and jaxpr_io installed. The
# three writes run concurrently, then the three reads (set PARALLEL=0 to run
# one at a time); each step's log is printed when it ends, and kept in
# OUTDIR/logs/. Earlier sets and results in OUTDIR are removed first; the
# compile cache (OUTDIR/.compile-cache) is kept. Exit status: that of the
# table (1 on any unexpected failure), or 1 if a step itself failed.
set -u
if [[ $# -ne 1 || -z "${PY010:-}" || -z "${PY011:-}" || -z "${PY012:-}" ]]; then
  echo "usage: PY010=... PY011=... PY012=... $0 OUTDIR" >&2
  exit 2
fi
outdir=$(mkdir -p "$1" && cd "$1" && pwd)
cd "$(dirname "$0")/../../.."   # the repository root: tests/ is a package
pythons=("$PY010" "$PY011" "$PY012")
parallel=${PARALLEL:-1}

for manifest in "$outdir"/*/manifest.json; do
  [[ -e "$manifest" ]] && rm -rf "$(dirname "$manifest")"
done
rm -f "$outdir"/results-*.json
mkdir -p "$outdir/logs"
status=0

# run_step STEP: runs `python -m tests.compat.exchange.STEP OUTDIR` under every
# Python (concurrently unless PARALLEL=0) and prints each log.
run_step() {
  local step=$1 i pids=() logs=()
  for i in "${!pythons[@]}"; do
    local log="$outdir/logs/$step-$i.log"
    logs+=("$log")
    if [[ "$parallel" == 1 ]]; then
      "${pythons[$i]}" -m "tests.compat.exchange.$step" "$outdir" >"$log" 2>&1 &
      pids+=($!)
    else
      "${pythons[$i]}" -m "tests.compat.exchange.$step" "$outdir" >"$log" 2>&1 \
        || { echo "$step under ${pythons[$i]} failed" >&2; status=1; }
    fi
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" \
      || { echo "$step under ${pythons[$i]} failed" >&2; status=1; }
  done
  for log in "${logs[@]}"; do
    grep -v ": written$" "$log" | tail -n 60
  done
}

start=$SECONDS
run_step write
run_step read
echo "exchange took $((SECONDS - start)) s"
"$PY010" -m tests.compat.exchange.table "$outdir" --releases 0.10,0.11,0.12 \
  || status=1
exit $status
