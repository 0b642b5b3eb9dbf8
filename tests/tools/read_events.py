"""Prints every scalar TensorBoard's EventAccumulator loads from a log dir:
one line per value, "tag step value", or "tag step value wall_time" with
--wall_time (seconds since the epoch, as the writer stamped the event).

  read_events.py LOGDIR [--wall_time]
"""
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
wall_time = "--wall_time" in sys.argv[2:]
for tag in sorted(acc.Tags()["scalars"]):
    for ev in acc.Scalars(tag):
        if wall_time:
            print(tag, ev.step, repr(ev.value), repr(ev.wall_time))
        else:
            print(tag, ev.step, repr(ev.value))
