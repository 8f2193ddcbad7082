#!/usr/bin/env bash
# Run Versity's S3 conformance suite (versitygw `tests/integration`, driven by the
# `versitygw test <group>` subcommand) against any S3 endpoint, e.g. weft or MinIO, and
# write one per-test PASS/FAIL file, so two runs can be compared.
#
# usage: run.sh [ENDPOINT [ACCESS_KEY [SECRET_KEY]]]  (or set the same names as env vars)
#        run.sh build [SRC_DIR [OUT_BIN]]             (patch + build versitygw, see below)
#        run.sh compare A.tsv B.tsv                   (counts, and the tests whose result differs)
#        run.sh parse LOG STEM                        (re-derive STEM.tsv/.jsonl from a log)
#   e.g. run.sh http://127.0.0.1:9000 testroot testroot-secret-123
#        INSECURE=1 run.sh https://127.0.0.1:8443 AK SK
#        SUBCOMMAND=PutObject_success run.sh http://127.0.0.1:9000 AK SK   (a single test)
#
# environment knobs (all optional):
#   VGW_BIN     the versitygw binary                         [/work/peers/bin/versitygw]
#   SUBCOMMAND  `versitygw test` subcommand to run           [full-flow]
#   INSECURE    1: skip TLS verification (--allow-insecure)  [0]
#   REGION      SigV4 region (global --region flag)          [us-east-1]
#   PARALLEL    1: full-flow --parallel (faster; per-test attribution of panics is then rough) [0]
#   HOST_STYLE  1: virtual-host bucket addressing            [0]
#   PRECLEAN    1: first delete buckets named [my-prefix-]test-bucket-<N> (needs boto3) [1]
#   TIMEOUT     kill the suite after this many seconds, 0 = never [0]
#   OUT_DIR     where the outputs go                         [./versitygw-results]
#   RUN_NAME    output file name stem                        [versitygw-YYYYmmdd-HHMMSS]
#   EXTRA_ARGS  more flags for the subcommand, e.g. "--versioning-enabled"
# Outputs: $OUT_DIR/$RUN_NAME.log (raw output), .tsv (NAME<TAB>PASS|FAIL|NORESULT, sorted),
#          .jsonl (one {"name","status","vgw_admin","error"} per test). The last line printed is
#          `versitygw-tests: P passed, F failed`; exit status 0 only if F is 0 and the suite ended.
# Counting: the suite prints coloured "RUN  NAME", "PASS NAME", "FAIL NAME: error" lines and at
# the end "RAN: r PASS: p FAIL: f". Per test (per RUN line): FAIL if it printed FAIL, else PASS
# if it printed PASS, else NORESULT (its checks passed but teardown failed; counted as failed).
# So P + F = r. A few upstream tests share a name: the second one is listed as NAME#2.
#
# Why full-flow: it is the broadest group of plain S3 API tests (~660: sigv4/presigned auth,
# buckets, objects, multipart, tagging, ACL, policy, CORS, website config, object lock/WORM, POST
# object, streaming payloads, router edge cases). It also holds tests that need versitygw's admin
# API to create users or change bucket owners (IAM_*, AccessControl_*, some ListBuckets/ACL/
# policy/PublicBucket tests): the suite execs `./versitygw admin ...` from its working directory,
# which we leave empty, so these fail at once ("fork/exec ./versitygw"); they are flagged
# "vgw_admin": true and counted on a separate line. The other groups (posix, scoutfs, iam,
# access-control, noacl, data-integrity-etag, website-hosting) test versitygw backends/modes or
# need a dedicated website endpoint. Many tests compare exact error codes AND messages, and
# bucket/object owner IDs with the access key (versitygw's convention, not AWS's canonical IDs).
#
# Patch: upstream, one test that panics (nil/index on an unexpected response - MinIO triggers
# several) aborts the whole suite. `run.sh build` adds tests/integration/weft_recover.go and
# wraps the three test call sites in concurrency.go with recover(), so a panic becomes
# "FAIL NAME: panic (recovered by weft patch): ..." and the run goes on. A stock binary still
# works, with a warning; if it aborts, the summary says the suite's counter is MISSING (exit 3).
#
# State: bucket names are test-bucket-1, -2, ... in every run, and the suite leaves buckets behind
# when tests fail, some holding COMPLIANCE-locked objects no one can delete. PRECLEAN removes what
# it can; for comparable numbers run each time against a FRESH, otherwise EMPTY endpoint
# (ListBuckets_empty_success expects no buckets at all).
#
# versitygw used: github.com/versity/versitygw commit 5d9d54802d890a3f46a6adc9ee55e15a5a59ab86
# (2026-08-19). Build (~1 min with the Go module proxy; rebuild after the patch ~15 s):
#   mkdir -p /work/peers/versitygw && git -C <versitygw.git> archive 5d9d548 | tar -x -C /work/peers/versitygw
#   run.sh build /work/peers/versitygw /work/peers/bin/versitygw
#     (= patch, then: cd /work/peers/versitygw && go build -o /work/peers/bin/versitygw ./cmd/versitygw)
set -uo pipefail

parse_log() {  # LOG STEM: writes STEM.tsv and STEM.jsonl, prints the summary
  python3 - "$1" "$2" <<'EOF'
import json, os, re, sys
log, stem = sys.argv[1], sys.argv[2]
text = open(log, encoding="utf-8", errors="replace").read()
# Markers are colour-coded: \e[36mRUN  \e[0mNAME / \e[32mPASS \e[0mNAME / \e[31mFAIL \e[0mNAME: err.
# Search anywhere in a line: a failed teardown prints its message without a newline. A few
# upstream tests share a name; the 2nd run of NAME is recorded as NAME#2 (exact when sequential).
mark = re.compile(r"\x1b\[(?:31|32|36)m(RUN|PASS|FAIL) +\x1b\[0m([^\s:\x1b]+)(?::? ?([^\x1b\n]*))?"
                  r"|\x1b\[31m([^\s:\x1b]+): (failed to delete the bucket[^\x1b\n]*)")
tests, last, seen = {}, {}, {}
for m in mark.finditer(text):
    if m.group(4):  # teardown failure: keeps the test from printing PASS
        kind, name, msg = "TEARDOWN", m.group(4), m.group(5)
    else:
        kind, name, msg = m.group(1), m.group(2), (m.group(3) or "").strip()
    if kind == "RUN" or name not in last:
        seen[name] = seen.get(name, 0) + 1
        last[name] = name if seen[name] == 1 else f"{name}#{seen[name]}"
        tests[last[name]] = {"PASS": 0, "FAIL": 0, "error": ""}
    t = tests[last[name]]
    if kind in ("PASS", "FAIL"):
        t[kind] += 1
    if kind != "PASS" and not t["error"]:
        t["error"] = msg[:400]
res = []
for name in sorted(tests):
    t = tests[name]
    st = "FAIL" if t["FAIL"] else ("PASS" if t["PASS"] else "NORESULT")
    admin = st != "PASS" and (name.startswith("IAM_") or "./versitygw" in t["error"] or "XAdmin" in t["error"])
    res.append({"name": name, "status": st, "vgw_admin": admin, "error": t["error"] if st != "PASS" else ""})
with open(stem + ".tsv", "w") as f:
    f.writelines(f"{r['name']}\t{r['status']}\n" for r in res)
with open(stem + ".jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in res)
p = sum(r["status"] == "PASS" for r in res)
fl = len(res) - p
adm = sum(r["vgw_admin"] for r in res)
nores = sum(r["status"] == "NORESULT" for r in res)
own = re.search(r"RAN: (\d+) PASS: (\d+) FAIL: (\d+)", text)
print(f"# results: {stem}.tsv / .jsonl")
single = os.environ.get("VGW_SINGLE") == "1"  # a one-test subcommand prints no counter
if single and not own and len(res) == 1 and "\ngoroutine " not in text:
    own = True
print("# suite's own counter: " + (own.group(0) if hasattr(own, "group") else
      "(single test)" if own else "MISSING (suite aborted or was killed)"))
print(f"# of the failed: {adm} need versitygw's admin API, {nores} had no PASS/FAIL line")
print(f"versitygw-tests: {p} passed, {fl} failed")
sys.exit(0 if fl == 0 and own else (3 if not own else 1))
EOF
}

if [ "${1:-}" = parse ]; then
  [ $# -eq 3 ] || { echo "usage: $0 parse LOG STEM" >&2; exit 2; }
  parse_log "$2" "$3"; exit
fi

if [ "${1:-}" = compare ]; then
  [ $# -eq 3 ] || { echo "usage: $0 compare A.tsv B.tsv" >&2; exit 2; }
  exec python3 - "$2" "$3" <<'EOF'
import sys
def load(p):
    return dict(l.rstrip("\n").split("\t")[:2] for l in open(p) if "\t" in l)
a, b = load(sys.argv[1]), load(sys.argv[2])
for n, r in ((sys.argv[1], a), (sys.argv[2], b)):
    p = sum(v == "PASS" for v in r.values())
    print(f"{n}: {p} passed, {len(r) - p} failed")
diff = [(k, a.get(k, "-"), b.get(k, "-")) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
for k, x, y in diff:
    print(f"{x:8} {y:8} {k}")
print(f"{len(diff)} tests differ (columns: A B name)")
EOF
fi

if [ "${1:-}" = build ]; then
  SRC=${2:-/work/peers/versitygw}; OUT=${3:-/work/peers/bin/versitygw}
  python3 - "$SRC/tests/integration" <<'EOF' || exit 1
import os, sys
d = sys.argv[1]
extra = os.path.join(d, "weft_recover.go")
if not os.path.exists(extra):
    c = os.path.join(d, "concurrency.go"); s = open(c).read()
    n = s.count("\t\tf(ct.conf)\n") + s.count("fn(ct.conf)")
    assert n == 3, f"concurrency.go changed upstream ({n} call sites), patch by hand"
    s = s.replace("\t\tf(ct.conf)\n", "\t\trunSafe(f, ct.conf)\n").replace("fn(ct.conf)", "runSafe(fn, ct.conf)")
    o = os.path.join(d, "output.go"); t = open(o).read()
    a = "func runF(format string, a ...any) {\n\tRunCount.Add(1)\n"
    assert a in t, "output.go changed upstream, patch by hand"
    t = t.replace(a, a + "\tlastRun.Store(fmt.Sprintf(format, a...))\n")
    open(c, "w").write(s); open(o, "w").write(t)
    open(extra, "w").write("""package integration

import "sync/atomic"

// Added by weft's versitygw-tests/run.sh: a panicking test is reported as FAIL and the run
// goes on (upstream a nil dereference on an unexpected response aborts the whole suite).
var lastRun atomic.Value

func runSafe(f IntTest, conf *S3Conf) {
	defer func() {
		if r := recover(); r != nil {
			name, _ := lastRun.Load().(string)
			failF("%v: panic (recovered by weft patch): %v", name, r)
		}
	}()
	f(conf)
}
""")
    print("patched", d)
EOF
  cd "$SRC" && time nice -n 10 go build -o "$OUT" ./cmd/versitygw && echo "built $OUT"
  exit
fi

case "${1:-}" in -h|--help) sed -n 2,60p "$0"; exit 0;; esac
ENDPOINT=${1:-${ENDPOINT:-}}
ACCESS_KEY=${2:-${ACCESS_KEY:-}}
SECRET_KEY=${3:-${SECRET_KEY:-}}
[ -n "$ENDPOINT" ] && [ -n "$ACCESS_KEY" ] && [ -n "$SECRET_KEY" ] || { sed -n 2,60p "$0"; exit 2; }
VGW_BIN=${VGW_BIN:-/work/peers/bin/versitygw}
SUBCOMMAND=${SUBCOMMAND:-full-flow}
REGION=${REGION:-us-east-1}
OUT_DIR=${OUT_DIR:-./versitygw-results}
RUN_NAME=${RUN_NAME:-versitygw-$(date +%Y%m%d-%H%M%S)}
[ -x "$VGW_BIN" ] || { echo "versitygw binary not found: $VGW_BIN (set VGW_BIN)" >&2; exit 2; }
VGW_BIN=$(cd "$(dirname "$VGW_BIN")" && pwd)/$(basename "$VGW_BIN")
grep -q "recovered by weft patch" "$VGW_BIN" ||
  echo "warning: $VGW_BIN is a stock build; a panicking test aborts the whole run (see: $0 build)" >&2
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOG=$OUT_DIR/$RUN_NAME.log

test_flags=(-e "$ENDPOINT")
sub_flags=()
[ "${INSECURE:-0}" = 1 ] && test_flags+=(--allow-insecure)
[ "${HOST_STYLE:-0}" = 1 ] && test_flags+=(--host-style)
[ "${PARALLEL:-0}" = 1 ] && sub_flags+=(--parallel)
# shellcheck disable=SC2206
[ -n "${EXTRA_ARGS:-}" ] && sub_flags+=(${EXTRA_ARGS})
export AWS_ACCESS_KEY_ID=$ACCESS_KEY AWS_SECRET_ACCESS_KEY=$SECRET_KEY AWS_REGION=$REGION
unset AWS_PROFILE AWS_SESSION_TOKEN   # keys via env, not argv (ps); the SDK reads the same

if [ "${PRECLEAN:-1}" = 1 ]; then
  ENDPOINT=$ENDPOINT INSECURE=${INSECURE:-0} python3 - <<'EOF' || echo "preclean failed (continuing)" >&2
import os, re, sys
try:
    import boto3, botocore.config
except ImportError:
    print("preclean: boto3 not available, skipped", file=sys.stderr); sys.exit(0)
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"], verify=os.environ["INSECURE"] != "1",
                  config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}))
names = [b["Name"] for b in s3.list_buckets().get("Buckets", []) if re.fullmatch(r"(my-prefix-)?test-bucket-\d+", b["Name"])]
gone = 0
for b in names:
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=b):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                s3.delete_object(Bucket=b, Key=v["Key"], VersionId=v["VersionId"], BypassGovernanceRetention=True)
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=b):
            for u in page.get("Uploads", []):
                s3.abort_multipart_upload(Bucket=b, Key=u["Key"], UploadId=u["UploadId"])
        s3.delete_bucket(Bucket=b)
        gone += 1
    except Exception as e:
        print(f"preclean: could not remove {b}: {e}", file=sys.stderr)
if names:
    print(f"preclean: removed {gone} of {len(names)} leftover test buckets; any left"
          " (e.g. under a COMPLIANCE lock) will fail the tests that reuse the name", file=sys.stderr)
EOF
fi

# Empty working directory: the suite execs ./versitygw for admin calls; keep them failing fast.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmd=("$VGW_BIN" --region "$REGION" test "${test_flags[@]}" "$SUBCOMMAND" "${sub_flags[@]}")
echo "# $(date -Is) ${cmd[*]}" | tee "$LOG"
start=$(date +%s)
if [ "${TIMEOUT:-0}" -gt 0 ]; then cmd=(timeout --signal=INT --kill-after=30 "$TIMEOUT" "${cmd[@]}"); fi
# AWS_CA_BUNDLE makes the SDK log.Fatal ("unable to add custom RootCAs HTTPClient"): the suite
# brings its own http.Client. Go's TLS still honours SSL_CERT_FILE/SSL_CERT_DIR for a custom CA.
(cd "$WORK" && unset AWS_CA_BUNDLE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION &&
   AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null "${cmd[@]}") 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
echo "# exit status $rc after $(( $(date +%s) - start ))s" | tee -a "$LOG"

case $SUBCOMMAND in full-flow|posix|scoutfs|iam|access-control|noacl|data-integrity-etag|website-hosting) ;;
  *) export VGW_SINGLE=1 ;;
esac
parse_log "$LOG" "$OUT_DIR/$RUN_NAME"
