"""TensorFlow's gradient clipping of the gradients psrt clipped, for
tests/clip_tf_test.cc (run under /opt/psrt/venv-tf).

  tf_clip.py IN_DIR OUT_DIR

IN_DIR/gradients.txt lists one step's gradients, one a line:
  dense NAME FILE D0,D1,...            float32 little-endian, row-major
  sparse NAME IDS_FILE ROWS_FILE ROWS DIM   int64 ids [n], float32 rows [n, DIM]
                                         of a [ROWS, DIM] table
IN_DIR/modes.txt lists the clippings, one a line: `MODE KIND VALUE` with
KIND one of clipnorm, clipvalue, global_clipnorm.

For each MODE, writes OUT_DIR/MODE/NAME.f32 (a "/" in NAME as "_"): the gradient as TensorFlow
clips it (for a sparse one: the values of the IndexedSlices), with
tf.clip_by_norm (each gradient), tf.clip_by_value(g, -v, v) (each
gradient) or tf.clip_by_global_norm (all together), a sparse gradient
passed as a tf.IndexedSlices.
"""
import os
import sys

import numpy as np
import tensorflow as tf


def read_gradients(in_dir):
    grads = []  # (name, tf value)
    with open(os.path.join(in_dir, "gradients.txt")) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "dense":
                _, name, path, shape = parts
                dims = [int(d) for d in shape.split(",")] if shape != "-" else []
                values = np.fromfile(os.path.join(in_dir, path), dtype="<f4").reshape(dims)
                grads.append((name, tf.constant(values)))
            elif parts[0] == "sparse":
                _, name, ids_path, rows_path, rows, dim = parts
                ids = np.fromfile(os.path.join(in_dir, ids_path), dtype="<i8")
                values = np.fromfile(os.path.join(in_dir, rows_path), dtype="<f4").reshape([len(ids), int(dim)])
                grads.append((name, tf.IndexedSlices(tf.constant(values), tf.constant(ids),
                                                     dense_shape=tf.constant([int(rows), int(dim)], tf.int64))))
            else:
                raise ValueError("bad line: " + line)
    return grads


def values_of(t):
    if isinstance(t, tf.IndexedSlices):
        return t.values.numpy()
    return t.numpy()


def main():
    in_dir, out_dir = sys.argv[1], sys.argv[2]
    grads = read_gradients(in_dir)
    with open(os.path.join(in_dir, "modes.txt")) as f:
        modes = [line.split() for line in f if line.strip()]
    for mode, kind, value in modes:
        v = float(value)
        tensors = [g for _, g in grads]
        if kind == "clipnorm":
            clipped = [tf.clip_by_norm(g, v) for g in tensors]
        elif kind == "clipvalue":
            clipped = [tf.clip_by_value(g, -v, v) for g in tensors]
        elif kind == "global_clipnorm":
            clipped, norm = tf.clip_by_global_norm(tensors, v)
            print("%s: global norm %.9g" % (mode, float(norm)))
        else:
            raise ValueError("bad clipping " + kind)
        os.makedirs(os.path.join(out_dir, mode), exist_ok=True)
        for (name, g), c in zip(grads, clipped):
            # A sparse gradient stays sparse: its values are clipped, its ids kept.
            assert isinstance(c, tf.IndexedSlices) == isinstance(g, tf.IndexedSlices), name
            values_of(c).astype("<f4").tofile(os.path.join(out_dir, mode, name.replace("/", "_") + ".f32"))
    print("tf_clip: TensorFlow %s, %d gradients, %d modes" % (tf.__version__, len(grads), len(modes)))


if __name__ == "__main__":
    main()
