#!/usr/bin/env python3
"""The two read traces of docs/evaluation.md (JSON lines: timestamp, bucket, key, offset,
length), made from fixed seeds so anyone gets the same files:

  python3 docs/eval/traces.py        # writes mix.jsonl and median12.jsonl here

mix.jsonl: a read-size mix like the one Okapi derives from Google's traces (Fig. 6): 80% of
reads 1-12 MiB, 15% 12-24 MiB, 5% 24-48 MiB (median about 8 MiB).
median12.jsonl: whole-object GETs, as `weft serve s3 --trace-reads` records them (with each
object's size), of 190 objects of 8-16 MB whose median read is 12 MB (12,000,000 bytes), for
the advisor; its replay writes those 190 objects at their sizes for each width.
"""
import json
import random

MIB = 1 << 20


def mix(path):
    rng = random.Random(6)
    t = 1764043200.0
    with open(path, "w") as out:
        for _ in range(4000):
            u = rng.random()
            mb = rng.uniform(1, 12) if u < 0.80 else rng.uniform(12, 24) if u < 0.95 else rng.uniform(24, 48)
            length = int(mb * MIB) // 4096 * 4096
            offset = rng.randrange(0, 96 * MIB) // 4096 * 4096
            t += rng.expovariate(50)
            key = "f%d" % rng.randrange(64)
            out.write(json.dumps({"timestamp": round(t, 3), "bucket": "app", "key": key,
                                  "offset": offset, "length": length}) + "\n")


def median12(path):
    rng = random.Random(12)
    t = 1764043200.0
    sizes = [[8, 10, 12, 12, 12, 14, 16][i % 7] * 1000 * 1000 for i in range(190)]
    with open(path, "w") as out:
        for _ in range(4000):
            t += rng.expovariate(20)
            i = rng.randrange(len(sizes))
            out.write(json.dumps({"timestamp": round(t, 3), "bucket": "app", "key": "f%d" % i,
                                  "offset": 0, "length": sizes[i],
                                  "object_size": sizes[i]}) + "\n")


if __name__ == "__main__":
    mix("mix.jsonl")
    median12("median12.jsonl")
