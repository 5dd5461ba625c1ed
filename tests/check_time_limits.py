#!/usr/bin/env python3
"""Fails when a test CTest knows has no TIMEOUT property (tests/CMakeLists.txt says why).

usage: check_time_limits.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    ctest, build_dir = sys.argv[1], sys.argv[2]
    listing = subprocess.run([ctest, "--test-dir", build_dir, "--show-only=json-v1"], capture_output=True, text=True)
    if listing.returncode != 0:
        print(f"check_time_limits: {ctest} --show-only failed: {listing.stderr.strip()}", file=sys.stderr)
        return 1
    tests = json.loads(listing.stdout).get("tests", [])
    unlimited = []
    for test in tests:
        names = {p.get("name") for p in test.get("properties", [])}
        if "TIMEOUT" not in names:
            unlimited.append(test["name"])
    if not tests:
        print("check_time_limits: CTest lists no tests in " + build_dir, file=sys.stderr)
        return 1
    if unlimited:
        print(f"check_time_limits: {len(unlimited)} of {len(tests)} tests have no TIMEOUT, so a hang would hold "
              "the suite for CTest's default 1500 s:", file=sys.stderr)
        for name in unlimited:
            print("  " + name, file=sys.stderr)
        return 1
    print(f"check_time_limits: all {len(tests)} tests have a TIMEOUT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
