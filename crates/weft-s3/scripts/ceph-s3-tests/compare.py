#!/usr/bin/env python3
"""Compare two ceph/s3-tests runs (run.sh's junit files), e.g. weft's and MinIO's.

usage: compare.py A.xml B.xml [--label-a weft] [--label-b minio] [--json] [--list]

For each run: passed, failed (failures and errors together) and skipped, over the tests both
runs hold. Then the tests one run passed and the other did not, each way, grouped by the
first two words of their names. --list prints every such test; --json prints the whole
comparison.
"""
import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def outcomes(path):
    """{test name: 'passed'|'failed'|'skipped'} from a pytest junit file."""
    result = {}
    for case in ET.parse(path).getroot().iter('testcase'):
        name = case.get('name')
        tags = {child.tag for child in case}
        if 'failure' in tags or 'error' in tags:
            state = 'failed'
        elif 'skipped' in tags:
            state = 'skipped'
        else:
            state = 'passed'
        # a test whose setup passed but whose teardown errored is listed twice: failed wins
        if result.get(name) != 'failed':
            result[name] = state
    return result


def family(name):
    """The name's first two words: test_object_lock_put → object_lock."""
    words = re.sub(r'^test_', '', name).split('_')
    return '_'.join(words[:2])


def summary(runs):
    counts = {'passed': 0, 'failed': 0, 'skipped': 0}
    for state in runs.values():
        counts[state] += 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('a')
    parser.add_argument('b')
    parser.add_argument('--label-a', default=None)
    parser.add_argument('--label-b', default=None)
    parser.add_argument('--json', action='store_true')
    parser.add_argument('--list', action='store_true')
    args = parser.parse_args()
    label_a = args.label_a or os.path.basename(args.a).removesuffix('.xml')
    label_b = args.label_b or os.path.basename(args.b).removesuffix('.xml')
    a, b = outcomes(args.a), outcomes(args.b)
    if set(a) != set(b):
        print(f'note: the runs hold different tests ({len(set(a) ^ set(b))} in one only); '
              'only the tests in both are compared below', file=sys.stderr)
    both = sorted(set(a) & set(b))
    only_a = [t for t in both if a[t] == 'passed' and b[t] != 'passed']
    only_b = [t for t in both if b[t] == 'passed' and a[t] != 'passed']
    report = {
        label_a: summary({t: a[t] for t in both}),
        label_b: summary({t: b[t] for t in both}),
        'tests': len(both),
        f'passed_by_{label_a}_only': only_a,
        f'passed_by_{label_b}_only': only_b,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    print(f'{len(both)} tests in both runs')
    for label in (label_a, label_b):
        c = report[label]
        print(f'{label:>12}: {c["passed"]} passed, {c["failed"]} failed, {c["skipped"]} skipped')
    for label, tests in ((label_a, only_a), (label_b, only_b)):
        groups = {}
        for test in tests:
            groups.setdefault(family(test), []).append(test)
        ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        print(f'\npassed by {label} only: {len(tests)}')
        for name, members in ranked:
            print(f'  {len(members):4} {name}')
            if args.list:
                for test in members:
                    print(f'         {test}')


if __name__ == '__main__':
    main()
