"""Keras' own cross-entropies with label_smoothing, for label_smoothing_keras_test.

Reads cases from --input, one per line:
  softmax|sigmoid SMOOTHING ROWS COLS LOGIT... LABEL...
(softmax: integer class labels, one per row; sigmoid: a 0/1 label per logit)
and writes one line per case to --output: LOSS GRAD... where GRAD is
d loss / d logits from tf.GradientTape, row-major.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    out = []
    with open(args.input) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            kind, s, rows, cols = w[0], float(w[1]), int(w[2]), int(w[3])
            vals = [float(v) for v in w[4:]]
            logits = np.array(vals[: rows * cols], dtype=np.float32).reshape(rows, cols)
            labels = np.array(vals[rows * cols:], dtype=np.float32)
            if kind == "softmax":
                y = tf.one_hot(labels.astype(np.int64), cols)
                loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=s)
            else:
                y = tf.constant(labels.reshape(rows, cols))
                loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=s)
            x = tf.Variable(logits)
            with tf.GradientTape() as tape:
                loss = loss_fn(y, x)
            grad = tape.gradient(loss, x).numpy().ravel()
            out.append(" ".join(repr(float(v)) for v in [float(loss)] + list(grad)))
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
