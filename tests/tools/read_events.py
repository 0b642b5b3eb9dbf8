"""Prints every scalar TensorBoard's EventAccumulator loads from a log dir:
one line per value, "tag step value".

  read_events.py LOGDIR
"""
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
for tag in sorted(acc.Tags()["scalars"]):
    for ev in acc.Scalars(tag):
        print(tag, ev.step, repr(ev.value))
