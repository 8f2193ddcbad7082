#!/usr/bin/env python3
"""S3 semantics of the weft gateway that applications rely on, one check per behaviour, with
boto3 (and raw HTTP where boto3 cannot misbehave on purpose), against a running `weft up`.

Usage: boto3_semantics.py CLUSTER_DIR [NAME ...]   (reads CLUSTER_DIR/s3.json and cluster.json;
NAMEs pick checks; WEFT_BIN names the weft binary for the checks that use its CLI)

Each check states what AWS S3 does and fails (exit 1, naming the check) when the gateway does
otherwise. Every bucket a check makes is removed again, so the cluster is left as found.
"""
import base64
import datetime
import hashlib
import http.client
import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import zlib

import boto3
import boto3.s3.transfer
from botocore.config import Config
from botocore.exceptions import ClientError

import check_runner  # noqa: E402 - the runner beside this script

cluster_dir = sys.argv[1]
only = set(sys.argv[2:])
s3conf = json.load(open(os.path.join(cluster_dir, "s3.json")))
cluster = json.load(open(os.path.join(cluster_dir, "cluster.json")))
os.environ.setdefault("WEFT_SECRET_FILE", os.path.join(cluster_dir, "cluster.secret"))
WEFT = os.environ.get("WEFT_BIN", "weft")
ENDPOINT = urllib.parse.urlparse(s3conf["endpoint"])
MiB = 1 << 20


def client():
    return boto3.client(
        "s3",
        endpoint_url=s3conf["endpoint"],
        aws_access_key_id=s3conf["access_key"],
        aws_secret_access_key=s3conf["secret_key"],
        region_name=s3conf["region"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      signature_version="s3v4", max_pool_connections=32),
    )


s3 = client()
CHECKS = []
started = time.time()


def check(function):
    CHECKS.append(function)
    return function


def error_of(call, *args, **kwargs):
    """(code, status, response) of a call that must fail."""
    try:
        call(*args, **kwargs)
    except ClientError as error:
        meta = error.response["ResponseMetadata"]
        return error.response["Error"].get("Code"), meta["HTTPStatusCode"], error.response
    raise AssertionError("the call succeeded; it should have failed")


def expect_error(code, status, call, *args, **kwargs):
    got = error_of(call, *args, **kwargs)
    assert got[:2] == (code, status), f"expected {code} {status}, got {got[:2]}: {got[2]['Error']}"
    return got[2]


class Bucket:
    """A fresh bucket for one check, emptied and removed afterwards."""

    count = 0

    def __enter__(self):
        Bucket.count += 1
        self.name = f"sem-{os.getpid()}-{Bucket.count}"
        s3.create_bucket(Bucket=self.name)
        return self.name

    def __exit__(self, *exc):
        for upload in s3.list_multipart_uploads(Bucket=self.name).get("Uploads", []):
            s3.abort_multipart_upload(Bucket=self.name, Key=upload["Key"], UploadId=upload["UploadId"])
        while True:
            page = s3.list_objects_v2(Bucket=self.name)
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if not keys:
                break
            s3.delete_objects(Bucket=self.name, Delete={"Objects": keys})
        while True:  # a versioned bucket's versions and delete markers
            page = s3.list_object_versions(Bucket=self.name)
            named = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                     for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if not named:
                break
            s3.delete_objects(Bucket=self.name, Delete={"Objects": named})
        s3.delete_bucket(Bucket=self.name)


def md5_hex(data):
    return hashlib.md5(data).hexdigest()


@check
def concurrent_puts_of_one_key_all_succeed_and_the_last_wins():
    # S3: simultaneous PUTs of a key all succeed; a later GET returns one of them whole,
    # with that body's own ETag (attributes never mix bodies).
    with Bucket() as bucket:
        bodies = [bytes([i]) * (2 * MiB + i) for i in range(8)]
        outcomes = [None] * len(bodies)
        clients = [client() for _ in bodies]

        def put(i):
            try:
                answer = clients[i].put_object(Bucket=bucket, Key="k", Body=bodies[i])
                outcomes[i] = answer["ETag"].strip('"')
            except Exception as error:  # noqa: BLE001 - reported below
                outcomes[i] = error

        threads = [threading.Thread(target=put, args=(i,)) for i in range(len(bodies))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failures = [o for o in outcomes if not isinstance(o, str)]
        assert not failures, f"every concurrent PUT succeeds: {failures}"
        assert outcomes == [md5_hex(b) for b in bodies], "each PUT answers its own body's ETag"
        got = s3.get_object(Bucket=bucket, Key="k")
        data = got["Body"].read()
        assert data in bodies, "the object is one of the bodies, whole"
        assert got["ETag"].strip('"') == md5_hex(data), "the ETag is that body's"
        assert s3.head_object(Bucket=bucket, Key="k")["ContentLength"] == len(data)


@check
def a_put_overtaken_by_another_of_its_key_succeeds_and_the_last_commit_wins():
    # S3: two PUTs of one key overlap (the first still sending when the second is done):
    # both succeed, and the object is the one that finished last, with its own ETag.
    with Bucket() as bucket:
        slow = b"s" * (4 * MiB)
        url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "k"},
                                        ExpiresIn=300)
        parsed = urllib.parse.urlparse(url)
        conn = http.client.HTTPConnection(ENDPOINT.hostname, ENDPOINT.port, timeout=60)
        conn.putrequest("PUT", f"{parsed.path}?{parsed.query}", skip_accept_encoding=True)
        conn.putheader("Content-Length", str(len(slow)))
        conn.endheaders()
        conn.send(slow[: len(slow) // 2])
        time.sleep(0.5)  # the gateway has begun the slow write by now
        fast = b"f" * MiB
        assert s3.put_object(Bucket=bucket, Key="k", Body=fast)["ETag"].strip('"') == md5_hex(fast)
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == fast
        conn.send(slow[len(slow) // 2:])
        answer = conn.getresponse()
        body = answer.read()
        assert answer.status == 200, (answer.status, body)
        assert answer.getheader("ETag").strip('"') == md5_hex(slow)
        got = s3.get_object(Bucket=bucket, Key="k")
        assert got["Body"].read() == slow and got["ETag"].strip('"') == md5_hex(slow)


def raw_put(path_and_query, headers, body_bytes, close_after):
    """Sends a PUT with `headers` and only `close_after` bytes of its body, then hangs up."""
    conn = http.client.HTTPConnection(ENDPOINT.hostname, ENDPOINT.port, timeout=30)
    conn.putrequest("PUT", path_and_query, skip_accept_encoding=True)
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders()
    conn.send(body_bytes[:close_after])
    time.sleep(0.3)
    conn.sock.close()


@check
def a_put_cut_off_mid_body_leaves_nothing_behind():
    # S3: an upload whose client goes away stores nothing and does not hold up the bucket
    # (a write left in progress would make DeleteBucket answer BucketNotEmpty).
    bucket = f"sem-{os.getpid()}-cut"
    s3.create_bucket(Bucket=bucket)
    size = 6 * MiB
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "cut"},
                                    ExpiresIn=300)
    parsed = urllib.parse.urlparse(url)
    raw_put(f"{parsed.path}?{parsed.query}", {"Content-Length": str(size)}, b"x" * size,
            close_after=MiB + 17)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    # The gateway aborts as soon as it sees the connection end: allow it a moment.
    deadline = time.time() + 10
    while True:
        try:
            s3.delete_bucket(Bucket=bucket)
            return
        except ClientError as error:
            if error.response["Error"]["Code"] != "BucketNotEmpty" or time.time() > deadline:
                raise


@check
def standard_headers_are_kept_and_a_missing_content_type_has_the_default():
    with Bucket() as bucket:
        expires = "Wed, 21 Oct 2037 07:28:00 GMT"
        s3.put_object(Bucket=bucket, Key="h", Body=b"hello", CacheControl="no-cache",
                      ContentDisposition='attachment; filename="h.txt"', ContentEncoding="gzip",
                      ContentLanguage="de-DE", Expires=expires, ContentType="text/plain")
        for answer in (s3.head_object(Bucket=bucket, Key="h"), s3.get_object(Bucket=bucket, Key="h")):
            headers = answer["ResponseMetadata"]["HTTPHeaders"]
            assert answer["CacheControl"] == "no-cache", answer
            assert answer["ContentDisposition"] == 'attachment; filename="h.txt"'
            assert answer["ContentEncoding"] == "gzip"
            assert answer["ContentLanguage"] == "de-DE"
            assert headers["expires"] == expires, headers
            assert answer["ContentType"] == "text/plain"
        s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
        assert s3.head_object(Bucket=bucket, Key="plain")["ContentType"] == "binary/octet-stream"
        # A copy keeps them (COPY), or takes the request's (REPLACE).
        s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "h"})
        assert s3.head_object(Bucket=bucket, Key="c")["CacheControl"] == "no-cache"
        s3.copy_object(Bucket=bucket, Key="r", CopySource={"Bucket": bucket, "Key": "h"},
                       MetadataDirective="REPLACE", CacheControl="max-age=60")
        replaced = s3.head_object(Bucket=bucket, Key="r")
        assert replaced["CacheControl"] == "max-age=60" and "ContentEncoding" not in replaced
        # response-* parameters override what GET answers.
        got = s3.get_object(Bucket=bucket, Key="h", ResponseContentType="application/x-test",
                            ResponseCacheControl="private")
        assert (got["ContentType"], got["CacheControl"]) == ("application/x-test", "private")


def upload_parts(bucket, key, parts, **create):
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    done = []
    for number, data in enumerate(parts, start=1):
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number,
                              Body=data)["ETag"]
        done.append({"PartNumber": number, "ETag": etag})
    return upload, done


@check
def a_repeated_complete_answers_the_same_and_the_last_part_upload_wins():
    with Bucket() as bucket:
        first, second = b"a" * (5 * MiB), b"b" * (5 * MiB)
        upload, done = upload_parts(bucket, "m", [first, b"tail"])
        stale = done[0]["ETag"]
        again = s3.upload_part(Bucket=bucket, Key="m", UploadId=upload, PartNumber=1, Body=second)
        assert again["ETag"].strip('"') == md5_hex(second)
        listed = s3.list_parts(Bucket=bucket, Key="m", UploadId=upload)["Parts"]
        assert [p["ETag"].strip('"') for p in listed] == [md5_hex(second), md5_hex(b"tail")]
        parts = [{"PartNumber": 1, "ETag": stale}, done[1]]
        expect_error("InvalidPart", 400, s3.complete_multipart_upload, Bucket=bucket, Key="m",
                     UploadId=upload, MultipartUpload={"Parts": parts})
        parts[0]["ETag"] = again["ETag"]
        completed = s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=upload,
                                                 MultipartUpload={"Parts": parts})
        repeated = s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=upload,
                                                MultipartUpload={"Parts": parts})
        assert repeated["ETag"] == completed["ETag"] and completed["ETag"].endswith('-2"')
        assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == second + b"tail"
        # The completed upload is no longer in progress.
        assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
        expect_error("NoSuchUpload", 404, s3.list_parts, Bucket=bucket, Key="m", UploadId=upload)
        # GET and HEAD by part number answer that part.
        part = s3.get_object(Bucket=bucket, Key="m", PartNumber=2)
        assert part["Body"].read() == b"tail" and part["PartsCount"] == 2
        assert s3.head_object(Bucket=bucket, Key="m", PartNumber=1)["ContentLength"] == 5 * MiB
        expect_error("InvalidPartNumber", 416, s3.get_object, Bucket=bucket, Key="m", PartNumber=3)
        # GetObjectAttributes names the ETag, size and parts.
        described = s3.get_object_attributes(Bucket=bucket, Key="m",
                                             ObjectAttributes=["ETag", "ObjectSize", "ObjectParts"])
        # S3 sends this ETag unquoted, unlike every other.
        assert described["ETag"] == completed["ETag"].strip('"'), described
        assert described["ObjectSize"] == 5 * MiB + 4
        assert described["ObjectParts"]["TotalPartsCount"] == 2
        assert [p["Size"] for p in described["ObjectParts"]["Parts"]] == [5 * MiB, 4]


@check
def upload_part_copy_takes_whole_objects_and_ranges():
    with Bucket() as bucket:
        source = bytes(range(256)) * (24 * 1024)  # 6 MiB
        s3.put_object(Bucket=bucket, Key="src", Body=source)
        upload = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
        src = {"Bucket": bucket, "Key": "src"}
        whole = s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=upload, PartNumber=1,
                                    CopySource=src)["CopyPartResult"]["ETag"]
        assert whole.strip('"') == md5_hex(source)
        ranged = s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=upload, PartNumber=2,
                                     CopySource=src, CopySourceRange="bytes=10-1033")
        assert ranged["CopyPartResult"]["ETag"].strip('"') == md5_hex(source[10:1034])
        expect_error("InvalidRange", 416, s3.upload_part_copy, Bucket=bucket, Key="dst",
                     UploadId=upload, PartNumber=3, CopySource=src,
                     CopySourceRange=f"bytes=0-{len(source)}")
        expect_error("InvalidArgument", 400, s3.upload_part_copy, Bucket=bucket, Key="dst",
                     UploadId=upload, PartNumber=3, CopySource=src, CopySourceRange="bytes=0-x")
        expect_error("PreconditionFailed", 412, s3.upload_part_copy, Bucket=bucket, Key="dst",
                     UploadId=upload, PartNumber=3, CopySource=src, CopySourceIfMatch='"nope"')
        parts = [{"PartNumber": 1, "ETag": whole},
                 {"PartNumber": 2, "ETag": ranged["CopyPartResult"]["ETag"]}]
        s3.complete_multipart_upload(Bucket=bucket, Key="dst", UploadId=upload,
                                     MultipartUpload={"Parts": parts})
        assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == source + source[10:1034]


@check
def listing_details_match_s3():
    with Bucket() as bucket:
        for key in ("a", "b/c", "d"):
            s3.put_object(Bucket=bucket, Key=key, Body=b"1")
        v1 = s3.list_objects(Bucket=bucket)
        assert v1["Marker"] == "", v1
        assert "Delimiter" not in s3.list_objects(Bucket=bucket, Delimiter="")
        assert "Delimiter" not in s3.list_objects_v2(Bucket=bucket, Delimiter="")
        assert all("Owner" in o for o in v1["Contents"]), "v1 always names owners"
        v2 = s3.list_objects_v2(Bucket=bucket)
        assert all("Owner" not in o for o in v2["Contents"])
        owned = s3.list_objects_v2(Bucket=bucket, FetchOwner=True)
        assert all(o["Owner"]["ID"] for o in owned["Contents"])
        paged = s3.list_objects(Bucket=bucket, MaxKeys=1, Delimiter="/")
        assert paged["IsTruncated"] and paged["NextMarker"] == "a", paged
        with Bucket() as other:
            names = sorted([bucket, other])
            first = s3.list_buckets(MaxBuckets=1, Prefix="sem-")
            assert len(first["Buckets"]) == 1 and first["ContinuationToken"], first
            rest = s3.list_buckets(MaxBuckets=1000, Prefix="sem-",
                                   ContinuationToken=first["ContinuationToken"])
            listed = [b["Name"] for b in first["Buckets"] + rest["Buckets"]]
            assert [n for n in listed if n in names] == names, listed
            assert first["Owner"]["ID"]


@check
def not_modified_names_the_etag_and_errors_name_their_request():
    with Bucket() as bucket:
        etag = s3.put_object(Bucket=bucket, Key="n", Body=b"x")["ETag"]
        code, status, response = error_of(s3.get_object, Bucket=bucket, Key="n", IfNoneMatch=etag)
        assert status == 304 and response["ResponseMetadata"]["HTTPHeaders"].get("etag") == etag
        assert response["ResponseMetadata"]["HTTPHeaders"].get("last-modified")
        code, status, response = error_of(s3.get_object, Bucket=bucket, Key="missing")
        assert (code, status) == ("NoSuchKey", 404)
        request_id = response["ResponseMetadata"].get("RequestId")
        assert request_id and response["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"] == request_id
        ok = s3.head_object(Bucket=bucket, Key="n")
        assert ok["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
        # The RequestId is also in the error's XML body.
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "missing"})
        try:
            urllib.request.urlopen(url)
            raise AssertionError("a GET of a missing key succeeded")
        except urllib.error.HTTPError as error:
            body = error.read().decode()
            assert f"<RequestId>{error.headers['x-amz-request-id']}</RequestId>" in body, body


@check
def delete_objects_names_at_most_1000_keys():
    with Bucket() as bucket:
        keys = [{"Key": f"k{i}"} for i in range(1001)]
        expect_error("MalformedXML", 400, s3.delete_objects, Bucket=bucket, Delete={"Objects": keys})
        s3.put_object(Bucket=bucket, Key="k1", Body=b"x")
        answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys[:1000]})
        assert len(answer["Deleted"]) == 1000


@check
def presigned_urls_live_at_most_a_week():
    with Bucket() as bucket:
        s3.put_object(Bucket=bucket, Key="p", Body=b"presigned")
        week = 7 * 24 * 3600
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"},
                                        ExpiresIn=week)
        assert urllib.request.urlopen(url).read() == b"presigned"
        for seconds in (week + 1, -1):
            url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"},
                                            ExpiresIn=seconds)
            try:
                urllib.request.urlopen(url)
                raise AssertionError(f"a URL presigned for {seconds} s was honoured")
            except urllib.error.HTTPError as error:
                assert error.code == 403, (seconds, error.code)
                assert "<Code>AccessDenied</Code>" in error.read().decode()


@check
def re_creating_ones_own_bucket_in_us_east_1_succeeds():
    with Bucket() as bucket:
        s3.create_bucket(Bucket=bucket)
        expect_error("BucketAlreadyOwnedByYou", 409, s3.create_bucket, Bucket=bucket,
                     CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})


@check
def conditional_writes_hold_and_are_not_ignored():
    with Bucket() as bucket:
        s3.put_object(Bucket=bucket, Key="lock", Body=b"first", IfNoneMatch="*")
        expect_error("PreconditionFailed", 412, s3.put_object, Bucket=bucket, Key="lock",
                     Body=b"second", IfNoneMatch="*")
        assert s3.get_object(Bucket=bucket, Key="lock")["Body"].read() == b"first"
        etag = s3.head_object(Bucket=bucket, Key="lock")["ETag"]
        expect_error("PreconditionFailed", 412, s3.put_object, Bucket=bucket, Key="lock",
                     Body=b"x", IfMatch='"0123456789abcdef0123456789abcdef"')
        expect_error("NoSuchKey", 404, s3.put_object, Bucket=bucket, Key="none", Body=b"x",
                     IfMatch=etag)
        new = s3.put_object(Bucket=bucket, Key="lock", Body=b"third", IfMatch=etag)["ETag"]
        # A lock taken by many at once: exactly one If-None-Match: * wins.
        clients = [client() for _ in range(6)]
        wins = []

        def take(i):
            try:
                clients[i].put_object(Bucket=bucket, Key="race", Body=bytes([i]) * MiB,
                                      IfNoneMatch="*")
                wins.append(i)
            except ClientError as error:
                assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 412, error

        threads = [threading.Thread(target=take, args=(i,)) for i in range(len(clients))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(wins) == 1, f"exactly one taker wins the lock, not {wins}"
        winner = s3.get_object(Bucket=bucket, Key="race")["Body"].read()
        assert winner == bytes([wins[0]]) * MiB
        # Complete with If-None-Match: * on an existing key is refused; the upload stays.
        upload, parts = upload_parts(bucket, "lock", [b"mp"])
        expect_error("PreconditionFailed", 412, s3.complete_multipart_upload, Bucket=bucket,
                     Key="lock", UploadId=upload, MultipartUpload={"Parts": parts},
                     IfNoneMatch="*")
        s3.complete_multipart_upload(Bucket=bucket, Key="lock", UploadId=upload,
                                     MultipartUpload={"Parts": parts}, IfMatch=new)
        assert s3.get_object(Bucket=bucket, Key="lock")["Body"].read() == b"mp"
        # DELETE If-Match: the wrong ETag deletes nothing, the right one deletes.
        current = s3.head_object(Bucket=bucket, Key="lock")["ETag"]
        expect_error("PreconditionFailed", 412, s3.delete_object, Bucket=bucket, Key="lock",
                     IfMatch=new)
        s3.delete_object(Bucket=bucket, Key="lock", IfMatch=current)
        expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="lock")
        # DeleteObjects honours each object's ETag the same way.
        s3.put_object(Bucket=bucket, Key="d1", Body=b"1")
        s3.put_object(Bucket=bucket, Key="d2", Body=b"2")
        answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
            {"Key": "d1", "ETag": f'"{md5_hex(b"1")}"'},
            {"Key": "d2", "ETag": f'"{md5_hex(b"other")}"'}]})
        assert [d["Key"] for d in answer.get("Deleted", [])] == ["d1"], answer
        assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("d2", "PreconditionFailed")]
        assert s3.get_object(Bucket=bucket, Key="d2")["Body"].read() == b"2"
        # CopyObject's destination conditions.
        s3.put_object(Bucket=bucket, Key="src", Body=b"s")
        expect_error("PreconditionFailed", 412, s3.copy_object, Bucket=bucket, Key="src",
                     CopySource={"Bucket": bucket, "Key": "race"}, IfNoneMatch="*")


@check
def encryption_at_rest_is_applied_shown_and_refused_where_s3_refuses():
    # S3: SSE-S3, SSE-KMS and bucket default encryption answer their headers on PUT, GET, HEAD
    # and copies, sizes are the plaintext's, ranges and multipart objects read back exactly;
    # SSE-C needs HTTPS (400 InvalidRequest over HTTP) and its key on every read; an
    # encryption the server lacks is refused. Nothing refused is stored.
    data = os.urandom(200_000)
    with Bucket() as bucket:
        put = s3.put_object(Bucket=bucket, Key="s3", Body=data, ServerSideEncryption="AES256")
        assert put.get("ServerSideEncryption") == "AES256", put
        got = s3.get_object(Bucket=bucket, Key="s3", Range="bytes=65530-65545")
        assert got["Body"].read() == data[65530:65546] and got["ServerSideEncryption"] == "AES256"
        head = s3.head_object(Bucket=bucket, Key="s3")
        assert head["ContentLength"] == len(data) and head["ServerSideEncryption"] == "AES256"
        assert head["ETag"] == f'"{md5_hex(data)}"', head
        attributes = s3.get_object_attributes(Bucket=bucket, Key="s3", ObjectAttributes=["ObjectSize"])
        assert attributes["ObjectSize"] == len(data), attributes
        put = s3.put_object(Bucket=bucket, Key="kms", Body=data, ServerSideEncryption="aws:kms")
        assert put.get("ServerSideEncryption") == "aws:kms" and put.get("SSEKMSKeyId"), put
        assert s3.get_object(Bucket=bucket, Key="kms")["Body"].read() == data
        expect_error("InvalidArgument", 400, s3.put_object, Bucket=bucket, Key="dsse", Body=b"x",
                     ServerSideEncryption="aws:kms:dsse")
        context = base64.b64encode(json.dumps({"team": "a"}).encode()).decode()
        expect_error("NotImplemented", 501, s3.put_object, Bucket=bucket, Key="dsse", Body=b"x",
                     ServerSideEncryption="aws:kms", SSEKMSEncryptionContext=context)
        copied = s3.copy_object(Bucket=bucket, Key="clear", CopySource={"Bucket": bucket, "Key": "kms"})
        assert "ServerSideEncryption" not in copied, copied
        assert s3.get_object(Bucket=bucket, Key="clear")["Body"].read() == data
        # The bucket's default seals what asks for nothing, multipart uploads included.
        expect_error("ServerSideEncryptionConfigurationNotFoundError", 404,
                     s3.get_bucket_encryption, Bucket=bucket)
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
        rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
        assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256", rules
        big = os.urandom(11 * MiB)
        transfer = boto3.s3.transfer.TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
        s3.upload_fileobj(io.BytesIO(big), bucket, "big", Config=transfer)
        head = s3.head_object(Bucket=bucket, Key="big")
        assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == len(big), head
        assert head["ETag"].endswith('-3"'), head
        got = s3.get_object(Bucket=bucket, Key="big", Range=f"bytes={5 * MiB - 4}-{5 * MiB + 3}")
        assert got["Body"].read() == big[5 * MiB - 4:5 * MiB + 4]
        assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == big
        s3.delete_bucket_encryption(Bucket=bucket)
        assert "ServerSideEncryption" not in s3.put_object(Bucket=bucket, Key="plain", Body=b"p")
        key = os.urandom(32)
        sse_c = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}
        if s3conf["endpoint"].startswith("https://"):
            s3.put_object(Bucket=bucket, Key="c", Body=data, **sse_c)
            expect_error("InvalidRequest", 400, s3.get_object, Bucket=bucket, Key="c")
            other = dict(sse_c, SSECustomerKey=os.urandom(32))
            expect_error("AccessDenied", 403, s3.get_object, Bucket=bucket, Key="c", **other)
            assert s3.get_object(Bucket=bucket, Key="c", **sse_c)["Body"].read() == data
        else:
            expect_error("InvalidRequest", 400, s3.put_object, Bucket=bucket, Key="c", Body=b"x",
                         **sse_c)
            expect_error("404", 404, s3.head_object, Bucket=bucket, Key="c")
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="dsse")


@check
def errors_say_what_aws_says_and_keep_wefts_reason_as_detail():
    # SDKs and suites compare messages: each of these codes carries AWS's exact message, and
    # weft's own explanation follows in <Detail> (which S3 clients ignore).
    with Bucket() as bucket:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x")
        cases = [
            ("NoSuchKey", "The specified key does not exist.",
             lambda: s3.get_object(Bucket=bucket, Key="missing")),
            ("NoSuchBucket", "The specified bucket does not exist",
             lambda: s3.get_object(Bucket=bucket + "-missing", Key="k")),
            ("NoSuchUpload", "The specified upload does not exist. The upload ID may be invalid, "
             "or the upload may have been aborted or completed.",
             lambda: s3.list_parts(Bucket=bucket, Key="k", UploadId="not-an-upload")),
            ("BucketNotEmpty", "The bucket you tried to delete is not empty",
             lambda: s3.delete_bucket(Bucket=bucket)),
            ("InvalidRange", "The requested range is not satisfiable",
             lambda: s3.get_object(Bucket=bucket, Key="k", Range="bytes=5-9")),
        ]
        for code, message, call in cases:
            response = error_of(call)[2]
            error = response["Error"]
            assert (error.get("Code"), error.get("Message")) == (code, message), error
            # weft's own words for these name what was missing; they are kept.
            if code.startswith("NoSuch"):
                assert error.get("Detail"), f"{code}: weft's own reason is kept: {error}"


@check
def object_lock_keeps_locked_versions_until_their_time():
    # S3: a bucket made with object lock is versioned for good; a version under retention
    # or legal hold cannot be deleted (403 AccessDenied), governance yields to the bypass
    # header, compliance to no one until its date; a delete naming no version only adds a
    # marker. (What meta enforces is tested in weft-meta; this is the S3 face of it.)
    import datetime
    name = f"sem-lock-{os.getpid()}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    try:
        assert s3.get_bucket_versioning(Bucket=name)["Status"] == "Enabled"
        expect_error("InvalidBucketState", 409, s3.put_bucket_versioning, Bucket=name,
                     VersioningConfiguration={"Status": "Suspended"})
        rule = {"ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
        s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration=rule)
        assert s3.get_object_lock_configuration(Bucket=name)["ObjectLockConfiguration"] == rule
        # The bucket's default retention applies to a plain PUT.
        v1 = s3.put_object(Bucket=name, Key="k", Body=b"one")["VersionId"]
        head = s3.head_object(Bucket=name, Key="k")
        assert head["ObjectLockMode"] == "GOVERNANCE", head
        left = head["ObjectLockRetainUntilDate"] - datetime.datetime.now(datetime.timezone.utc)
        assert datetime.timedelta(hours=23) < left <= datetime.timedelta(days=1), left
        expect_error("AccessDenied", 403, s3.delete_object, Bucket=name, Key="k", VersionId=v1)
        marker = s3.delete_object(Bucket=name, Key="k")
        assert marker["DeleteMarker"], marker
        s3.delete_object(Bucket=name, Key="k", VersionId=v1, BypassGovernanceRetention=True)
        s3.delete_object(Bucket=name, Key="k", VersionId=marker["VersionId"])
        # Compliance for a few seconds, and a legal hold.
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)
        v2 = s3.put_object(Bucket=name, Key="c", Body=b"two", ObjectLockMode="COMPLIANCE",
                           ObjectLockRetainUntilDate=until,
                           ObjectLockLegalHoldStatus="ON")["VersionId"]
        assert s3.get_object_legal_hold(Bucket=name, Key="c")["LegalHold"]["Status"] == "ON"
        expect_error("AccessDenied", 403, s3.put_object_retention, Bucket=name, Key="c",
                     Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until},
                     BypassGovernanceRetention=True)
        s3.put_object_legal_hold(Bucket=name, Key="c", LegalHold={"Status": "OFF"})
        expect_error("AccessDenied", 403, s3.delete_object, Bucket=name, Key="c", VersionId=v2,
                     BypassGovernanceRetention=True)
        answer = s3.delete_objects(Bucket=name, BypassGovernanceRetention=True,
                                   Delete={"Objects": [{"Key": "c", "VersionId": v2}]})
        assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("c", "AccessDenied")]
        assert s3.get_object(Bucket=name, Key="c", VersionId=v2)["Body"].read() == b"two"
        time.sleep(max(0.0, (until - datetime.datetime.now(datetime.timezone.utc))
                       .total_seconds()) + 1.1)
        s3.delete_object(Bucket=name, Key="c", VersionId=v2)
        # A bucket without object lock takes no lock.
        with Bucket() as plain:
            s3.put_object(Bucket=plain, Key="p", Body=b"p")
            expect_error("InvalidRequest", 400, s3.put_object_legal_hold, Bucket=plain, Key="p",
                         LegalHold={"Status": "ON"})
            expect_error("ObjectLockConfigurationNotFoundError", 404,
                         s3.get_object_lock_configuration, Bucket=plain)
    finally:
        page = s3.list_object_versions(Bucket=name)
        for v in page.get("Versions", []):
            s3.put_object_legal_hold(Bucket=name, Key=v["Key"], VersionId=v["VersionId"],
                                     LegalHold={"Status": "OFF"})
        for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=name, Key=v["Key"], VersionId=v["VersionId"],
                             BypassGovernanceRetention=True)
        s3.delete_bucket(Bucket=name)


@check
def an_empty_content_md5_is_refused():
    with Bucket() as bucket:
        def empty_md5(params, **_):
            params["headers"]["Content-MD5"] = ""

        c = client()
        c.meta.events.register("before-call.s3.PutObject", empty_md5)
        expect_error("InvalidDigest", 400, c.put_object, Bucket=bucket, Key="md5", Body=b"x")


def post_form(url, fields, data):
    """A browser form upload (multipart/form-data, the file last): (status, body)."""
    boundary = "weftformboundary7MA4YWxkTrZu0gW"
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                     f"{value}\r\n".encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
                 f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    request = urllib.request.Request(url, data=b"".join(parts), method="POST", headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@check
def browser_form_uploads_store_what_their_signed_policy_allows():
    with Bucket() as bucket:
        for version in ("s3v4", "s3"):
            signer = boto3.client(
                "s3", endpoint_url=s3conf["endpoint"], aws_access_key_id=s3conf["access_key"],
                aws_secret_access_key=s3conf["secret_key"], region_name=s3conf["region"],
                config=Config(s3={"addressing_style": "path"}, signature_version=version))
            key = f"form-{version}.txt"
            post = signer.generate_presigned_post(
                bucket, key, Fields={"Content-Type": "text/plain", "success_action_status": "201"},
                Conditions=[{"Content-Type": "text/plain"}, {"success_action_status": "201"},
                            ["content-length-range", 1, 64]], ExpiresIn=300)
            status, body = post_form(post["url"], post["fields"], b"hello form")
            assert status == 201 and b"<Key>" in body, (version, status, body)
            got = s3.get_object(Bucket=bucket, Key=key)
            assert got["Body"].read() == b"hello form" and got["ContentType"] == "text/plain"
            # Outside its policy (too long), or with a tampered signature: refused, nothing kept.
            status, body = post_form(post["url"], {**post["fields"], "key": key + ".big"}, b"x" * 65)
            assert status in (400, 403), (version, status, body)
            # A field its policy does not allow: 403 AccessDenied, as S3 ("Invalid according
            # to Policy").
            wrong = {**post["fields"], "key": key + ".html", "Content-Type": "text/html"}
            status, body = post_form(post["url"], wrong, b"<p>")
            assert status == 403 and b"<Code>AccessDenied</Code>" in body, (version, status, body)
            fields = dict(post["fields"])
            name = "x-amz-signature" if "x-amz-signature" in fields else "signature"
            fields[name] = fields[name][:-2] + ("AA" if not fields[name].endswith("AA") else "BB")
            fields["key"] = key + ".forged"
            status, body = post_form(post["url"], fields, b"forged")
            assert status == 403, (version, status, body)
            listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
            assert listed == sorted(k for k in listed if k.startswith("form-")), listed
            assert not {key + ".big", key + ".forged", key + ".html"} & set(listed), listed


@check
def uploads_in_progress_do_not_keep_a_bucket_and_bucket_rm_force_empties_one():
    # S3: DeleteBucket of a bucket without objects succeeds even with multipart uploads in
    # progress (they go with it); `weft bucket rm --force` also deletes the objects.
    def parts_of(upload_id):
        listed = subprocess.run([WEFT, "ls", ".weft-s3-parts/" + upload_id, "--json", "--meta",
                                 cluster["meta"]], capture_output=True, text=True)
        assert listed.returncode == 0, listed.stderr
        return len(json.loads(listed.stdout)["objects"])

    bucket = f"sem-{os.getpid()}-uploads"
    s3.create_bucket(Bucket=bucket)
    upload, _ = upload_parts(bucket, "pending", [b"p" * 1024])
    s3.delete_bucket(Bucket=bucket)
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]

    assert parts_of(upload) == 0, "the upload's parts went with the bucket"
    s3.create_bucket(Bucket=bucket)
    before = upload_parts(bucket, "listed", [b"q" * 10])[0]
    assert parts_of(before) == 1, "a part in progress is listed (so 0 above means gone)"
    s3.abort_multipart_upload(Bucket=bucket, Key="listed", UploadId=before)
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"o{i}", Body=b"x" * (100_000 * i))
    upload, _ = upload_parts(bucket, "pending", [b"p" * 1024])
    expect_error("BucketNotEmpty", 409, s3.delete_bucket, Bucket=bucket)
    removed = subprocess.run([WEFT, "bucket", "rm", bucket, "--force", "--json", "--meta",
                              cluster["meta"]], capture_output=True, text=True)
    assert removed.returncode == 0, removed.stderr
    report = json.loads(removed.stdout)
    assert (report["objects_deleted"], report["uploads_aborted"]) == (5, 1), report
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert parts_of(upload) == 0


@check
def sigv2_requests_work_and_old_or_bad_dates_are_refused():
    # Bucket and object requests signed with SigV2 work. A SigV2 signature covers its Date: one from yesterday is a replay (403
    # RequestTimeTooSkewed), one that is no date is no authentication (403 AccessDenied).
    v2 = boto3.client(
        "s3", endpoint_url=s3conf["endpoint"], aws_access_key_id=s3conf["access_key"],
        aws_secret_access_key=s3conf["secret_key"], region_name=s3conf["region"],
        config=Config(s3={"addressing_style": "path"}, signature_version="s3",
                      retries={"max_attempts": 1}))
    with Bucket() as bucket:
        v2.put_object(Bucket=bucket, Key="v2", Body=b"now")
        for date, code in (("Tue, 07 Jul 2020 21:53:04 GMT", "RequestTimeTooSkewed"),
                           ("Bad Date", "AccessDenied")):
            def set_date(request, **_):
                request.headers["x-amz-date"] = date

            v2.meta.events.register("before-sign.s3.PutObject", set_date)
            expect_error(code, 403, v2.put_object, Bucket=bucket, Key="old", Body=b"replayed")
            v2.meta.events.unregister("before-sign.s3.PutObject", set_date)
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["v2"]
    # Bucket-level SigV2 requests (botocore signs the bucket's root as `/bucket/`).
    name = f"sem-v2-{os.getpid()}"
    v2.create_bucket(Bucket=name)
    assert [o["Key"] for o in v2.list_objects(Bucket=name).get("Contents", [])] == []
    v2.head_bucket(Bucket=name)
    v2.delete_bucket(Bucket=name)
    expect_error("NoSuchBucket", 404, s3.list_objects_v2, Bucket=name)


def raw(method, path, headers, body=b""):
    """(status, headers with lower-case names, body) of one plain HTTP request (no auth)."""
    conn = http.client.HTTPConnection(ENDPOINT.hostname, ENDPOINT.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def url_request(url, method, headers, data=None):
    """(status, headers with lower-case names, body) of a (presigned) URL, errors included."""
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


APP = "http://app.example"
CORS_RULES = [
    {"ID": "app", "AllowedOrigins": [APP], "AllowedMethods": ["GET", "PUT"],
     "AllowedHeaders": ["content-type", "x-amz-*"], "ExposeHeaders": ["ETag"],
     "MaxAgeSeconds": 600},
    {"AllowedOrigins": ["http://*.reader.example"], "AllowedMethods": ["GET", "HEAD"]},
]


@check
def bucket_cors_configurations_round_trip_are_checked_and_go_with_their_bucket():
    # S3: GetBucketCors of a bucket without one is 404 NoSuchCORSConfiguration; a method
    # other than GET/PUT/HEAD/POST/DELETE is 400 InvalidRequest, as is an AllowedOrigin with
    # two wildcards; DeleteBucketCors is 204 (configuration or not); a bucket's configuration
    # goes with it.
    with Bucket() as bucket:
        expect_error("NoSuchCORSConfiguration", 404, s3.get_bucket_cors, Bucket=bucket)
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": CORS_RULES})
        assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == CORS_RULES
        refused = [
            ("InvalidRequest", [{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}]),
            ("InvalidRequest", [{"AllowedOrigins": ["http://*.*.example"], "AllowedMethods": ["GET"]}]),
            ("InvalidRequest", [{"AllowedOrigins": ["*"], "AllowedMethods": ["GET"],
                                 "AllowedHeaders": ["x-*-*"]}]),
            ("MalformedXML", [{"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]}] * 101),
        ]
        for code, rules in refused:
            expect_error(code, 400, s3.put_bucket_cors, Bucket=bucket,
                         CORSConfiguration={"CORSRules": rules})
        assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == CORS_RULES, "refusals change nothing"
        hundred = [{"AllowedOrigins": [f"http://{i}.example"], "AllowedMethods": ["GET"]}
                   for i in range(100)]
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": hundred})
        assert len(s3.get_bucket_cors(Bucket=bucket)["CORSRules"]) == 100
        for _ in range(2):
            answer = s3.delete_bucket_cors(Bucket=bucket)
            assert answer["ResponseMetadata"]["HTTPStatusCode"] == 204
            expect_error("NoSuchCORSConfiguration", 404, s3.get_bucket_cors, Bucket=bucket)
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": CORS_RULES})
    missing = f"sem-{os.getpid()}-no-such-bucket"
    for call in (s3.get_bucket_cors, s3.delete_bucket_cors):
        expect_error("NoSuchBucket", 404, call, Bucket=missing)
    expect_error("NoSuchBucket", 404, s3.put_bucket_cors, Bucket=missing,
                 CORSConfiguration={"CORSRules": CORS_RULES})
    # The bucket above was deleted with its configuration: one of its name starts without.
    s3.create_bucket(Bucket=bucket)
    try:
        expect_error("NoSuchCORSConfiguration", 404, s3.get_bucket_cors, Bucket=bucket)
        status, headers, _ = raw("OPTIONS", f"/{bucket}/k",
                                 {"Origin": APP, "Access-Control-Request-Method": "GET"})
        assert status == 403 and "access-control-allow-origin" not in headers, (status, headers)
    finally:
        s3.delete_bucket(Bucket=bucket)


@check
def cors_preflights_are_answered_without_credentials_by_the_first_matching_rule():
    # S3: a preflight (OPTIONS, no credentials) is 200 with the Access-Control-* headers of the
    # first rule allowing its Origin, Access-Control-Request-Method and every header of
    # Access-Control-Request-Headers; 403 AccessForbidden when none does or the bucket has no
    # configuration (or does not exist); 400 without Origin or Access-Control-Request-Method.
    def preflight(bucket, origin, method, headers=None, path="/k"):
        sent = {"Origin": origin, "Access-Control-Request-Method": method}
        if headers:
            sent["Access-Control-Request-Headers"] = headers
        return raw("OPTIONS", f"/{bucket}{path}", {k: v for k, v in sent.items() if v})

    with Bucket() as bucket, Bucket() as bare:
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": CORS_RULES})
        status, headers, body = preflight(bucket, APP, "PUT", "Content-Type, X-Amz-Date")
        assert status == 200 and body == b"", (status, body)
        expected = {
            "access-control-allow-origin": APP,
            "access-control-allow-credentials": "true",
            "access-control-allow-methods": "GET, PUT",
            "access-control-allow-headers": "content-type, x-amz-date",
            "access-control-expose-headers": "ETag",
            "access-control-max-age": "600",
            "vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
        }
        assert {k: headers.get(k) for k in expected} == expected, headers
        assert headers.get("x-amz-request-id"), headers
        # The bucket itself (no key) is answered the same way.
        status, headers, _ = preflight(bucket, "http://a.reader.example", "HEAD", path="")
        assert (status, headers.get("access-control-allow-origin")) == (200, "http://a.reader.example")
        assert headers.get("access-control-allow-methods") == "GET, HEAD", headers
        assert "access-control-max-age" not in headers, headers
        refused = [
            (bucket, APP, "DELETE", None),                      # no rule allows the method
            (bucket, APP, "PUT", "content-type, authorization"),  # a header not allowed
            (bucket, "http://reader.example", "GET", None),     # `*.` needs a subdomain
            (bucket, "http://a.reader.example", "GET", "x-amz-date"),  # rule 2 allows no header
            (bare, APP, "GET", None),                           # no configuration
            (f"sem-{os.getpid()}-no-such-bucket", APP, "GET", None),
        ]
        for case in refused:
            status, headers, body = preflight(*case)
            assert status == 403 and b"<Code>AccessForbidden</Code>" in body, (case, status, body)
            assert not any(k.startswith("access-control-") for k in headers), (case, headers)
        for origin, method in ((None, "GET"), (APP, None), (None, None)):
            status, _, body = preflight(bucket, origin, method)
            assert status == 400 and b"<Code>BadRequest</Code>" in body, (origin, method, status, body)
        # A deleted configuration stops answering at once (this gateway forgets its cache).
        s3.delete_bucket_cors(Bucket=bucket)
        assert preflight(bucket, APP, "GET")[0] == 403


@check
def cors_headers_go_on_responses_to_allowed_origins_presigned_and_errors_included():
    # S3: a request with an Origin that a rule allows for its method gets the rule's
    # Access-Control-* headers, error responses included; other requests are served as
    # without CORS. CORS grants no access: an anonymous GET is still refused.
    with Bucket() as bucket:
        s3.put_object(Bucket=bucket, Key="k", Body=b"cors")
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": CORS_RULES})
        get = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
        status, headers, body = url_request(get, "GET", {"Origin": APP})
        assert (status, body) == (200, b"cors")
        assert headers.get("access-control-allow-origin") == APP, headers
        assert headers.get("access-control-allow-methods") == "GET, PUT", headers
        assert headers.get("access-control-expose-headers") == "ETag", headers
        assert "Origin" in headers.get("vary", ""), headers
        assert "access-control-allow-headers" not in headers, "only preflights name headers"
        status, headers, body = url_request(get, "GET", {})
        assert status == 200 and "access-control-allow-origin" not in headers, headers
        # Allowed for GET and HEAD only: a PUT from that origin is served without CORS.
        put = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p"})
        status, headers, _ = url_request(put, "PUT", {"Origin": "http://a.reader.example"}, b"1")
        assert status == 200 and "access-control-allow-origin" not in headers, (status, headers)
        status, headers, _ = url_request(put, "PUT", {"Origin": APP}, b"22")
        assert (status, headers.get("access-control-allow-origin")) == (200, APP), (status, headers)
        assert s3.get_object(Bucket=bucket, Key="p")["Body"].read() == b"22"
        missing = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "none"})
        status, headers, body = url_request(missing, "GET", {"Origin": APP})
        assert status == 404 and b"NoSuchKey" in body, (status, body)
        assert headers.get("access-control-allow-origin") == APP, headers
        status, headers, body = raw("GET", f"/{bucket}/k", {"Origin": APP})
        assert status == 403 and b"AccessDenied" in body, (status, body)
        assert headers.get("access-control-allow-origin") == APP, headers


@check
def versioning_keeps_every_version_and_delete_markers_hide_them():
    # S3: with versioning enabled every PUT makes a version, GET/HEAD/DELETE can name one, a
    # DELETE naming none leaves a delete marker (GET: 404 with x-amz-delete-marker), deleting
    # the marker brings the object back; an object from before versioning is version "null".
    with Bucket() as bucket:
        s3.put_object(Bucket=bucket, Key="k", Body=b"before")
        assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
        one = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["VersionId"]
        two = s3.put_object(Bucket=bucket, Key="k", Body=b"two")["VersionId"]
        assert len({one, two, "null"}) == 3, (one, two)
        got = s3.get_object(Bucket=bucket, Key="k")
        assert (got["Body"].read(), got["VersionId"]) == (b"two", two)
        for version, body in ((one, b"one"), ("null", b"before")):
            assert s3.get_object(Bucket=bucket, Key="k", VersionId=version)["Body"].read() == body
        assert s3.head_object(Bucket=bucket, Key="k", VersionId=one)["ContentLength"] == 3
        deleted = s3.delete_object(Bucket=bucket, Key="k")
        marker = deleted["VersionId"]
        assert deleted["DeleteMarker"] and marker not in (one, two, "null"), deleted
        _, _, response = error_of(s3.get_object, Bucket=bucket, Key="k")
        headers = response["ResponseMetadata"]["HTTPHeaders"]
        assert response["Error"]["Code"] == "NoSuchKey", response["Error"]
        assert (headers.get("x-amz-delete-marker"), headers.get("x-amz-version-id")) == ("true", marker)
        code, status, _ = error_of(s3.get_object, Bucket=bucket, Key="k", VersionId=marker)
        assert status == 405, (code, status)
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])] == []
        listed = s3.list_object_versions(Bucket=bucket)
        assert [(v["VersionId"], v["IsLatest"]) for v in listed["Versions"]] == [
            (two, False), (one, False), ("null", False)], listed["Versions"]
        assert [(m["VersionId"], m["IsLatest"]) for m in listed["DeleteMarkers"]] == [(marker, True)]
        # Paged one entry at a time, the markers resume exactly.
        seen, key_marker, version_marker = [], None, None
        while True:
            kwargs = {"KeyMarker": key_marker, "VersionIdMarker": version_marker} if key_marker else {}
            page = s3.list_object_versions(Bucket=bucket, MaxKeys=1, **kwargs)
            seen += [v["VersionId"] for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if not page["IsTruncated"]:
                break
            key_marker, version_marker = page["NextKeyMarker"], page["NextVersionIdMarker"]
        assert seen == [marker, two, one, "null"], seen
        # Deleting the marker for good brings the newest version back; so does deleting it.
        s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"two"
        s3.delete_object(Bucket=bucket, Key="k", VersionId=two)
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"one"
        # A copy can name its source's version.
        s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "k", "VersionId": "null"})
        assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"before"
        # The bucket keeps its versions: it is not empty until they are gone.
        for key in ("k", "copy"):
            s3.delete_object(Bucket=bucket, Key=key)
        expect_error("BucketNotEmpty", 409, s3.delete_bucket, Bucket=bucket)


@check
def suspended_versioning_overwrites_only_the_null_version():
    # S3: while suspended a PUT writes version "null" (and names none), replacing the previous null version
    # and keeping the versions made while enabled; DeleteObjects can name versions.
    with Bucket() as bucket:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        kept = s3.put_object(Bucket=bucket, Key="x", Body=b"kept")["VersionId"]
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
        # A write to a suspended bucket names no version (it makes the null one).
        assert "VersionId" not in s3.put_object(Bucket=bucket, Key="x", Body=b"n1")
        assert s3.head_object(Bucket=bucket, Key="x")["VersionId"] == "null"
        s3.put_object(Bucket=bucket, Key="x", Body=b"null two")
        listed = s3.list_object_versions(Bucket=bucket)["Versions"]
        assert [(v["VersionId"], v["Size"]) for v in listed] == [("null", 8), (kept, 4)], listed
        result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
            {"Key": "x", "VersionId": kept}, {"Key": "x", "VersionId": "null"}]})
        assert sorted(d["VersionId"] for d in result["Deleted"]) == sorted([kept, "null"]), result
        assert s3.list_object_versions(Bucket=bucket).get("Versions") is None


def weft_json(*args):
    done = subprocess.run([WEFT, *args, "--json", "--meta", cluster["meta"]],
                          capture_output=True, text=True)
    assert done.returncode == 0, (args, done.stderr)
    return json.loads(done.stdout)


@check
def weft_cli_versions_a_bucket_and_bucket_rm_force_deletes_every_version():
    # The CLI sees the same versioning as S3: `weft bucket versioning` sets and shows it,
    # `weft rm` leaves a delete marker in a versioned bucket (the bytes stay as a version),
    # and `weft bucket rm --force` deletes versions and markers too.
    bucket = f"sem-{os.getpid()}-cli"
    s3.create_bucket(Bucket=bucket)
    assert weft_json("bucket", "versioning", bucket)["versioning"] is None
    assert weft_json("bucket", "versioning", bucket, "enabled")["versioning"] == "enabled"
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"first")["VersionId"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"second")
    removed = weft_json("rm", f"{bucket}/k")
    assert removed["removed"] is None and removed["delete_marker"], removed
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="k")
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=first)["Body"].read() == b"first"
    report = weft_json("bucket", "rm", bucket, "--force")
    assert report["versions_deleted"] == 3, report
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


@check
def acls_and_policies_decide_who_may_do_what():
    # S3: a bucket is its creator's; another user may do only what its ACL (or the
    # object's, for reads of it) or the bucket policy grants; anonymous requests get what
    # AllUsers is granted; a public access block refuses public ACLs and policies.
    from botocore import UNSIGNED
    name = f"sem-acl-{os.getpid()}"
    made = weft_json("key", "create", name, "--email", f"{name}@example.com")
    alt = boto3.client("s3", endpoint_url=s3conf["endpoint"],
                       aws_access_key_id=made["access_key"],
                       aws_secret_access_key=made["secret_key"], region_name=s3conf["region"],
                       config=Config(s3={"addressing_style": "path"},
                                     retries={"max_attempts": 1}))
    anonymous = boto3.client("s3", endpoint_url=s3conf["endpoint"], region_name=s3conf["region"],
                             config=Config(signature_version=UNSIGNED,
                                           s3={"addressing_style": "path"},
                                           retries={"max_attempts": 1}))
    try:
        with Bucket() as bucket:
            s3.put_object(Bucket=bucket, Key="private", Body=b"p")
            s3.put_object(Bucket=bucket, Key="public", Body=b"o", ACL="public-read")
            # Private by default: neither alt nor anonymous may list, read or write.
            expect_error("AccessDenied", 403, alt.list_objects_v2, Bucket=bucket)
            expect_error("AccessDenied", 403, alt.get_object, Bucket=bucket, Key="private")
            expect_error("AccessDenied", 403, alt.put_object, Bucket=bucket, Key="x", Body=b"x")
            expect_error("BucketAlreadyExists", 409, alt.create_bucket, Bucket=bucket)
            assert alt.list_buckets()["Buckets"] == [] or bucket not in [
                b["Name"] for b in alt.list_buckets()["Buckets"]]
            assert anonymous.list_buckets()["Buckets"] == []
            # An object's own ACL: public-read is readable by anyone, the bucket stays private.
            assert anonymous.get_object(Bucket=bucket, Key="public")["Body"].read() == b"o"
            expect_error("AccessDenied", 403, anonymous.get_object, Bucket=bucket, Key="private")
            acl = s3.get_object_acl(Bucket=bucket, Key="public")
            assert {g["Permission"] for g in acl["Grants"]} == {"READ", "FULL_CONTROL"}, acl
            # A grant by email to alt: it may list (and a missing key is now 404 to it).
            s3.put_bucket_acl(Bucket=bucket, GrantRead=f'emailAddress="{name}@example.com"',
                              GrantFullControl=f'id="{acl["Owner"]["ID"]}"')
            assert [o["Key"] for o in alt.list_objects_v2(Bucket=bucket)["Contents"]] == [
                "private", "public"]
            expect_error("404", 404, alt.head_object, Bucket=bucket, Key="missing")
            expect_error("AccessDenied", 403, alt.get_object, Bucket=bucket, Key="private")
            expect_error("UnresolvableGrantByEmailAddress", 400, s3.put_bucket_acl,
                         Bucket=bucket, GrantRead='emailAddress="nobody@example.com"')
            # A policy allowing alt GetObject on everything; an explicit Deny wins over it.
            policy = {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": [name]}, "Action": "s3:GetObject",
                 "Resource": f"arn:aws:s3:::{bucket}/*"},
                {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
                 "Resource": f"arn:aws:s3:::{bucket}/public"}]}
            s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
            assert alt.get_object(Bucket=bucket, Key="private")["Body"].read() == b"p"
            expect_error("AccessDenied", 403, anonymous.get_object, Bucket=bucket, Key="public")
            expect_error("MalformedPolicy", 400, s3.put_bucket_policy, Bucket=bucket,
                         Policy=json.dumps({"Statement": [{"Effect": "Allow",
                                            "NotPrincipal": "*", "Action": "s3:*",
                                            "Resource": f"arn:aws:s3:::{bucket}"}]}))
            s3.delete_bucket_policy(Bucket=bucket)
            # The public access block: public ACLs and policies refused.
            s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
                "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
                "RestrictPublicBuckets": False})
            expect_error("AccessDenied", 403, s3.put_object, Bucket=bucket, Key="p2", Body=b"x",
                         ACL="public-read")
            expect_error("AccessDenied", 403, anonymous.get_object, Bucket=bucket, Key="public")
            public = {"Statement": [{"Effect": "Allow", "Principal": "*",
                                     "Action": "s3:GetObject",
                                     "Resource": f"arn:aws:s3:::{bucket}/*"}]}
            expect_error("AccessDenied", 403, s3.put_bucket_policy, Bucket=bucket,
                         Policy=json.dumps(public))
            assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is False
            # A key scoped to this bucket, read-only: its user's rights (here the owner's),
            # narrowed.
            owner = acl["Owner"]["ID"]
            scoped_key = weft_json("key", "create", owner, "--bucket", bucket, "--read-only")
            scoped = boto3.client("s3", endpoint_url=s3conf["endpoint"],
                                  aws_access_key_id=scoped_key["access_key"],
                                  aws_secret_access_key=scoped_key["secret_key"],
                                  region_name=s3conf["region"],
                                  config=Config(s3={"addressing_style": "path"},
                                                retries={"max_attempts": 1}))
            try:
                assert scoped.get_object(Bucket=bucket, Key="private")["Body"].read() == b"p"
                assert [b["Name"] for b in scoped.list_buckets()["Buckets"]] == [bucket]
                expect_error("AccessDenied", 403, scoped.put_object, Bucket=bucket, Key="w",
                             Body=b"w")
                expect_error("AccessDenied", 403, scoped.delete_object, Bucket=bucket,
                             Key="private")
                expect_error("AccessDenied", 403, scoped.create_bucket, Bucket=f"{bucket}-x")
            finally:
                subprocess.run([WEFT, "key", "rm", scoped_key["access_key"], "--meta",
                                cluster["meta"]], capture_output=True)
    finally:
        subprocess.run([WEFT, "key", "rm", made["access_key"], "--meta", cluster["meta"]],
                       capture_output=True)


@check
def bucket_policy_conditions_on_tags_decide_reads_and_writes():
    # S3: s3:ExistingObjectTag/KEY tests the tags of the object a request reads, and
    # s3:RequestObjectTag/KEY the tags a write asks for (x-amz-tagging); a Deny wins.
    from botocore import UNSIGNED
    anonymous = boto3.client("s3", endpoint_url=s3conf["endpoint"], region_name=s3conf["region"],
                             config=Config(signature_version=UNSIGNED,
                                           s3={"addressing_style": "path"},
                                           retries={"max_attempts": 1}))
    with Bucket() as bucket:
        s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
            "BlockPublicAcls": False, "IgnorePublicAcls": False,
            "BlockPublicPolicy": False, "RestrictPublicBuckets": False})
        s3.put_object(Bucket=bucket, Key="shared", Body=b"s", Tagging="share=public")
        s3.put_object(Bucket=bucket, Key="kept", Body=b"k", Tagging="share=no")
        policy = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": f"arn:aws:s3:::{bucket}/*",
             "Condition": {"StringEquals": {"s3:ExistingObjectTag/share": "public"}}},
            {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
             "Resource": f"arn:aws:s3:::{bucket}/*",
             "Condition": {"StringLike": {"s3:RequestObjectTag/class": "secret*"}}}]}
        s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
        assert anonymous.get_object(Bucket=bucket, Key="shared")["Body"].read() == b"s"
        expect_error("AccessDenied", 403, anonymous.get_object, Bucket=bucket, Key="kept")
        # Retagging the object changes what the policy allows.
        s3.put_object_tagging(Bucket=bucket, Key="kept",
                              Tagging={"TagSet": [{"Key": "share", "Value": "public"}]})
        assert anonymous.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"k"
        expect_error("AccessDenied", 403, s3.put_object, Bucket=bucket, Key="s", Body=b"x",
                     Tagging="class=secret-plans")
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="s")
        s3.put_object(Bucket=bucket, Key="o", Body=b"x", Tagging="class=open")
        s3.delete_bucket_policy(Bucket=bucket)


@check
def object_tags_are_kept_with_their_version_and_checked():
    # S3: tags come with a write (x-amz-tagging), are replaced or deleted whole, are counted
    # on GET and HEAD (x-amz-tagging-count), follow a copy unless its tagging directive is
    # REPLACE, and a set S3 would not take (11 tags, a 129-character key, a character outside
    # letters, digits, spaces and + - = . _ : / @) is 400 InvalidTag.
    with Bucket() as bucket:
        s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&b%20c=x%3Dy%2B%40")
        tags = s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]
        assert tags == [{"Key": "a", "Value": "1"}, {"Key": "b c", "Value": "x=y+@"}], tags
        head = s3.head_object(Bucket=bucket, Key="t")["ResponseMetadata"]["HTTPHeaders"]
        assert head.get("x-amz-tagging-count") == "2", head
        assert s3.get_object(Bucket=bucket, Key="t")["TagCount"] == 2
        s3.put_object_tagging(Bucket=bucket, Key="t",
                              Tagging={"TagSet": [{"Key": "only", "Value": "one"}]})
        assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == [
            {"Key": "only", "Value": "one"}]
        assert s3.get_object(Bucket=bucket, Key="t")["Body"].read() == b"x", "bytes untouched"
        s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "t"})
        assert s3.get_object_tagging(Bucket=bucket, Key="copy")["TagSet"] == [
            {"Key": "only", "Value": "one"}]
        s3.copy_object(Bucket=bucket, Key="new", CopySource={"Bucket": bucket, "Key": "t"},
                       TaggingDirective="REPLACE", Tagging="n=1")
        assert s3.get_object_tagging(Bucket=bucket, Key="new")["TagSet"] == [
            {"Key": "n", "Value": "1"}]
        eleven = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
        expect_error("InvalidTag", 400, s3.put_object_tagging, Bucket=bucket, Key="t",
                     Tagging=eleven)
        expect_error("InvalidTag", 400, s3.put_object_tagging, Bucket=bucket, Key="t",
                     Tagging={"TagSet": [{"Key": "k" * 129, "Value": "v"}]})
        expect_error("InvalidTag", 400, s3.put_object, Bucket=bucket, Key="never", Body=b"x",
                     Tagging="&".join(f"k{i}=v" for i in range(11)))
        expect_error("InvalidTag", 400, s3.put_object, Bucket=bucket, Key="never", Body=b"x",
                     Tagging="k=x%26y")
        expect_error("InvalidTag", 400, s3.put_object_tagging, Bucket=bucket, Key="t",
                     Tagging={"TagSet": [{"Key": "a*b", "Value": "v"}]})
        assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == [
            {"Key": "only", "Value": "one"}], "a refused set changes nothing"
        s3.delete_object_tagging(Bucket=bucket, Key="t")
        assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
        upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="m=p")["UploadId"]
        etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1,
                              Body=b"part")["ETag"]
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": etag}]})
        assert s3.get_object_tagging(Bucket=bucket, Key="mp")["TagSet"] == [
            {"Key": "m", "Value": "p"}]
        # A bucket's own tags: none until set (404 NoSuchTagSet), up to 50.
        expect_error("NoSuchTagSet", 404, s3.get_bucket_tagging, Bucket=bucket)
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "cost", "Value": "1"}]})
        assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": "cost", "Value": "1"}]
        s3.delete_bucket_tagging(Bucket=bucket)
        expect_error("NoSuchTagSet", 404, s3.get_bucket_tagging, Bucket=bucket)


@check
def lifecycle_rules_are_checked_and_the_executor_carries_them_out():
    # S3: a lifecycle configuration reads back as given (with an ID made up where none was
    # given), bad ones are refused, and objects a rule covers say when they expire
    # (x-amz-expiration). The cluster's executor then expires them: CI runs `weft up
    # --lifecycle-day 2s`, named to this check by WEFT_LIFECYCLE_DAY (seconds).
    day = float(os.environ.get("WEFT_LIFECYCLE_DAY", "0"))
    with Bucket() as bucket:
        rules = [
            {"ID": "tmp", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled",
             "Expiration": {"Days": 1}},
            {"Filter": {"Tag": {"Key": "expire", "Value": "yes"}}, "Status": "Enabled",
             "Expiration": {"Days": 1}},
            {"ID": "uploads", "Filter": {"Prefix": ""}, "Status": "Enabled",
             "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
        ]
        s3.put_bucket_lifecycle_configuration(Bucket=bucket,
                                              LifecycleConfiguration={"Rules": rules})
        got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
        assert [r.get("Filter") for r in got] == [r["Filter"] for r in rules], got
        assert got[0]["ID"] == "tmp" and got[1]["ID"], got
        put = s3.put_object(Bucket=bucket, Key="tmp/a", Body=b"a")
        header = put["ResponseMetadata"]["HTTPHeaders"].get("x-amz-expiration", "")
        assert 'rule-id="tmp"' in header and "00:00:00 GMT" in header, header
        s3.put_object(Bucket=bucket, Key="tagged/yes", Body=b"y", Tagging="expire=yes")
        s3.put_object(Bucket=bucket, Key="tagged/no", Body=b"n", Tagging="expire=no")
        s3.put_object(Bucket=bucket, Key="keep", Body=b"k")
        s3.create_multipart_upload(Bucket=bucket, Key="abandoned")
        for bad, code in [({"Status": "enabled"}, "MalformedXML"),
                          ({"Expiration": {"Days": 0}}, "InvalidArgument"),
                          ({"Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]},
                           "NotImplemented")]:
            rule = {**rules[0], **bad}
            error = error_of(s3.put_bucket_lifecycle_configuration, Bucket=bucket,
                             LifecycleConfiguration={"Rules": [rule]})
            assert error[0] == code, (bad, error[:2])
        expect_error("InvalidArgument", 400, s3.put_bucket_lifecycle_configuration,
                     Bucket=bucket, LifecycleConfiguration={"Rules": [rules[0], rules[0]]})
        assert len(s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]) == 3
        if day <= 0:
            print("      (WEFT_LIFECYCLE_DAY unset: the executor's part was not checked)")
            return
        deadline = time.time() + 20 * day + 10
        while True:
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
            uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            if keys == ["keep", "tagged/no"] and not uploads:
                break
            assert time.time() < deadline, f"not expired in time: {keys}, {uploads}"
            time.sleep(day / 4)
        s3.delete_bucket_lifecycle(Bucket=bucket)
        expect_error("NoSuchLifecycleConfiguration", 404, s3.get_bucket_lifecycle_configuration,
                     Bucket=bucket)



def b64(data):
    return base64.b64encode(data).decode()


def crc32_b64(data):
    return b64(zlib.crc32(data).to_bytes(4, "big"))


def sha256_b64(data):
    return b64(hashlib.sha256(data).digest())


def aws_chunked(data, trailer=None, piece=64 * 1024):
    """`data` as an aws-chunked body (unsigned chunks), ending with `trailer` (name, value)."""
    out = b""
    for at in range(0, len(data), piece):
        part = data[at:at + piece]
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    out += b"0\r\n"
    if trailer:
        out += f"{trailer[0]}:{trailer[1]}\r\n".encode()
    return out + b"\r\n"


def signed_streaming_put(path, decoded_length, body, trailer_name):
    """(status, headers, body) of a PUT signed STREAMING-UNSIGNED-PAYLOAD-TRAILER and sent with
    Transfer-Encoding: chunked and no Content-Length, as botocore sends uploads over HTTPS."""
    headers = {
        "Content-Encoding": "aws-chunked",
        "X-Amz-Content-SHA256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        "X-Amz-Decoded-Content-Length": str(decoded_length),
    }
    if trailer_name:
        headers["X-Amz-Trailer"] = trailer_name
    return chunked_put(path, headers, body)


def chunked_put(path, headers, body):
    """(status, headers, body) of a signed PUT whose body goes with Transfer-Encoding: chunked
    and no Content-Length."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="PUT", url=s3conf["endpoint"] + path, headers=headers, data=b"")
    SigV4Auth(Credentials(s3conf["access_key"], s3conf["secret_key"]), "s3",
              s3conf["region"]).add_auth(request)
    conn = http.client.HTTPConnection(ENDPOINT.hostname, ENDPOINT.port, timeout=30)
    try:
        conn.putrequest("PUT", path, skip_accept_encoding=True)
        for name, value in request.headers.items():
            conn.putheader(name, value)
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        try:
            for at in range(0, len(body), 100_000):
                part = body[at:at + 100_000]
                conn.send(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            conn.send(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was read (its headers): the answer says why
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def signed_chunks_put(path, data, trailer, piece=64 * 1024, tamper=None):
    """(status, body) of a PUT signed STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER: every chunk
    signed in a chain from the seed signature, then the trailer (name, value) signed too.
    `tamper` names what to break: "chunk" (a data byte after signing) or "trailer"."""
    import hmac
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    headers = {
        "Content-Encoding": "aws-chunked",
        "X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "X-Amz-Decoded-Content-Length": str(len(data)),
        "X-Amz-Trailer": trailer[0],
    }
    request = AWSRequest(method="PUT", url=s3conf["endpoint"] + path, headers=headers, data=b"")
    SigV4Auth(Credentials(s3conf["access_key"], s3conf["secret_key"]), "s3",
              s3conf["region"]).add_auth(request)
    amz_date = request.headers["X-Amz-Date"]
    scope = f"{amz_date[:8]}/{s3conf['region']}/s3/aws4_request"
    previous = request.headers["Authorization"].rsplit("Signature=", 1)[1]
    key = ("AWS4" + s3conf["secret_key"]).encode()
    for part in (amz_date[:8], s3conf["region"], "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    empty = hashlib.sha256(b"").hexdigest()

    def sign(kind, *lines):
        text = "\n".join([kind, amz_date, scope, *lines])
        return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()

    body = b""
    for at in list(range(0, len(data), piece)) + [len(data)]:
        chunk = data[at:at + piece]
        previous = sign("AWS4-HMAC-SHA256-PAYLOAD", previous, empty,
                        hashlib.sha256(chunk).hexdigest())
        if tamper == "chunk" and chunk:
            chunk = bytes([chunk[0] ^ 1]) + chunk[1:]
        body += f"{len(chunk):x};chunk-signature={previous}\r\n".encode() + chunk + b"\r\n"
        if not chunk:
            break
    body = body[:-2]  # the last (empty) chunk's line ends the chunks: the trailer follows
    line = f"{trailer[0]}:{trailer[1]}"
    signature = sign("AWS4-HMAC-SHA256-TRAILER", previous, hashlib.sha256((line + "\n").encode()).hexdigest())
    if tamper == "trailer":
        signature = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    body += f"{line}\r\nx-amz-trailer-signature:{signature}\r\n\r\n".encode()
    conn = http.client.HTTPConnection(ENDPOINT.hostname, ENDPOINT.port, timeout=30)
    try:
        conn.putrequest("PUT", path, skip_accept_encoding=True)
        for name, value in request.headers.items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        try:
            conn.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


@check
def signed_chunk_uploads_with_a_signed_trailer_are_checked_chunk_by_chunk():
    # S3: STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER signs every chunk and the trailer; a
    # chunk or a trailer whose signature does not hold stores nothing, and the trailer's
    # checksum is checked and kept.
    data = os.urandom(200_000)
    with Bucket() as bucket:
        status, answer = signed_chunks_put(f"/{bucket}/ok", data, ("x-amz-checksum-crc32", crc32_b64(data)))
        assert status == 200, (status, answer)
        head = s3.head_object(Bucket=bucket, Key="ok", ChecksumMode="ENABLED")
        assert head.get("ChecksumCRC32") == crc32_b64(data), head
        assert s3.get_object(Bucket=bucket, Key="ok")["Body"].read() == data
        for tamper in ["chunk", "trailer"]:
            status, answer = signed_chunks_put(f"/{bucket}/{tamper}", data,
                                               ("x-amz-checksum-crc32", crc32_b64(data)), tamper=tamper)
            assert status == 403 and b"SignatureDoesNotMatch" in answer, (tamper, status, answer)
            expect_error("404", 404, s3.head_object, Bucket=bucket, Key=tamper)
        status, answer = signed_chunks_put(f"/{bucket}/crc", data,
                                           ("x-amz-checksum-crc32", crc32_b64(data + b"x")))
        assert status == 400 and b"BadDigest" in answer, (status, answer)
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="crc")


@check
def plain_chunked_uploads_without_a_length_are_stored_whole():
    # What minio-go and `mc` send for input of unknown length: Transfer-Encoding: chunked, no
    # Content-Length, no aws-chunked (AWS answers 411; weft spools and stores it). The body
    # is checked like any other: a Content-MD5 that does not match stores nothing.
    with Bucket() as bucket:
        for size in [0, 1, 3 * MiB + 5]:
            data = os.urandom(size)
            status, _, answer = chunked_put(f"/{bucket}/plain-{size}",
                                            {"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}, data)
            assert status == 200, (size, status, answer)
            got = s3.get_object(Bucket=bucket, Key=f"plain-{size}")
            assert got["Body"].read() == data and got["ETag"] == f'"{md5_hex(data)}"', size
        data = os.urandom(100_000)
        wrong = base64.b64encode(hashlib.md5(data + b"x").digest()).decode()
        status, _, answer = chunked_put(f"/{bucket}/bad",
                                        {"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD",
                                         "Content-MD5": wrong}, data)
        assert status == 400 and b"BadDigest" in answer, (status, answer)
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="bad")
        # Nothing unsigned is spooled: 403 before the body is read.
        conn = http.client.HTTPConnection(ENDPOINT.hostname, ENDPOINT.port, timeout=30)
        try:
            conn.putrequest("PUT", f"/{bucket}/anonymous", skip_accept_encoding=True)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            try:
                conn.send(b"5\r\nhello\r\n0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert conn.getresponse().status == 403
        finally:
            conn.close()
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="anonymous")


@check
def flexible_checksums_are_checked_kept_and_returned():
    # S3: a PUT's x-amz-checksum-ALGO is checked (400 BadDigest, nothing stored, when it does
    # not match), kept with the object, and returned by HEAD and GET with
    # x-amz-checksum-mode: ENABLED (whole objects only) and by GetObjectAttributes.
    data = os.urandom(300 * 1024 + 7)
    with Bucket() as bucket:
        put = s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="SHA256")
        assert put.get("ChecksumSHA256") == sha256_b64(data), put
        head = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
        assert head.get("ChecksumSHA256") == sha256_b64(data), head
        assert head.get("ChecksumType") == "FULL_OBJECT", head
        assert "ChecksumSHA256" not in s3.head_object(Bucket=bucket, Key="k")
        got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
        assert got.get("ChecksumSHA256") == sha256_b64(data) and got["Body"].read() == data
        ranged = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED", Range="bytes=0-9")
        assert "ChecksumSHA256" not in ranged and ranged["Body"].read() == data[:10]
        attributes = s3.get_object_attributes(Bucket=bucket, Key="k",
                                              ObjectAttributes=["Checksum", "ObjectSize"])
        assert attributes["Checksum"].get("ChecksumSHA256") == sha256_b64(data), attributes
        # A value given by the caller is sent as it is: a wrong one stores nothing.
        expect_error("BadDigest", 400, s3.put_object, Bucket=bucket, Key="bad", Body=data,
                     ChecksumCRC32=crc32_b64(data + b"x"))
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="bad")
        put = s3.put_object(Bucket=bucket, Key="crc", Body=data, ChecksumCRC32=crc32_b64(data))
        assert put.get("ChecksumCRC32") == crc32_b64(data), put
        # A malformed value is refused before the body is stored.
        expect_error("InvalidRequest", 400, s3.put_object, Bucket=bucket, Key="bad", Body=data,
                     ChecksumCRC32="not-base64")
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="bad")


@check
def aws_chunked_uploads_of_any_length_are_stored_and_their_trailers_checked():
    # S3: an aws-chunked body sent with Transfer-Encoding: chunked (no Content-Length: its
    # length is x-amz-decoded-content-length) is stored, 0 bytes included; its checksum
    # trailer is checked (400 BadDigest, nothing stored) and kept.
    with Bucket() as bucket:
        for size in (0, 1, 200 * 1024 + 3):
            data = os.urandom(size)
            value = crc32_b64(data)
            body = aws_chunked(data, ("x-amz-checksum-crc32", value))
            status, headers, answer = signed_streaming_put(
                f"/{bucket}/ok-{size}", size, body, "x-amz-checksum-crc32")
            assert status == 200, (size, status, answer)
            assert headers.get("x-amz-checksum-crc32") == value, headers
            got = s3.get_object(Bucket=bucket, Key=f"ok-{size}", ChecksumMode="ENABLED")
            assert got["Body"].read() == data and got.get("ChecksumCRC32") == value
            # The same body with a trailer that does not match, and with none at all.
            wrong = aws_chunked(data, ("x-amz-checksum-crc32", crc32_b64(data + b"x")))
            status, _, answer = signed_streaming_put(
                f"/{bucket}/bad-{size}", size, wrong, "x-amz-checksum-crc32")
            assert status == 400 and b"BadDigest" in answer, (size, status, answer)
            status, _, answer = signed_streaming_put(
                f"/{bucket}/missing-{size}", size, aws_chunked(data), "x-amz-checksum-crc32")
            assert status == 400, (size, status, answer)
            # A TRAILER payload must announce its trailer (x-amz-trailer).
            status, _, answer = signed_streaming_put(
                f"/{bucket}/unannounced-{size}", size, aws_chunked(data), None)
            assert status == 400, (size, status, answer)
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
        assert keys == sorted(f"ok-{size}" for size in (0, 1, 200 * 1024 + 3)), keys


@check
def a_part_whose_checksum_does_not_match_is_refused_and_not_kept():
    # S3: UploadPart checks its x-amz-checksum-ALGO as PutObject does; the refused part is
    # not listed, and a part that matches answers its checksum.
    part = os.urandom(5 * MiB)
    with Bucket() as bucket:
        upload = s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
        expect_error("BadDigest", 400, s3.upload_part, Bucket=bucket, Key="m", UploadId=upload,
                     PartNumber=1, Body=part, ChecksumSHA256=sha256_b64(part + b"x"))
        assert not s3.list_parts(Bucket=bucket, Key="m", UploadId=upload).get("Parts")
        good = s3.upload_part(Bucket=bucket, Key="m", UploadId=upload, PartNumber=1, Body=part,
                              ChecksumSHA256=sha256_b64(part))
        assert good.get("ChecksumSHA256") == sha256_b64(part), good
        listed = s3.list_parts(Bucket=bucket, Key="m", UploadId=upload)["Parts"]
        assert [p["PartNumber"] for p in listed] == [1], listed
        assert listed[0].get("ChecksumSHA256") == sha256_b64(part), listed
        s3.abort_multipart_upload(Bucket=bucket, Key="m", UploadId=upload)


@check
def a_completed_upload_gets_the_checksum_type_its_create_named():
    # S3: the create's x-amz-checksum-algorithm and -type are echoed; SHA-256 is COMPOSITE
    # (the digest of the parts' digests, shown with -N: clients do not check it against
    # the bytes), CRC32 may be FULL_OBJECT (computed from the bytes, checked by boto3 on a
    # GET with checksum mode); an algorithm with a type S3 does not allow is refused.
    parts = [os.urandom(5 * MiB), os.urandom(1000)]
    whole = b"".join(parts)
    with Bucket() as bucket:
        created = s3.create_multipart_upload(Bucket=bucket, Key="m", ChecksumAlgorithm="SHA256")
        assert created.get("ChecksumAlgorithm") == "SHA256", created
        assert created.get("ChecksumType") == "COMPOSITE", created
        upload = created["UploadId"]
        done = []
        for number, body in enumerate(parts, start=1):
            answer = s3.upload_part(Bucket=bucket, Key="m", UploadId=upload, PartNumber=number,
                                    Body=body, ChecksumSHA256=sha256_b64(body))
            done.append({"PartNumber": number, "ETag": answer["ETag"]})
        # A part of another algorithm than the create's is refused; a Complete that lists a
        # part's checksum wrong is refused (InvalidPart) and completes nothing.
        expect_error("InvalidRequest", 400, s3.upload_part, Bucket=bucket, Key="m",
                     UploadId=upload, PartNumber=3, Body=b"x", ChecksumAlgorithm="CRC32")
        listed_wrong = [dict(done[0], ChecksumSHA256=sha256_b64(b"not it")), done[1]]
        expect_error("InvalidPart", 400, s3.complete_multipart_upload, Bucket=bucket, Key="m",
                     UploadId=upload, MultipartUpload={"Parts": listed_wrong})
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key="m")
        listed = [dict(part, ChecksumSHA256=sha256_b64(body)) for part, body in zip(done, parts)]
        completed = s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=upload,
                                                 MultipartUpload={"Parts": listed})
        joined = b"".join(hashlib.sha256(p).digest() for p in parts)
        composite = base64.b64encode(hashlib.sha256(joined).digest()).decode() + "-2"
        assert completed.get("ChecksumSHA256") == composite, completed
        # S3 names the object's URL (some SDKs read it; a missing one has been taken for a
        # failed Complete, and the "failed" upload cleaned up).
        assert completed.get("Location") == f"{s3conf['endpoint']}/{bucket}/m", completed
        head = s3.head_object(Bucket=bucket, Key="m", ChecksumMode="ENABLED")
        assert head.get("ChecksumSHA256") == composite, head
        assert head.get("ChecksumType") == "COMPOSITE", head
        got = s3.get_object(Bucket=bucket, Key="m", ChecksumMode="ENABLED")
        assert got["Body"].read() == whole
        # FULL_OBJECT, named: the CRC32 of the whole object, checked by boto3 on the GET.
        full = s3.create_multipart_upload(Bucket=bucket, Key="f", ChecksumAlgorithm="CRC32",
                                          ChecksumType="FULL_OBJECT")
        assert full.get("ChecksumType") == "FULL_OBJECT", full
        done = []
        for number, body in enumerate(parts, start=1):
            answer = s3.upload_part(Bucket=bucket, Key="f", UploadId=full["UploadId"],
                                    PartNumber=number, Body=body, ChecksumCRC32=crc32_b64(body))
            done.append({"PartNumber": number, "ETag": answer["ETag"],
                         "ChecksumCRC32": crc32_b64(body)})
        completed = s3.complete_multipart_upload(Bucket=bucket, Key="f", UploadId=full["UploadId"],
                                                 MultipartUpload={"Parts": done})
        assert completed.get("ChecksumCRC32") == crc32_b64(whole), completed
        got = s3.get_object(Bucket=bucket, Key="f", ChecksumMode="ENABLED")
        assert got.get("ChecksumType") == "FULL_OBJECT" and got["Body"].read() == whole, got
        expect_error("InvalidRequest", 400, s3.create_multipart_upload, Bucket=bucket, Key="x",
                     ChecksumAlgorithm="MD5")
        expect_error("InvalidRequest", 400, s3.create_multipart_upload, Bucket=bucket, Key="x",
                     ChecksumAlgorithm="SHA256", ChecksumType="FULL_OBJECT")



@check
def multipart_upload_listings_group_by_delimiter_page_and_encode():
    # S3: ListMultipartUploads with a Delimiter lists each distinct prefix up to it once in
    # CommonPrefixes (counting toward MaxUploads), echoes Delimiter and EncodingType, pages
    # past a common prefix named as the marker, and with EncodingType=url encodes keys.
    with Bucket() as bucket:
        ids = {}
        for key in ["a/1", "a/2", "b", "c/x/1", "d e"]:
            ids[key] = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        listed = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
        assert [u["Key"] for u in listed.get("Uploads", [])] == ["b", "d e"], listed
        assert [p["Prefix"] for p in listed.get("CommonPrefixes", [])] == ["a/", "c/"], listed
        assert listed.get("Delimiter") == "/", listed
        seen, marker, id_marker = [], None, None
        for _ in range(6):
            args = {"Bucket": bucket, "Delimiter": "/", "MaxUploads": 1}
            if marker is not None:
                args["KeyMarker"] = marker
            if id_marker:
                args["UploadIdMarker"] = id_marker
            page = s3.list_multipart_uploads(**args)
            entries = [p["Prefix"] for p in page.get("CommonPrefixes", [])] + \
                      [u["Key"] for u in page.get("Uploads", [])]
            assert len(entries) == 1, page
            seen += entries
            if not page["IsTruncated"]:
                break
            marker, id_marker = page["NextKeyMarker"], page.get("NextUploadIdMarker")
        assert seen == ["a/", "b", "c/", "d e"], seen
        encoded = s3.list_multipart_uploads(Bucket=bucket, EncodingType="url")
        assert encoded.get("EncodingType") == "url", encoded
        assert "d%20e" in [u["Key"] for u in encoded["Uploads"]], encoded
        expect_error("InvalidArgument", 400, s3.list_multipart_uploads, Bucket=bucket,
                     MaxUploads=-1)


def signed_raw(method, path, header_pairs, body=b""):
    """(status, headers, body) of a SigV4-signed request whose headers may repeat a name."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    request = AWSRequest(method=method, url=s3conf["endpoint"] + path, data=body)
    for name, value in header_pairs:
        request.headers[name] = value  # an email.message header map: a repeat is appended
    request.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    SigV4Auth(Credentials(s3conf["access_key"], s3conf["secret_key"]), "s3",
              s3conf["region"]).add_auth(request)
    conn = http.client.HTTPConnection(ENDPOINT.hostname, ENDPOINT.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in request.headers.items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


@check
def answers_are_worded_and_shaped_as_aws_answers_them():
    # The third round of AWS's exact answers, each as S3 gives it (versitygw's and ceph's
    # suites test them too): messages in AWS's words with weft's in <Detail>, parts read as
    # 206 ranges, refusals before lookups, and configurations weft does not carry out refused
    # without being stored.
    with Bucket() as bucket:
        # A user metadata header sent more than once (any case) is one, values joined.
        status, _, body = signed_raw("PUT", f"/{bucket}/meta", [
            ("x-amz-meta-key", "value-1"), ("X-Amz-Meta-Key", "value-2"),
            ("x-amz-meta-other", "x")], b"m")
        assert status == 200, (status, body)
        assert s3.head_object(Bucket=bucket, Key="meta")["Metadata"] == {
            "key": "value-1,value-2", "other": "x"}
        # partNumber=1 of an object not uploaded in parts: the whole object as a 206 range,
        # on GET and HEAD; a part number outside 1..10000 is 400 before the key is looked up.
        s3.put_object(Bucket=bucket, Key="p", Body=b"12345")
        for call in (s3.get_object, s3.head_object):
            answer = call(Bucket=bucket, Key="p", PartNumber=1)
            assert answer["ResponseMetadata"]["HTTPStatusCode"] == 206, answer
            assert answer["ContentRange"] == "bytes 0-4/5", answer
        expect_error("400", 400, s3.head_object, Bucket=bucket, Key="absent", PartNumber=-3)
        error = expect_error("InvalidArgument", 400, s3.get_object, Bucket=bucket,
                             Key="absent", PartNumber=10001)
        assert error["Error"]["Message"] == \
            "Part number must be an integer between 1 and 10000, inclusive", error
        # HEAD takes response-* overrides as GET does.
        head = s3.head_object(Bucket=bucket, Key="p", ResponseCacheControl="no-cache")
        assert head["CacheControl"] == "no-cache", head
        # A lock on a bucket without object lock: refused at CreateMultipartUpload already.
        later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        error = expect_error("InvalidRequest", 400, s3.create_multipart_upload, Bucket=bucket,
                             Key="locked", ObjectLockMode="GOVERNANCE",
                             ObjectLockRetainUntilDate=later)
        assert error["Error"]["Message"] == "Bucket is missing ObjectLockConfiguration", error
        assert error["Error"].get("Detail") == f'bucket "{bucket}" has no object lock', error
        assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads"), "nothing started"
        # A copy onto itself that changes nothing; an unknown metadata directive.
        error = expect_error("InvalidRequest", 400, s3.copy_object, Bucket=bucket, Key="p",
                             CopySource={"Bucket": bucket, "Key": "p"})
        assert error["Error"]["Message"].startswith("This copy request is illegal"), error
        expect_error("InvalidArgument", 400, s3.copy_object, Bucket=bucket, Key="q",
                     CopySource={"Bucket": bucket, "Key": "p"}, MetadataDirective="MOVE")
        # Tags: AWS's messages.
        error = expect_error("InvalidTag", 400, s3.put_object_tagging, Bucket=bucket, Key="p",
                             Tagging={"TagSet": [{"Key": "k", "Value": "1"},
                                                 {"Key": "k", "Value": "2"}]})
        assert error["Error"]["Message"] == "Cannot provide multiple Tags with the same key"
        # Attribute names S3 does not have: refused before the key is looked up.
        expect_error("InvalidArgument", 400, s3.get_object_attributes, Bucket=bucket,
                     Key="absent", ObjectAttributes=["ETag", "Colour"])
        # ListParts names the upload's storage class.
        upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
        parts = s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload)
        assert parts.get("StorageClass") == "STANDARD", parts
        s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)
        # Website hosting and ownership controls: none set, a malformed one is MalformedXML,
        # a well-formed one is 501 and nothing is stored.
        expect_error("NoSuchWebsiteConfiguration", 404, s3.get_bucket_website, Bucket=bucket)
        expect_error("MalformedXML", 400, s3.put_bucket_website, Bucket=bucket,
                     WebsiteConfiguration={"RedirectAllRequestsTo": {"HostName": "e.example"},
                                           "IndexDocument": {"Suffix": "index.html"}})
        expect_error("NotImplemented", 501, s3.put_bucket_website, Bucket=bucket,
                     WebsiteConfiguration={"IndexDocument": {"Suffix": "index.html"}})
        expect_error("NoSuchWebsiteConfiguration", 404, s3.get_bucket_website, Bucket=bucket)
        s3.delete_bucket_website(Bucket=bucket)
        expect_error("MalformedXML", 400, s3.put_bucket_ownership_controls, Bucket=bucket,
                     OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"},
                                                  {"ObjectOwnership": "BucketOwnerPreferred"}]})
        # A presigned URL without its signature: 400 AuthorizationQueryParametersError.
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"},
                                        ExpiresIn=60)
        parsed = urllib.parse.urlparse(url)
        query = "&".join(p for p in parsed.query.split("&")
                         if not p.startswith("X-Amz-Signature="))
        status, _, body = url_request(parsed._replace(query=query).geturl(), "GET", {})
        assert status == 400 and b"AuthorizationQueryParametersError" in body, (status, body)


if __name__ == "__main__":
    check_runner.run("boto3 semantics", CHECKS, only, started)
