// The AWS SDK for JavaScript v3 against a running `weft up`, with the SDK's default settings
// (request checksums when supported, response checksums validated): one check per behaviour,
// reported as the Python client checks are (check_runner.py), ending with cargo's closing
// line so CI's total counts them.
//
// Usage: node checks.mjs CLUSTER_DIR [NAME ...]   (reads CLUSTER_DIR/s3.json)
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import {
  CopyObjectCommand,
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  paginateListObjectsV2,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";

const [clusterDir, ...only] = process.argv.slice(2);
if (!clusterDir) {
  console.error("usage: node checks.mjs CLUSTER_DIR [NAME ...]");
  process.exit(2);
}
const conf = JSON.parse(readFileSync(join(clusterDir, "s3.json"), "utf8"));
const MiB = 1 << 20;
// Default settings but where the cluster is (NODE_EXTRA_CA_CERTS trusts an HTTPS gateway's CA).
const s3 = new S3Client({
  endpoint: conf.endpoint,
  region: conf.region,
  forcePathStyle: true,
  credentials: { accessKeyId: conf.access_key, secretAccessKey: conf.secret_key },
});

function data(seed, size) {
  const out = Buffer.alloc(size + 32);
  let block = createHash("sha256").update(String(seed)).digest();
  let at = 0;
  while (at < size) {
    block = createHash("sha256").update(block).digest();
    block.copy(out, at);
    at += block.length;
  }
  return out.subarray(0, size);
}

const md5 = (bytes) => createHash("md5").update(bytes).digest("hex");

function expect(ok, message) {
  if (!ok) throw new Error(message);
}

let seq = 0;
async function withBucket(body) {
  const name = `js-${process.pid}-${++seq}`;
  await s3.send(new CreateBucketCommand({ Bucket: name }));
  try {
    await body(name);
  } finally {
    for await (const page of paginateListObjectsV2({ client: s3 }, { Bucket: name })) {
      for (const object of page.Contents ?? []) {
        await s3.send(new DeleteObjectCommand({ Bucket: name, Key: object.Key }));
      }
    }
    await s3.send(new DeleteBucketCommand({ Bucket: name }));
  }
}

async function read(bucket, key, range) {
  const got = await s3.send(
    new GetObjectCommand({ Bucket: bucket, Key: key, Range: range, ChecksumMode: "ENABLED" }),
  );
  return [Buffer.from(await got.Body.transformToByteArray()), got];
}

async function codeOf(promise) {
  try {
    await promise;
  } catch (error) {
    return [error.name, error.$metadata?.httpStatusCode];
  }
  throw new Error("the call succeeded; it should have failed");
}

const checks = {
  async objects_round_trip_with_default_checksums_ranges_and_metadata() {
    await withBucket(async (bucket) => {
      const body = data(1, 300_000);
      const put = await s3.send(
        new PutObjectCommand({
          Bucket: bucket, Key: "dir/a b", Body: body, ContentType: "text/plain",
          Metadata: { color: "blue" },
        }),
      );
      expect(put.ETag === `"${md5(body)}"`, `ETag ${put.ETag}`);
      expect(put.ChecksumCRC32, "PutObject returned no CRC32 (the SDK sends one by default)");
      const [got, out] = await read(bucket, "dir/a b");
      expect(got.equals(body), "the object's bytes differ");
      expect(out.Metadata.color === "blue" && out.ContentType === "text/plain", "headers");
      const [part] = await read(bucket, "dir/a b", "bytes=1000-5999");
      expect(part.equals(body.subarray(1000, 6000)), "the range differs");
      const [name, status] = await codeOf(s3.send(new GetObjectCommand({ Bucket: bucket, Key: "missing" })));
      expect(name === "NoSuchKey" && status === 404, `missing key: ${name} ${status}`);
      const [headName] = await codeOf(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "missing" })));
      expect(headName === "NotFound", `HEAD of a missing key: ${headName}`);
    });
  },

  async streams_of_unknown_length_go_up_in_parts_and_come_back_whole() {
    await withBucket(async (bucket) => {
      const body = data(2, 12 * MiB + 12345);
      // A stream without a length: lib-storage cuts it into parts as it reads.
      const pieces = [];
      for (let at = 0; at < body.length; at += 1 << 16) pieces.push(body.subarray(at, at + (1 << 16)));
      const upload = new Upload({
        client: s3, partSize: 5 * MiB,
        params: { Bucket: bucket, Key: "big", Body: Readable.from(pieces) },
      });
      const done = await upload.done();
      expect(done.ETag.endsWith('-3"'), `ETag ${done.ETag}`);
      const [got] = await read(bucket, "big");
      expect(got.equals(body), "the completed object's bytes differ");
      const small = await new Upload({
        client: s3, params: { Bucket: bucket, Key: "small", Body: Readable.from([body.subarray(0, 1000)]) },
      }).done();
      expect(small.ETag === `"${md5(body.subarray(0, 1000))}"`, `small ETag ${small.ETag}`);
    });
  },

  async listings_page_and_group_by_prefix() {
    await withBucket(async (bucket) => {
      const keys = ["a/1", "a/2", "b", "c/x/1", "d"];
      for (const key of keys) await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: key }));
      const seen = [];
      for await (const page of paginateListObjectsV2({ client: s3, pageSize: 2 }, { Bucket: bucket })) {
        for (const o of page.Contents ?? []) seen.push(o.Key);
      }
      expect(seen.join() === keys.join(), `paged keys ${seen}`);
      const grouped = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Delimiter: "/" }));
      const prefixes = (grouped.CommonPrefixes ?? []).map((p) => p.Prefix);
      expect(prefixes.join() === "a/,c/" && grouped.Contents.length === 2, `grouped ${prefixes}`);
    });
  },

  async copies_batch_deletes_and_conditional_writes() {
    await withBucket(async (bucket) => {
      const body = data(3, 100_000);
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: "src", Body: body }));
      await s3.send(new CopyObjectCommand({ Bucket: bucket, Key: "dst", CopySource: `${bucket}/src` }));
      const [got] = await read(bucket, "dst");
      expect(got.equals(body), "the copy's bytes differ");
      const [name, status] = await codeOf(
        s3.send(new PutObjectCommand({ Bucket: bucket, Key: "src", Body: "x", IfNoneMatch: "*" })),
      );
      expect(name === "PreconditionFailed" && status === 412, `If-None-Match: ${name} ${status}`);
      const deleted = await s3.send(
        new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: "src" }, { Key: "dst" }] } }),
      );
      expect(deleted.Deleted.length === 2, `deleted ${deleted.Deleted.length}`);
    });
  },

  async sse_s3_objects_are_sealed_and_read_back() {
    await withBucket(async (bucket) => {
      const body = data(4, 200_000);
      const put = await s3.send(
        new PutObjectCommand({ Bucket: bucket, Key: "s", Body: body, ServerSideEncryption: "AES256" }),
      );
      expect(put.ServerSideEncryption === "AES256", `PutObject says ${put.ServerSideEncryption}`);
      const [got, out] = await read(bucket, "s", "bytes=65530-65549");
      expect(got.equals(body.subarray(65530, 65550)), "the range differs");
      expect(out.ServerSideEncryption === "AES256", `GetObject says ${out.ServerSideEncryption}`);
    });
  },

  async presigned_urls_let_plain_http_get() {
    await withBucket(async (bucket) => {
      const body = data(5, 50_000);
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: "p", Body: body }));
      const url = await getSignedUrl(s3, new GetObjectCommand({ Bucket: bucket, Key: "p" }), { expiresIn: 60 });
      const response = await fetch(url);
      const got = Buffer.from(await response.arrayBuffer());
      expect(response.status === 200 && got.equals(body), `presigned GET: ${response.status}`);
    });
  },
};

const started = Date.now();
const failed = [];
let ran = 0;
for (const [name, check] of Object.entries(checks)) {
  if (only.length && !only.includes(name)) continue;
  ran++;
  const began = Date.now();
  try {
    await check();
    console.log(`ok    ${name} (${((Date.now() - began) / 1000).toFixed(1)}s)`);
  } catch (error) {
    failed.push(name);
    console.log(`FAIL  ${name}: ${error.name}: ${error.message}`);
  }
}
console.log(`aws-sdk-js-v3: ${ran - failed.length} of ${ran} checks passed (${((Date.now() - started) / 1000).toFixed(1)}s)`);
if (failed.length) {
  console.log(`failed: ${failed.join(", ")}`);
  process.exit(1);
}
console.log(`test result: ok. ${ran} passed; 0 failed`);
