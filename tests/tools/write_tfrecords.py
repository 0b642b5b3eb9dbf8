"""Writes TFRecord files with code we did not write, for our readers' tests.

  write_tfrecords.py framing OUT   # raw records through TensorBoard's RecordWriter
  write_tfrecords.py examples OUT  # tf.train.Example records through PyPI's tfrecord

The contents are fixed so the C++ tests can check every value.
"""
import sys


def framing(path):
    from tensorboard.summary.writer.record_writer import RecordWriter
    with open(path, "wb") as f:
        w = RecordWriter(f)
        for i in range(5):
            w.write(("record-%d-" % i).encode() + bytes(range(i * 7 % 256)))
        w.write(b"")
        w.flush()


def examples(path):
    from tfrecord import example_pb2
    from tfrecord.writer import TFRecordWriter
    w = TFRecordWriter(path)
    for i in range(10):
        # Through the package's own Example builder, as its users do.
        w.write({
            "image": ([float(i) + 0.5 * k for k in range(6)], "float"),
            "ids": ([i, i + 100, i + 200][: 1 + i % 3], "int"),
            "label": (i % 4, "int"),
        })
    w.close()
    assert example_pb2.Example  # the Example proto ships with the package


if __name__ == "__main__":
    {"framing": framing, "examples": examples}[sys.argv[1]](sys.argv[2])
