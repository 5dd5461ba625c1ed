#!/usr/bin/env python3
"""Reads psformer's TensorBoard event files with TensorBoard's own reader (the `tensorboard`
package), for tests/tensorboard_test.cc.

  check_events.py metrics RUN_DIR   every number of RUN_DIR/metrics.jsonl (but "steps") must be a scalar of
                                    RUN_DIR/tensorboard/ at the same step with the same value (as
                                    float32), and no tag may have a step twice; prints
                                    "matched N scalars of M lines, T tags, E text events"
  check_events.py dump DIR          every scalar and text event of the event files in DIR, file by
                                    file in name order, as "scalar TAG STEP VALUE" / "text TAG STEP TEXT"
"""
import collections
import json
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util


def tensorboard_tag(key):
    # The rule of TensorBoardTag in common/run_metrics.h.
    if key.startswith("valid_"):
        return "valid/" + key[len("valid_"):]
    if key in ("compute_s", "push_s", "wait_s", "pull_s", "device_s", "launch_cpu_s"):
        return "step_time/" + key
    return "train/" + key


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_metrics(run_dir):
    accumulator = event_accumulator.EventAccumulator(
        os.path.join(run_dir, "tensorboard"),
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0},
        purge_orphaned_data=False)
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {}
    failures = []
    for tag in tags["scalars"]:
        steps = collections.Counter(e.step for e in accumulator.Scalars(tag))
        for step, count in steps.items():
            if count > 1:
                failures.append("tag %s has step %d %d times" % (tag, step, count))
        scalars[tag] = {e.step: e.value for e in accumulator.Scalars(tag)}
    matched = lines = 0
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for text in f:
            line = json.loads(text)
            lines += 1
            step = line["step"]
            for key, value in line.items():
                # "steps" says how many steps a train line covers: not a scalar of its own.
                if key in ("step", "steps") or not isinstance(value, (int, float)):
                    continue
                tag = tensorboard_tag(key)
                got = scalars.get(tag, {}).get(step)
                if got is None:
                    failures.append("%s (%s) at step %d: not in the event files" % (key, tag, step))
                elif got != as_float32(value):
                    failures.append("%s (%s) at step %d: metrics.jsonl %r, event file %r" % (key, tag, step, value, got))
                else:
                    matched += 1
    texts = sum(len(accumulator.Tensors(tag)) for tag in tags["tensors"])
    for failure in failures:
        print("MISMATCH " + failure)
    print("matched %d scalars of %d lines, %d tags, %d text events" % (matched, lines, len(scalars), texts))
    return 1 if failures else 0


def dump(directory):
    names = sorted(n for n in os.listdir(directory) if "tfevents" in n)
    for name in names:
        # The loader TensorBoard's server uses: it turns simple_value scalars into the scalars
        # plugin's tensors, as the dashboard sees them.
        for event in event_file_loader.EventFileLoader(os.path.join(directory, name)).Load():
            for value in event.summary.value:
                plugin = value.metadata.plugin_data.plugin_name
                if value.HasField("simple_value"):
                    print("scalar %s %d %r" % (value.tag, event.step, value.simple_value))
                elif plugin == "scalars":
                    print("scalar %s %d %r" % (value.tag, event.step, tensor_util.make_ndarray(value.tensor).item()))
                elif plugin == "text":
                    print("text %s %d %s" % (value.tag, event.step, value.tensor.string_val[0].decode()))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("metrics", "dump"):
        sys.exit(__doc__)
    sys.exit(check_metrics(sys.argv[2]) if sys.argv[1] == "metrics" else dump(sys.argv[2]))
