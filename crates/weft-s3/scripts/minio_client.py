#!/usr/bin/env python3
"""The weft S3 gateway driven by a second, independent SDK: MinIO's Python client (`minio` on
PyPI), which has its own request signing, multipart logic, XML parsing and presigning, one
check per feature an application built on it would use, against a running `weft up`.

Usage: minio_client.py CLUSTER_DIR [NAME ...]   (reads CLUSTER_DIR/s3.json; NAMEs pick checks)

Each check fails (exit 1, naming the check) when the gateway answers otherwise than S3 would.
Every bucket a check makes is removed again, so the cluster is left as found.
"""
import datetime
import hashlib
import io
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from minio import Minio
from minio.commonconfig import ENABLED, GOVERNANCE, ComposeSource, CopySource, Filter, Tags
from minio.deleteobjects import DeleteObject
from minio.error import S3Error
from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule
from minio.retention import Retention
from minio.sse import SseS3
from minio.sseconfig import Rule as SseRule, SSEConfig
from minio.versioningconfig import VersioningConfig

import check_runner  # noqa: E402 - the runner beside this script

cluster_dir = sys.argv[1]
only = set(sys.argv[2:])
conf = json.load(open(os.path.join(cluster_dir, "s3.json")))
endpoint = urllib.parse.urlparse(conf["endpoint"])
mc = Minio(endpoint.netloc, access_key=conf["access_key"], secret_key=conf["secret_key"],
           secure=endpoint.scheme == "https", region=conf["region"])
CHECKS = []
started = time.time()
MiB = 1 << 20


def check(function):
    CHECKS.append(function)
    return function


def expect_error(code, call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except S3Error as error:
        assert error.code == code, f"expected {code}, got {error.code}: {error.message}"
        return error
    raise AssertionError(f"the call succeeded; it should have failed with {code}")


def data(seed, size):
    """`size` reproducible bytes (not a repeated pattern: a misplaced piece shows)."""
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


class Bucket:
    """A fresh bucket for one check, emptied (every version) and removed afterwards."""

    count = 0

    def __init__(self, **options):
        self.options = options

    def __enter__(self):
        Bucket.count += 1
        self.name = f"mc-{os.getpid()}-{Bucket.count}"
        mc.make_bucket(self.name, **self.options)
        return self.name

    def __exit__(self, *exc):
        for upload in mc._list_multipart_uploads(self.name).uploads:  # noqa: SLF001
            mc._abort_multipart_upload(self.name, upload.object_name, upload.upload_id)
        for obj in mc.list_objects(self.name, recursive=True, include_version=True):
            mc.remove_object(self.name, obj.object_name, version_id=obj.version_id)
        mc.remove_bucket(self.name)


def read(bucket, key, **options):
    response = mc.get_object(bucket, key, **options)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()


@check
def buckets_are_made_listed_and_removed():
    with Bucket() as bucket:
        assert mc.bucket_exists(bucket)
        assert bucket in [b.name for b in mc.list_buckets()]
        # Re-creating one's own bucket in us-east-1 succeeds (S3's legacy behaviour there).
        mc.make_bucket(bucket)
        assert mc.bucket_exists(bucket)
    assert not mc.bucket_exists(bucket)
    expect_error("NoSuchBucket", mc.remove_bucket, bucket)


@check
def objects_round_trip_with_metadata_ranges_and_exact_errors():
    with Bucket() as bucket:
        body = data(1, 300_000)
        written = mc.put_object(bucket, "dir/a b+c", io.BytesIO(body), len(body),
                                content_type="text/plain", metadata={"x-amz-meta-color": "blue"})
        assert written.etag == hashlib.md5(body).hexdigest(), written.etag
        stat = mc.stat_object(bucket, "dir/a b+c")
        assert (stat.size, stat.etag, stat.content_type) == (len(body), written.etag,
                                                             "text/plain"), stat
        assert stat.metadata.get("x-amz-meta-color") == "blue", dict(stat.metadata)
        assert read(bucket, "dir/a b+c") == body
        assert read(bucket, "dir/a b+c", offset=1000, length=5000) == body[1000:6000]
        assert read(bucket, "dir/a b+c", offset=299_990) == body[299_990:]
        expect_error("NoSuchKey", mc.stat_object, bucket, "missing")
        expect_error("NoSuchBucket", mc.get_object, bucket + "-missing", "k")


@check
def large_objects_go_up_in_parts_and_come_back_whole():
    with Bucket() as bucket:
        body = data(2, 12 * MiB + 12345)
        written = mc.put_object(bucket, "big", io.BytesIO(body), len(body), part_size=5 * MiB)
        assert written.etag.endswith("-3"), written.etag
        assert read(bucket, "big") == body
        stream = mc.put_object(bucket, "unsized", io.BytesIO(body), -1, part_size=5 * MiB)
        assert stream.etag.endswith("-3"), stream.etag
        assert mc.stat_object(bucket, "unsized").size == len(body)


@check
def listings_page_recurse_and_group_by_prefix():
    with Bucket() as bucket:
        keys = [f"p/{i:03}" for i in range(25)] + ["q/x", "top"]
        for key in keys:
            mc.put_object(bucket, key, io.BytesIO(key.encode()), len(key))
        assert [o.object_name for o in mc.list_objects(bucket, recursive=True)] == keys
        grouped = sorted(o.object_name for o in mc.list_objects(bucket))
        assert grouped == ["p/", "q/", "top"], grouped
        after = [o.object_name for o in mc.list_objects(bucket, prefix="p/0", recursive=True,
                                                        start_after="p/005")]
        assert after == keys[6:25], after
        v1 = [o.object_name for o in mc.list_objects(bucket, recursive=True, use_api_v1=True)]
        assert v1 == keys


@check
def copies_and_composed_objects_hold_the_source_bytes():
    # compose_object copies ranges of sources into parts (UploadPartCopy).
    with Bucket() as bucket:
        a, b = data(3, 6 * MiB), data(4, 100_000)
        mc.put_object(bucket, "a", io.BytesIO(a), len(a))
        mc.put_object(bucket, "b", io.BytesIO(b), len(b))
        mc.copy_object(bucket, "a-copy", CopySource(bucket, "a"))
        assert read(bucket, "a-copy") == a
        sources = [ComposeSource(bucket, "a"), ComposeSource(bucket, "b", offset=10, length=500)]
        mc.compose_object(bucket, "composed", sources)
        assert read(bucket, "composed") == a + b[10:510]


@check
def single_and_batch_removals_remove_exactly_what_they_name():
    with Bucket() as bucket:
        for i in range(5):
            mc.put_object(bucket, f"k{i}", io.BytesIO(b"x"), 1)
        mc.remove_object(bucket, "k0")
        errors = list(mc.remove_objects(bucket, [DeleteObject("k1"), DeleteObject("k2"),
                                                 DeleteObject("never-there")]))
        assert errors == [], errors
        assert [o.object_name for o in mc.list_objects(bucket)] == ["k3", "k4"]


@check
def presigned_urls_let_plain_http_get_and_put():
    with Bucket() as bucket:
        put_url = mc.presigned_put_object(bucket, "up", expires=datetime.timedelta(minutes=5))
        request = urllib.request.Request(put_url, data=b"presigned body", method="PUT")
        assert urllib.request.urlopen(request).status == 200
        get_url = mc.presigned_get_object(bucket, "up", expires=datetime.timedelta(minutes=5))
        assert urllib.request.urlopen(get_url).read() == b"presigned body"
        try:
            at = get_url.index("X-Amz-Signature=") + len("X-Amz-Signature=")
            flipped = "1" if get_url[at] == "0" else "0"
            urllib.request.urlopen(get_url[:at] + flipped + get_url[at + 1:])
            raise AssertionError("a tampered presigned URL was accepted")
        except urllib.error.HTTPError as error:
            assert error.code == 403, error.code


@check
def browser_form_uploads_work_with_a_presigned_post_policy():
    from minio.datatypes import PostPolicy
    with Bucket() as bucket:
        policy = PostPolicy(bucket, datetime.datetime.now(datetime.timezone.utc)
                            + datetime.timedelta(minutes=10))
        policy.add_starts_with_condition("key", "uploads/")
        policy.add_content_length_range_condition(1, 1024)
        fields = mc.presigned_post_policy(policy)
        fields["key"] = "uploads/form.txt"
        def form_upload(filename, content):
            boundary = "weftboundary7d2"
            parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                     for k, v in fields.items()]
            body = ("".join(parts) + f'--{boundary}\r\nContent-Disposition: form-data; name="file";'
                    f' filename="{filename}"\r\nContent-Type: text/plain\r\n\r\n{content}\r\n'
                    f"--{boundary}--\r\n").encode()
            return urllib.request.Request(conf["endpoint"] + f"/{bucket}", data=body, method="POST",
                                          headers={"Content-Type":
                                                   f"multipart/form-data; boundary={boundary}"})
        assert urllib.request.urlopen(form_upload("form.txt", "from a form")).status in (200, 204)
        assert read(bucket, "uploads/form.txt") == b"from a form"
        # `${filename}` in the key is the file's name (its last path component), filled in
        # before the policy's starts-with is checked; the 204 names what was stored.
        fields["key"] = "uploads/${filename}"
        request = form_upload("C:\\docs\\named file.txt", "named")
        answer = urllib.request.urlopen(request)
        assert answer.status == 204, answer.status
        assert answer.headers["Location"] == f"{conf['endpoint']}/{bucket}/uploads/named%20file.txt", \
            answer.headers["Location"]
        assert answer.headers["ETag"] == '"' + hashlib.md5(b"named").hexdigest() + '"', \
            answer.headers["ETag"]
        assert read(bucket, "uploads/named file.txt") == b"named"
        assert [o.object_name for o in mc.list_objects(bucket, prefix="uploads/")] == \
            ["uploads/form.txt", "uploads/named file.txt"]


@check
def object_tags_are_set_read_and_removed():
    with Bucket() as bucket:
        mc.put_object(bucket, "t", io.BytesIO(b"x"), 1)
        tags = Tags.new_object_tags()
        tags["team"] = "storage"
        tags["tier"] = "hot"
        mc.set_object_tags(bucket, "t", tags)
        assert dict(mc.get_object_tags(bucket, "t")) == {"team": "storage", "tier": "hot"}
        mc.delete_object_tags(bucket, "t")
        assert not mc.get_object_tags(bucket, "t")


@check
def versioning_keeps_versions_readable_by_id():
    with Bucket() as bucket:
        mc.set_bucket_versioning(bucket, VersioningConfig(ENABLED))
        assert mc.get_bucket_versioning(bucket).status == ENABLED
        first = mc.put_object(bucket, "v", io.BytesIO(b"one"), 3).version_id
        mc.put_object(bucket, "v", io.BytesIO(b"two"), 3)
        assert read(bucket, "v") == b"two"
        assert read(bucket, "v", version_id=first) == b"one"
        listed = list(mc.list_objects(bucket, include_version=True))
        assert len(listed) == 2 and sum(o.is_latest == "true" for o in listed) == 1, listed
        mc.remove_object(bucket, "v")
        expect_error("NoSuchKey", mc.stat_object, bucket, "v")
        assert read(bucket, "v", version_id=first) == b"one"


@check
def lifecycle_configurations_round_trip():
    with Bucket() as bucket:
        config = LifecycleConfig([Rule(ENABLED, rule_filter=Filter(prefix="logs/"), rule_id="logs",
                                       expiration=Expiration(days=30))])
        mc.set_bucket_lifecycle(bucket, config)
        got = mc.get_bucket_lifecycle(bucket)
        rule = got.rules[0]
        assert (rule.rule_id, rule.rule_filter.prefix, rule.expiration.days) == ("logs", "logs/",
                                                                                 30), rule
        mc.delete_bucket_lifecycle(bucket)
        assert mc.get_bucket_lifecycle(bucket) is None


@check
def a_bucket_policy_opens_reads_to_anonymous_clients():
    with Bucket() as bucket:
        mc.put_object(bucket, "public/p", io.BytesIO(b"for all"), 7)
        mc.put_object(bucket, "private/q", io.BytesIO(b"mine"), 4)
        url = conf["endpoint"] + f"/{bucket}/"
        try:
            urllib.request.urlopen(url + "public/p")
            raise AssertionError("an anonymous read succeeded before any policy")
        except urllib.error.HTTPError as error:
            assert error.code == 403, error.code
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
            "Resource": [f"arn:aws:s3:::{bucket}/public/*"]}]}
        mc.set_bucket_policy(bucket, json.dumps(policy))
        assert json.loads(mc.get_bucket_policy(bucket))["Statement"][0]["Effect"] == "Allow"
        assert urllib.request.urlopen(url + "public/p").read() == b"for all"
        try:
            urllib.request.urlopen(url + "private/q")
            raise AssertionError("the policy opened more than it names")
        except urllib.error.HTTPError as error:
            assert error.code == 403, error.code
        mc.delete_bucket_policy(bucket)


@check
def object_lock_holds_a_version_until_released():
    with Bucket(object_lock=True) as bucket:
        version = mc.put_object(bucket, "held", io.BytesIO(b"worm"), 4, legal_hold=True).version_id
        assert mc.is_object_legal_hold_enabled(bucket, "held", version_id=version)
        expect_error("AccessDenied", mc.remove_object, bucket, "held", version_id=version)
        mc.disable_object_legal_hold(bucket, "held", version_id=version)
        until = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) \
            + datetime.timedelta(days=1)
        mc.set_object_retention(bucket, "held", Retention(GOVERNANCE, until), version_id=version)
        retention = mc.get_object_retention(bucket, "held", version_id=version)
        assert (retention.mode, retention.retain_until_date) == (GOVERNANCE, until), retention
        expect_error("AccessDenied", mc.remove_object, bucket, "held", version_id=version)
        # Governance yields to the bypass header (the bucket's cleanup needs it too).
        mc._execute("DELETE", bucket, "held",  # noqa: SLF001
                    headers={"x-amz-bypass-governance-retention": "true"},
                    query_params={"versionId": version})



@check
def sse_s3_objects_and_bucket_default_encryption_read_back_exactly():
    # minio-py's SSE-S3 (SseS3 on each write) and bucket default encryption (SSEConfig):
    # the gateway seals them; reads, ranges and multipart objects come back exactly, and
    # stat shows the encryption.
    with Bucket() as bucket:
        body = data(20, 300_000)
        mc.put_object(bucket, "one", io.BytesIO(body), len(body), sse=SseS3())
        stat = mc.stat_object(bucket, "one")
        assert stat.size == len(body), stat.size
        assert stat.metadata.get("x-amz-server-side-encryption") == "AES256", dict(stat.metadata)
        assert read(bucket, "one", offset=65_530, length=20) == body[65_530:65_550]
        assert mc.get_bucket_encryption(bucket) is None
        mc.set_bucket_encryption(bucket, SSEConfig(SseRule.new_sse_s3_rule()))
        assert mc.get_bucket_encryption(bucket).rule.sse_algorithm == "AES256"
        big = data(21, 11 * MiB)
        mc.put_object(bucket, "big", io.BytesIO(big), len(big), part_size=5 * MiB)
        stat = mc.stat_object(bucket, "big")
        assert stat.metadata.get("x-amz-server-side-encryption") == "AES256", dict(stat.metadata)
        assert read(bucket, "big") == big
        assert read(bucket, "big", offset=5 * MiB - 3, length=6) == big[5 * MiB - 3:5 * MiB + 3]
        mc.delete_bucket_encryption(bucket)
        assert mc.get_bucket_encryption(bucket) is None


if __name__ == "__main__":
    check_runner.run("minio-py", CHECKS, only, started)
