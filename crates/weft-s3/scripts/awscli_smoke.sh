#!/usr/bin/env bash
# aws CLI smoke test of the weft S3 gateway against a running `weft up`.
#
# Usage: awscli_smoke.sh CLUSTER_DIR   (reads CLUSTER_DIR/s3.json)
#
# `aws s3 cp` up and down a big file (200 MiB with WEFT_S3_SCALE=full, else 20 MiB; the CLI
# uploads it in multipart), `aws s3 ls`, `aws s3 sync` of a folder both ways, `aws s3 rm`;
# every file must come back byte-identical, every listing exact. Needs `aws` and python3.
set -euo pipefail
cluster_dir=$1
read_conf() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$cluster_dir/s3.json" "$1"; }
endpoint=$(read_conf endpoint)
export AWS_ACCESS_KEY_ID=$(read_conf access_key)
export AWS_SECRET_ACCESS_KEY=$(read_conf secret_key)
export AWS_DEFAULT_REGION=$(read_conf region)
# weft's own commands sign with the cluster secret `weft up` wrote beside s3.json.
export WEFT_SECRET_FILE=${WEFT_SECRET_FILE:-$cluster_dir/cluster.secret}
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_PAGER=""
aws_s3() { aws --endpoint-url "$endpoint" s3 "$@"; }
say() { printf '[awscli] %s\n' "$*"; }

if [ "${WEFT_S3_SCALE:-ci}" = full ]; then big_mib=200; else big_mib=20; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bucket=s3://awscli-smoke

say "mb $bucket (the CLI cannot send x-weft-policy: WEFT_S3_BUCKET_POLICY=\"--k 4 --r 2\" creates it with weft instead)"
if [ -n "${WEFT_S3_BUCKET_POLICY:-}" ]; then
  # The CLI cannot add headers: create the bucket through weft (same namespace as S3).
  "${WEFT_BIN:-weft}" bucket create awscli-smoke ${WEFT_S3_BUCKET_POLICY} \
    --meta "$(python3 -c "import json;print(json.load(open('$cluster_dir/cluster.json'))['meta'])")" >/dev/null
else
  aws_s3 mb "$bucket"
fi

say "cp up and down a ${big_mib} MiB file"
head -c $((big_mib << 20)) /dev/urandom > "$work/big.bin"
start=$(date +%s.%N)
aws_s3 cp --only-show-errors "$work/big.bin" "$bucket/big/big.bin"
up=$(date +%s.%N)
aws_s3 cp --only-show-errors "$bucket/big/big.bin" "$work/big.back"
down=$(date +%s.%N)
cmp "$work/big.bin" "$work/big.back"
python3 -c "import sys; s,u,d,m=map(float,sys.argv[1:]); print(f'[awscli]   up {u-s:.1f} s ({m/(u-s):.0f} MiB/s), down {d-u:.1f} s ({m/(d-u):.0f} MiB/s)')" "$start" "$up" "$down" "$big_mib"

say "sync a folder up, then down into an empty one"
mkdir -p "$work/tree/a/b" "$work/tree/c" "$work/down"
for i in 1 2 3; do head -c $((i * 70000)) /dev/urandom > "$work/tree/a/file$i"; done
head -c 0 /dev/urandom > "$work/tree/a/b/empty"
head -c 3000000 /dev/urandom > "$work/tree/c/three-mb"
echo "hello" > "$work/tree/top.txt"
# Last-Modified has whole seconds (as in S3): files older than the upload compare as older.
find "$work/tree" -type f -exec touch -d '1 hour ago' {} +
aws_s3 sync --only-show-errors "$work/tree" "$bucket/tree"
aws_s3 sync --only-show-errors "$bucket/tree" "$work/down"
diff -r "$work/tree" "$work/down"
[ -z "$(aws_s3 sync "$bucket/tree" "$work/down")" ] || { echo "second sync down fetched again"; exit 1; }
# A second sync has nothing to do.
[ -z "$(aws_s3 sync "$work/tree" "$bucket/tree")" ] || { echo "second sync uploaded again"; exit 1; }

say "ls: exact listings"
listed=$(aws_s3 ls --recursive "$bucket" | awk '{print $4}' | sort)
expected=$(printf '%s\n' big/big.bin tree/a/b/empty tree/a/file1 tree/a/file2 tree/a/file3 tree/c/three-mb tree/top.txt | sort)
[ "$listed" = "$expected" ] || { echo "ls --recursive: got"; echo "$listed"; exit 1; }
top=$(aws_s3 ls "$bucket/tree/" | awk '{print $NF}' | sort | tr '\n' ' ')
[ "$top" = "a/ c/ top.txt " ] || { echo "ls tree/: got '$top'"; exit 1; }
aws_s3 ls | grep -q ' awscli-smoke$'

say "rm --recursive, rb"
aws_s3 rm --only-show-errors --recursive "$bucket"
[ -z "$(aws_s3 ls --recursive "$bucket")" ] || { echo "objects left after rm"; exit 1; }
aws_s3 rb "$bucket"
say "all checks passed"
