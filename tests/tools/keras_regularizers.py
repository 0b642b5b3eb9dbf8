"""Keras' own regularization losses, for regularizers_keras_test.

Builds the test's model in Keras 3 (Conv2D 3x3 VALID relu -> Flatten ->
Dense softmax, with the regularizers given), sets the weights from
--input, and writes to --output the loss Keras trains (model.compute_loss,
which adds model.losses to the compiled loss) and its gradient of each
weight from tf.GradientTape, one line each: LOSS, then one line per
weight in the order kernel, bias of the conv, kernel, bias of the dense.

With --load=FILE.keras the model is instead the one keras.models.load_model
reads from psrt's export (its config, regularizers and weights), and the
weights of --input are not used.

--input holds one line per item: the regularizers as "l1 l2" pairs
(conv kernel, conv bias, dense kernel, dense bias), then the images
[N, 6, 6, 1], the labels [N], then the four weights (row-major).
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def regularizer(l1, l2):
    if l1 == 0 and l2 == 0:
        return None
    return keras.regularizers.L1L2(l1=l1, l2=l2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--units", type=int, required=True)
    ap.add_argument("--load", default="")
    args = ap.parse_args()
    with open(args.input) as f:
        lines = [[float(v) for v in line.split()] for line in f if line.strip()]
    regs = lines[0]
    n = args.batch
    images = np.array(lines[1], dtype=np.float32).reshape(n, 6, 6, 1)
    labels = np.array(lines[2], dtype=np.int64)
    weights = [np.array(w, dtype=np.float32) for w in lines[3:7]]
    model = keras.Sequential([
        keras.Input((6, 6, 1)),
        keras.layers.Conv2D(3, 3, padding="valid", activation="relu",
                            kernel_regularizer=regularizer(regs[0], regs[1]),
                            bias_regularizer=regularizer(regs[2], regs[3])),
        keras.layers.Flatten(),
        keras.layers.Dense(args.units,
                           kernel_regularizer=regularizer(regs[4], regs[5]),
                           bias_regularizer=regularizer(regs[6], regs[7])),
    ])
    if args.load:
        model = keras.models.load_model(args.load, compile=False)
    else:
        shapes = [w.shape for w in model.get_weights()]
        model.set_weights([w.reshape(s) for w, s in zip(weights, shapes)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with tf.GradientTape() as tape:
        y_pred = model(images, training=True)
        loss = model.compute_loss(x=images, y=labels, y_pred=y_pred, training=True)
    grads = tape.gradient(loss, model.trainable_weights)
    with open(args.output, "w") as f:
        f.write(repr(float(loss)) + "\n")
        for g in grads:
            f.write(" ".join(repr(float(v)) for v in g.numpy().ravel()) + "\n")


if __name__ == "__main__":
    main()
