#!/usr/bin/env python3
"""S3 acceptance of the weft gateway with boto3, against a running `weft up`.

Usage: boto3_acceptance.py CLUSTER_DIR   (reads CLUSTER_DIR/s3.json and cluster.json)

Sizes: WEFT_S3_SCALE=full runs the issue's acceptance sizes (100 objects of 0 B-20 MiB, a
100 MiB multipart upload in 5 MiB parts); the default (ci) keeps the same steps with objects
up to 2 MiB and a 15 MiB upload, so CI stays quick. Every check compares bytes or listings
exactly against a model of what was written; any mismatch exits non-zero.

The last step kills r nodes (`weft node kill`) and reads every object back through S3: the
cluster must have at least k + r nodes of the bucket policy (WEFT_S3_POLICY, default
rs(4,2),stripe=2) and is left degraded.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

FULL = os.environ.get("WEFT_S3_SCALE", "ci") == "full"
MiB = 1 << 20
OBJECTS = 100
MAX_OBJECT = 20 * MiB if FULL else 2 * MiB
MULTIPART = 100 * MiB if FULL else 15 * MiB
PART = 5 * MiB
POLICY = os.environ.get("WEFT_S3_POLICY", "rs(4,2),stripe=2")
WEFT = os.environ.get("WEFT_BIN", "weft")

cluster_dir = sys.argv[1]
s3conf = json.load(open(os.path.join(cluster_dir, "s3.json")))
cluster = json.load(open(os.path.join(cluster_dir, "cluster.json")))
# weft's own commands sign with the cluster secret `weft up` wrote beside s3.json.
os.environ.setdefault("WEFT_SECRET_FILE", os.path.join(cluster_dir, "cluster.secret"))
rng = random.Random(20261122)
started = time.time()


def client(access_key=None, secret_key=None):
    return boto3.client(
        "s3",
        endpoint_url=s3conf["endpoint"],
        aws_access_key_id=access_key or s3conf["access_key"],
        aws_secret_access_key=secret_key or s3conf["secret_key"],
        region_name=s3conf["region"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      signature_version="s3v4"),
    )


s3 = client()


def step(text):
    print(f"[{time.time() - started:7.1f}s] {text}", flush=True)


def expect_error(code, status, call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ClientError as error:
        got = (error.response["Error"]["Code"], error.response["ResponseMetadata"]["HTTPStatusCode"])
        assert got == (code, status), f"expected {code} {status}, got {got}: {error}"
        return
    raise AssertionError(f"expected {code} {status}, the call succeeded")


def policy_header(params, **_):
    params["headers"]["x-weft-policy"] = POLICY


s3.meta.events.register("before-call.s3.CreateBucket", policy_header)

bucket = "acceptance"
step(f"create bucket {bucket} with policy {POLICY}")
s3.create_bucket(Bucket=bucket)
s3.head_bucket(Bucket=bucket)
assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
# A re-create asking for a policy (x-weft-policy, added above) is refused: the existing
# bucket would not get it. Without one it is S3's us-east-1 200 (boto3_semantics.py).
expect_error("BucketAlreadyOwnedByYou", 409, s3.create_bucket, Bucket=bucket)
expect_error("NoSuchBucket", 404, s3.list_objects_v2, Bucket="no-such-bucket")
expect_error("NoSuchBucket", 404, s3.put_object, Bucket="no-such-bucket", Key="k", Body=b"x" * (3 << 20))

model = {}  # key -> bytes: what the bucket must hold

step(f"put {OBJECTS} objects of 0 B-{MAX_OBJECT // MiB} MiB")
sizes = [0, 1, MAX_OBJECT] + [rng.randrange(0, MAX_OBJECT + 1) for _ in range(OBJECTS - 3)]
written = 0
for i, size in enumerate(sizes):
    key = f"d{i % 4}/k{i:03d}"
    data = rng.randbytes(size)
    md5 = hashlib.md5(data).hexdigest()
    put = s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/x-test",
                        Metadata={"index": str(i)})
    assert put["ETag"] == f'"{md5}"', (put["ETag"], md5)
    model[key] = data
    written += size
step(f"  {written / MiB:.1f} MiB written")

step("get every object back, byte-identical, with its attributes")
for i, key in enumerate(sorted(model)):
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == model[key], key
    assert got["ContentType"] == "application/x-test"
    assert got["ETag"] == f'"{hashlib.md5(model[key]).hexdigest()}"'
    assert got["Metadata"]["index"] == str(int(key[-3:]))

step("ranged gets: first byte, last byte, middle, suffix; a bad range is 416 InvalidRange")
big = f"d2/k002"
data = model[big]
for rng_header, expect in [
    ("bytes=0-0", data[:1]),
    (f"bytes={len(data) - 1}-{len(data) - 1}", data[-1:]),
    ("bytes=1000-1999999", data[1000:2000000]),
    ("bytes=-4097", data[-4097:]),
    (f"bytes={len(data) - 10}-", data[-10:]),
]:
    got = s3.get_object(Bucket=bucket, Key=big, Range=rng_header)
    assert got["Body"].read() == expect, rng_header
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
expect_error("InvalidRange", 416, s3.get_object, Bucket=bucket, Key=big, Range=f"bytes={len(data)}-")
expect_error("InvalidRange", 416, s3.get_object, Bucket=bucket, Key="d0/k000", Range="bytes=0-0")


def listing(**kwargs):
    """Every page of ListObjectsV2: (keys, common prefixes, pages)."""
    keys, prefixes, pages, token = [], [], 0, None
    while True:
        args = dict(kwargs)
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(Bucket=bucket, **args)
        pages += 1
        page_keys = [o["Key"] for o in page.get("Contents", [])]
        page_prefixes = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        assert page["KeyCount"] == len(page_keys) + len(page_prefixes)
        if "MaxKeys" in kwargs:
            assert page["KeyCount"] <= kwargs["MaxKeys"]
        keys += page_keys
        prefixes += page_prefixes
        if not page["IsTruncated"]:
            return keys, prefixes, pages
        token = page["NextContinuationToken"]


def check_listings():
    all_keys = sorted(model)
    keys, prefixes, pages = listing(MaxKeys=7)
    assert keys == all_keys and prefixes == [], "paginated listing differs"
    assert pages == (len(all_keys) + 6) // 7, pages
    keys, _, _ = listing(Prefix="d1/")
    assert keys == [k for k in all_keys if k.startswith("d1/")]
    keys, prefixes, _ = listing(Delimiter="/")
    assert keys == [k for k in all_keys if "/" not in k]
    assert prefixes == sorted({k.split("/")[0] + "/" for k in all_keys if "/" in k}), prefixes
    keys, prefixes, pages = listing(Delimiter="/", MaxKeys=2)
    assert prefixes == sorted({k.split("/")[0] + "/" for k in all_keys if "/" in k})
    keys, _, _ = listing(Prefix="d3/k0", StartAfter="d3/k050")
    assert keys == [k for k in all_keys if k.startswith("d3/k0") and k > "d3/k050"]
    listed = {o["Key"]: o for o in s3.list_objects_v2(Bucket=bucket, Prefix="d0/")["Contents"]}
    for key, obj in listed.items():
        assert obj["Size"] == len(model[key])
        assert obj["ETag"].strip('"') in (hashlib.md5(model[key]).hexdigest(), etags.get(key))


etags = {}
step("ListObjectsV2: pagination (max-keys 7), prefix, delimiter, start-after: exact")
check_listings()

step(f"multipart upload of {MULTIPART // MiB} MiB in 5 MiB parts, part 2 uploaded twice")
mp_key = "mp/big.bin"
parts_data = []
left = MULTIPART
while left > 0:
    n = min(PART, left)
    parts_data.append(rng.randbytes(n))
    left -= n
upload = s3.create_multipart_upload(Bucket=bucket, Key=mp_key, ContentType="video/x-test",
                                    Metadata={"kind": "multipart"})
upload_id = upload["UploadId"]
uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
assert [(u["Key"], u["UploadId"]) for u in uploads] == [(mp_key, upload_id)]
completed = []
for number, part in enumerate(parts_data, start=1):
    if number == 2:
        first = s3.upload_part(Bucket=bucket, Key=mp_key, UploadId=upload_id, PartNumber=2,
                               Body=rng.randbytes(len(part)))
        assert first["ETag"] != f'"{hashlib.md5(part).hexdigest()}"'
    got = s3.upload_part(Bucket=bucket, Key=mp_key, UploadId=upload_id, PartNumber=number, Body=part)
    assert got["ETag"] == f'"{hashlib.md5(part).hexdigest()}"'
    completed.append({"PartNumber": number, "ETag": got["ETag"]})
listed_parts = s3.list_parts(Bucket=bucket, Key=mp_key, UploadId=upload_id)["Parts"]
assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in listed_parts] == [
    (c["PartNumber"], len(d), c["ETag"]) for c, d in zip(completed, parts_data)]
bad = [dict(completed[0], ETag='"00000000000000000000000000000000"')] + completed[1:]
expect_error("InvalidPart", 400, s3.complete_multipart_upload, Bucket=bucket, Key=mp_key,
             UploadId=upload_id, MultipartUpload={"Parts": bad})
done = s3.complete_multipart_upload(Bucket=bucket, Key=mp_key, UploadId=upload_id,
                                    MultipartUpload={"Parts": completed})
whole = b"".join(parts_data)
digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts_data)).hexdigest()
expected_etag = f'"{digest}-{len(parts_data)}"'
assert done["ETag"] == expected_etag, (done["ETag"], expected_etag)
model[mp_key] = whole
etags[mp_key] = expected_etag.strip('"')
got = s3.get_object(Bucket=bucket, Key=mp_key)
assert got["Body"].read() == whole and got["ETag"] == expected_etag
assert got["ContentType"] == "video/x-test" and got["Metadata"] == {"kind": "multipart"}
assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
for rng_header, expect in [("bytes=0-0", whole[:1]), ("bytes=-1", whole[-1:]),
                           (f"bytes={PART - 3}-{PART + 3}", whole[PART - 3:PART + 4])]:
    assert s3.get_object(Bucket=bucket, Key=mp_key, Range=rng_header)["Body"].read() == expect

step("multipart refusals: a small middle part is EntityTooSmall; abort leaves nothing")
small = s3.create_multipart_upload(Bucket=bucket, Key="mp/small")["UploadId"]
small_parts = []
for number in (1, 2):
    got = s3.upload_part(Bucket=bucket, Key="mp/small", UploadId=small, PartNumber=number,
                         Body=b"x" * 1000)
    small_parts.append({"PartNumber": number, "ETag": got["ETag"]})
expect_error("EntityTooSmall", 400, s3.complete_multipart_upload, Bucket=bucket, Key="mp/small",
             UploadId=small, MultipartUpload={"Parts": small_parts})
s3.abort_multipart_upload(Bucket=bucket, Key="mp/small", UploadId=small)
expect_error("NoSuchUpload", 404, s3.list_parts, Bucket=bucket, Key="mp/small", UploadId=small)
assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
parts_left = subprocess.run([WEFT, "ls", ".weft-s3-parts", "--meta", cluster["meta"]],
                            capture_output=True, text=True)
assert "/0000" not in parts_left.stdout, f"part objects left behind: {parts_left.stdout}"

step("CopyObject: bytes and metadata copied (COPY), replaced (REPLACE)")
s3.copy_object(Bucket=bucket, Key="copies/a", CopySource={"Bucket": bucket, "Key": big})
got = s3.get_object(Bucket=bucket, Key="copies/a")
assert got["Body"].read() == model[big] and got["Metadata"] == {"index": "2"}
model["copies/a"] = model[big]
s3.copy_object(Bucket=bucket, Key="copies/mp", CopySource={"Bucket": bucket, "Key": mp_key},
               MetadataDirective="REPLACE", ContentType="text/x-new", Metadata={"new": "1"})
got = s3.get_object(Bucket=bucket, Key="copies/mp")
assert got["Body"].read() == whole and got["Metadata"] == {"new": "1"}
assert got["ContentType"] == "text/x-new"
model["copies/mp"] = whole
etags["copies/mp"] = etags[mp_key]
expect_error("NoSuchKey", 404, s3.copy_object, Bucket=bucket, Key="copies/x",
             CopySource={"Bucket": bucket, "Key": "no/such/key"})

step("conditional gets: If-None-Match 304, If-Match 412, If-Modified-Since 304")
etag = s3.head_object(Bucket=bucket, Key=big)["ETag"]
expect_error("304", 304, s3.get_object, Bucket=bucket, Key=big, IfNoneMatch=etag)
expect_error("PreconditionFailed", 412, s3.get_object, Bucket=bucket, Key=big, IfMatch='"abc"')
assert s3.get_object(Bucket=bucket, Key=big, IfMatch=etag)["Body"].read() == model[big]
modified = s3.head_object(Bucket=bucket, Key=big)["LastModified"]
expect_error("304", 304, s3.get_object, Bucket=bucket, Key=big, IfModifiedSince=modified)
expect_error("PreconditionFailed", 412, s3.get_object, Bucket=bucket, Key=big,
             IfUnmodifiedSince=modified.replace(year=2000))

step("DeleteObjects: 10 keys (one missing) deleted, listings exact")
doomed = sorted(model)[5:14] + ["no/such/key"]
result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in doomed]})
assert sorted(d["Key"] for d in result["Deleted"]) == sorted(doomed) and not result.get("Errors")
for key in doomed:
    model.pop(key, None)
    expect_error("404", 404, s3.head_object, Bucket=bucket, Key=key)
check_listings()

step("errors: NoSuchKey, SignatureDoesNotMatch, InvalidAccessKeyId; failed requests create nothing")
expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="no/such/key")
wrong_secret = client(secret_key="x" * 40)
expect_error("SignatureDoesNotMatch", 403, wrong_secret.put_object, Bucket=bucket, Key="nope/1", Body=b"x")
unknown = client(access_key="WKNOSUCHKEY000000000")
expect_error("InvalidAccessKeyId", 403, unknown.put_object, Bucket=bucket, Key="nope/2", Body=b"x")
expect_error("BadDigest", 400, s3.put_object, Bucket=bucket, Key="nope/3", Body=b"hello" * 1000,
             ContentMD5="AAAAAAAAAAAAAAAAAAAAAA==")
expect_error("BadDigest", 400, s3.put_object, Bucket=bucket, Key="nope/4", Body=b"",
             ContentMD5="AAAAAAAAAAAAAAAAAAAAAA==")
anonymous = urllib.request.Request(f"{s3conf['endpoint']}/{bucket}/nope/5", data=b"x", method="PUT")
try:
    urllib.request.urlopen(anonymous)
    raise AssertionError("an anonymous PUT was accepted")
except urllib.error.HTTPError as error:
    assert error.code == 403, error.code
assert listing(Prefix="nope/")[0] == [], "a failed request created an object"
expect_error("BucketNotEmpty", 409, s3.delete_bucket, Bucket=bucket)

step("presigned URLs: GET works, a tampered one is 403")
url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": big}, ExpiresIn=300)
assert urllib.request.urlopen(url).read() == model[big]
try:
    assert "X-Amz-Signature=" in url, url
    urllib.request.urlopen(url[:-1] + ("0" if url[-1] != "0" else "1"))
    raise AssertionError("a tampered presigned URL was accepted")
except urllib.error.HTTPError as error:
    assert error.code == 403, error.code

step("weft ls agrees with S3")
weft_ls = subprocess.run([WEFT, "ls", bucket, "--json", "--meta", cluster["meta"]],
                         capture_output=True, text=True, check=True).stdout
weft_keys = sorted(o["key"] for o in json.loads(weft_ls)["objects"])
assert weft_keys == sorted(model), (len(weft_keys), len(model))

r = int(POLICY.split(",")[1].split(")")[0])
victims = [n["id"] for n in cluster["nodes"]][:r]
step(f"kill {r} nodes ({victims}); every object still downloads byte-identical")
for node in victims:
    subprocess.run([WEFT, "node", "kill", str(node), "--meta", cluster["meta"]], check=True,
                   capture_output=True)
for key in sorted(model):
    got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert got == model[key], f"{key} differs after losing {r} nodes"
step(f"all checks passed ({len(model)} objects)")
