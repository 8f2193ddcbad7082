"""The runner the S3 client check scripts share (boto3_semantics.py, minio_client.py): runs
the checks named on the command line (all when none), reports each, and ends with cargo's
closing line format so CI's total counts them; exit 1 naming the failed ones."""
import sys
import time


def run(label, checks, only, started):
    failed = []
    for function in checks:
        if only and function.__name__ not in only:
            continue
        began = time.time()
        try:
            function()
            print(f"ok    {function.__name__} ({time.time() - began:.1f}s)", flush=True)
        except Exception as error:  # noqa: BLE001 - every failure is reported
            failed.append(function.__name__)
            print(f"FAIL  {function.__name__}: {type(error).__name__}: {error}", flush=True)
    ran = len([f for f in checks if not only or f.__name__ in only])
    print(f"{label}: {ran - len(failed)} of {ran} checks passed ({time.time() - started:.1f}s)")
    if failed:
        print("failed: " + ", ".join(failed))
        sys.exit(1)
    print(f"test result: ok. {ran} passed; 0 failed")
