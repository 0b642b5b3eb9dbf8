#!/usr/bin/env python3
"""Exports a Fashion-MNIST CNN built in Keras 3 to ONNX with Keras' own
exporter, with TensorFlow's loss and gradients on a fixed batch for psrt's
tests (the Keras twin of make_models.py).

keras_cnn: a Functional model on the NHWC image [28, 28, 1]: Conv2D(16, 3,
same, ReLU), MaxPooling2D, Conv2D(16, 3, same, ReLU) added back to its input
(a residual Add), MaxPooling2D, Flatten, Dense(64, ReLU), Dense(10). It
writes, beside this script:
  keras_cnn.onnx            model.export(path, format="onnx"): Keras 3 on
                            the TensorFlow backend converts the model's
                            inference function with tf2onnx (opset 15 by
                            default); the initial weights inside, under
                            tf2onnx's names ("sequential_1/conv_1/convolution/
                            ReadVariableOp:0"), convolution kernels in
                            ONNX's OIHW layout (Keras holds HWIO);
  keras_cnn.reference.pb    an onnx.GraphProto as make_models.py writes:
                            the batch ("input", [32, 28, 28, 1] float,
                            pixels / 255; "label", int64), TensorFlow's mean
                            sparse categorical cross-entropy from logits
                            ("loss") and tf.GradientTape's gradient of every
                            variable ("grad/<initializer name>", in the
                            initializer's layout).

Each Keras variable is found among the initializers by its values (the
kernels transposed HWIO -> OIHW): tf2onnx names initializers after the ops
that read them, not after the variables ("sequential/conv/kernel").

The biases start from small random values rather than Keras' zeros:
tf2onnx's optimiser removes an addition of a constant zero, so a
zero-initialised bias is not in the file at all and could not be trained.

Run with the TensorFlow environment of deploy/setup.sh (it installs
tf2onnx there, which Keras' exporter imports):
  /opt/psrt/venv-tf/bin/python examples/onnx/make_keras_models.py
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from fashion_mnist import BATCH, read_idx  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def keras_cnn():
    # A new initializer per layer: one instance draws the same values for
    # every layer of a shape, and tf2onnx then merges the equal constants
    # into one initializer (tying two biases).
    def bias():
        return keras.initializers.RandomNormal(stddev=0.05)

    image = keras.Input((28, 28, 1), name="image")
    x = layers.Conv2D(16, 3, padding="same", activation="relu", bias_initializer=bias(), name="conv1")(image)
    x = layers.MaxPooling2D(name="pool1")(x)
    y = layers.Conv2D(16, 3, padding="same", activation="relu", bias_initializer=bias(), name="conv2")(x)
    x = layers.Add(name="residual")([x, y])
    x = layers.MaxPooling2D(name="pool2")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(64, activation="relu", bias_initializer=bias(), name="fc1")(x)
    logits = layers.Dense(10, bias_initializer=bias(), name="logits")(x)
    return keras.Model(image, logits, name="keras_cnn")


MODELS = {"keras_cnn": keras_cnn}


def onnx_layout(value):
    # Keras' Conv2D kernel [kh, kw, in, out] is ONNX's Conv weight [out, in, kh, kw].
    return np.transpose(value, (3, 2, 0, 1)) if value.ndim == 4 else value


def reference(model, model_path, images, labels, out_path):
    """TensorFlow's loss and gradients, keyed by the .onnx file's initializers."""
    m = onnx.load(model_path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    names = []
    for v in model.trainable_variables:
        want = onnx_layout(v.numpy())
        found = [n for n, a in inits.items() if a.shape == want.shape and np.array_equal(a, want)]
        if len(found) != 1:
            raise SystemExit(f"{model_path}: {len(found)} initializers hold {v.path} {v.shape}; "
                             f"initializers: {sorted((n, a.shape) for n, a in inits.items())}")
        names.append(found[0])
    if len(set(names)) != len(names) or len(names) != len(inits):
        raise SystemExit(f"{model_path}: the {len(names)} variables are not the {len(inits)} float initializers "
                         f"one for one ({names})")
    x = tf.constant(images.astype(np.float32).reshape(-1, 28, 28, 1) / 255.0)
    y = tf.constant(labels.astype(np.int64))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x, training=True), from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    tensors = [numpy_helper.from_array(x.numpy(), "input"), numpy_helper.from_array(y.numpy(), "label"),
               numpy_helper.from_array(np.array(float(loss), dtype=np.float32), "loss")]
    for name, g in zip(names, grads):
        tensors.append(numpy_helper.from_array(onnx_layout(g.numpy()), "grad/" + name))
    g = onnx.helper.make_graph([], "reference", [], [], initializer=tensors)
    with open(out_path, "wb") as f:
        f.write(g.SerializeToString())
    print(f"{out_path}: loss {float(loss):.6f}, {len(names)} gradients")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))[:BATCH]
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))[:BATCH]
    for name, make in MODELS.items():
        keras.utils.set_random_seed(args.seed)
        model = make()
        path = os.path.join(args.out, name + ".onnx")
        model(np.zeros((2, 28, 28, 1), np.float32))  # the exporter refuses a model never called
        model.export(path, format="onnx", verbose=False)
        onnx.checker.check_model(onnx.load(path))
        reference(model, path, images, labels, os.path.join(args.out, name + ".reference.pb"))


if __name__ == "__main__":
    main()
