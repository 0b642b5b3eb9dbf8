"""Writes TFRecord files with TensorFlow itself (/opt/psrt/venv-tf), for our
readers' tests.

  write_with_tensorflow.py DIR

writes into DIR (importing TensorFlow takes seconds, so once):
  records.tfrecord, records.gzip.tfrecord, records.zlib.tfrecord
      300 raw records, compression_type "", "GZIP", "ZLIB"
  pixels.gzip.tfrecord
      10 tf.train.Example with raw uint8 pixels, compression_type "GZIP"

The contents are fixed so the C++ tests can check every value.
"""
import hashlib
import sys

import numpy as np
import tensorflow as tf


def record(i):
    # Pseudo-random bytes (they do not compress), so a compressed file spans
    # several of the reader's 64 KiB input chunks.
    size = (i * 97) % 2000
    data = b""
    seed = b"%d" % i
    while len(data) < size:
        seed = hashlib.sha256(seed).digest()
        data += seed
    return b"record-%d-" % i + data[:size]


def records(path, compression):
    with tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type=compression)) as w:
        for i in range(300):
            w.write(record(i))


def pixels(path, compression):
    # As users write images: the array's raw bytes in a BytesList, not
    # tf.io.serialize_tensor.
    with tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type=compression)) as w:
        for i in range(10):
            image = ((np.arange(4 * 3, dtype=np.int64) * 20 + i) % 256).astype(np.uint8).reshape(4, 3)
            example = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
                "short": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()[: 11 - i % 2]])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
            }))
            w.write(example.SerializeToString())


if __name__ == "__main__":
    out = sys.argv[1]
    records(out + "/records.tfrecord", "")
    records(out + "/records.gzip.tfrecord", "GZIP")
    records(out + "/records.zlib.tfrecord", "ZLIB")
    pixels(out + "/pixels.gzip.tfrecord", "GZIP")
