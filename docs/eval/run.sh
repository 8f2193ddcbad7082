#!/bin/bash
# The runs behind docs/evaluation.md (Okapi's read experiments), one after another on one
# cluster: 19 nodes under the scaled HDD model, then a second for the 12 ms runs. About an hour
# and 40 GB of disk.
#   cargo build --release && PATH=$PWD/target/release:$PATH bash docs/eval/run.sh OUTDIR
set -eu
out=${1:-eval-out}
mkdir -p "$out" && cd "$out"
python3 "$(dirname "$0")/traces.py"          # mix.jsonl, median12.jsonl
weft up --nodes 19 --dir ./data --disk-model hdd:position=40ms:rate=30MB > up.log 2>&1 &
up=$!
trap 'kill -INT $up; wait $up' EXIT
sleep 15
export WEFT_SECRET_FILE=$PWD/data/cluster.secret
C="--code rs --k 6 --r 3 --objects 8 --object-size 96MiB"
# Fig. 5: read sizes × stripe widths, beside coupled 3-of-6 and 12-of-15 (6-of-9 is width 6).
weft bench reads $C --stripe-widths 1,2,3,6,8 --coupled 3,12 --read-sizes 2MiB,12MiB,48MiB \
  --clients 32 --duration 15s --json --plot fig5.svg > fig5.json
# Fig. 13: load levels, 12 MiB reads, healthy and with one disk failed.
weft bench reads $C --stripe-widths 1,2,3,6 --read-sizes 12MiB --clients 4,8,16,32,64 \
  --duration 10s --json --plot fig13-normal.svg > fig13-normal.json
weft bench reads $C --stripe-widths 1,2,3,6 --read-sizes 12MiB --clients 4,8,16,32,64 \
  --duration 10s --degraded --json --plot fig13-degraded.svg > fig13-degraded.json
# Fig. 12 (right): degraded read latency, one client.
weft bench reads $C --stripe-widths 3,6,12 --read-sizes 1MiB,24MiB,96MiB --clients 1 \
  --duration 10s --degraded --json --plot fig12.svg > fig12.json
# Fig. 6: a Google-like read-size mix, replayed from a trace.
weft bench reads $C --stripe-widths 1,2,3,6 --trace mix.jsonl --clients 32 --duration 15s \
  --json > fig6.json
# §4.4: the degraded-read cache, 1 MiB sequential reads of every object once.
weft bench reads $C --stripe-widths 2 --coupled 6 --read-sizes 1MiB --pattern sequential \
  --clients 1 --duration 60s --degraded --degraded-cache 0,256MiB --json > cache.json
weft bench reads --code hh-xor+ --k 6 --r 3 --objects 8 --object-size 96MiB \
  --stripe-widths 2 --read-sizes 1MiB --pattern sequential --clients 1 --duration 60s \
  --degraded --degraded-cache 0,256MiB --json > cache-hh.json
weft bench reads $C --stripe-widths 2 --read-sizes 1MiB --pattern sequential --clients 1 \
  --duration 60s --degraded --failed-disks 2 --degraded-cache 0,256MiB --json > cache-2.json

# A second cluster, positioning for 12 ms (a 7200 RPM drive's seek plus half a turn; scaled
# five-fold like the first): 12 MB GETs of whole objects, and the advisor.
kill -INT $up; wait $up
weft up --nodes 19 --dir ./data12 --disk-model hdd:position=60ms:rate=30MB > up12.log 2>&1 &
up=$!
sleep 15
export WEFT_SECRET_FILE=$PWD/data12/cluster.secret
weft bench reads --code rs --k 6 --r 3 --stripe-widths 2,6 --read-sizes 12MB --objects 190 \
  --object-size 12MB --bucket whole12 --clients 32,64,96 --duration 30s --json \
  --plot fig5-12mb.svg > fig5-12mb.json
# §4.6: the stripe-width advisor on a trace of whole-object GETs whose median is 12 MB.
weft advise stripe-width --trace median12.jsonl --code rs --k 6 --r 3 --bucket advisor \
  --clients 32 --duration 20s --json --plot advise.svg > advise.json
