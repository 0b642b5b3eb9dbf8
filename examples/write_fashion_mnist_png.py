"""Writes Fashion-MNIST (Debian's dataset-fashion-mnist IDX files) as users
usually have images: PNG-encoded by TensorFlow in tf.train.Example records,
sharded and GZIP-compressed, for examples/fashion_mnist_mlp_png.pbtxt.

  /opt/psrt/venv-tf/bin/python examples/write_fashion_mnist_png.py [DIR]

writes DIR (default /tmp/psrt-fashion-mnist-png)/train-0000N-of-00004.tfrecord.gz
(60000 examples, example i in shard i % 4) and test-00000-of-00001.tfrecord.gz
(10000), each with "image" (a 28x28x1 PNG) and "label" (int64).
"""
import gzip
import os
import sys

import numpy as np
import tensorflow as tf

SRC = "/usr/share/datasets/fashion-mnist/"


def idx(path, offset):
    with gzip.open(SRC + path) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def write(out, name, images, labels, shards):
    opts = tf.io.TFRecordOptions(compression_type="GZIP")
    writers = [tf.io.TFRecordWriter(os.path.join(out, "%s-%05d-of-%05d.tfrecord.gz" % (name, s, shards)), opts)
               for s in range(shards)]
    for i in range(len(labels)):
        png = tf.io.encode_png(images[i].reshape(28, 28, 1)).numpy()
        example = tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(labels[i])])),
        }))
        writers[i % shards].write(example.SerializeToString())
    for w in writers:
        w.close()


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/psrt-fashion-mnist-png"
    os.makedirs(out, exist_ok=True)
    write(out, "train", idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784),
          idx("train-labels-idx1-ubyte.gz", 8), 4)
    write(out, "test", idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784), idx("t10k-labels-idx1-ubyte.gz", 8), 1)
