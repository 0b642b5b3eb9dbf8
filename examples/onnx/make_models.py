#!/usr/bin/env python3
"""Exports the Fashion-MNIST example models from PyTorch to ONNX, with
PyTorch's loss and gradients on a fixed batch for psrt's tests.

For each model (an MLP and a small CNN) it writes, beside this script:
  <model>.onnx            torch.onnx.export (opset 18, dynamic batch, training
                          mode so that Dropout nodes are kept), the initial
                          weights inside;
  <model>.reference.pb    an onnx.GraphProto whose initializers are the
                          batch ("input", NCHW float, pixels / 255; "label",
                          int64), PyTorch's mean cross-entropy ("loss") and
                          the gradient of every parameter ("grad/<name>",
                          named as the .onnx file's initializers), from the
                          file's own initial weights in eval mode (no
                          dropout).

Run with a Python that has torch, onnx and onnxscript:
  /tmp/torchvenv/bin/python examples/onnx/make_models.py
The files are checked in: psrt's tests (common/graph:onnx_torch_test) read
them and need no PyTorch.
"""
import argparse
import gzip
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 32


def mlp():
    # The native examples/fashion_mnist_mlp.pbtxt: 784-256-128-10, dropout 0.2.
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(256, 128), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(128, 10))


def cnn():
    # The native examples/fashion_mnist_cnn.pbtxt: TensorFlow's tutorial convnet.
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.3),
        nn.Linear(128, 10))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def export(model, path):
    # In training mode, so that the Dropout layers come along (an eval-mode
    # export leaves them out): psrt applies them in training steps only.
    model.train()
    x = torch.zeros(2, 1, 28, 28)
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["logits"],
                      opset_version=18, dynamo=True, external_data=False,
                      dynamic_shapes=({0: torch.export.Dim("batch")},),
                      training=torch.onnx.TrainingMode.TRAINING)


def reference(model_path, images, labels, out_path):
    """PyTorch's loss and gradients, from the weights the .onnx file holds."""
    m = onnx.load(model_path)
    weights = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    model = MODELS[os.path.basename(model_path)[:-len(".onnx")]]()
    state = {}
    for name, p in model.named_parameters():
        state[name] = p
    # The exporter names initializers after the parameters ("1.weight").
    missing = [n for n in state if n not in weights]
    if missing:
        raise SystemExit(f"{model_path}: no initializer for {missing}; initializers: {sorted(weights)}")
    with torch.no_grad():
        for name, p in state.items():
            p.copy_(torch.from_numpy(weights[name].copy()))
    model.eval()
    x = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(labels.astype(np.int64))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    tensors = [numpy_helper.from_array(x.numpy(), "input"), numpy_helper.from_array(y.numpy(), "label"),
               numpy_helper.from_array(np.array(loss.item(), dtype=np.float32), "loss")]
    for name, p in state.items():
        tensors.append(numpy_helper.from_array(p.grad.numpy(), "grad/" + name))
    g = onnx.helper.make_graph([], "reference", [], [], initializer=tensors)
    with open(out_path, "wb") as f:
        f.write(g.SerializeToString())
    print(f"{out_path}: loss {loss.item():.6f}, {len(state)} gradients")


MODELS = {"mlp": mlp, "cnn": cnn}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))[:BATCH]
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))[:BATCH]
    for name, make in MODELS.items():
        torch.manual_seed(args.seed)
        path = os.path.join(args.out, name + ".onnx")
        export(make(), path)
        onnx.checker.check_model(onnx.load(path))
        reference(path, images, labels, os.path.join(args.out, name + ".reference.pb"))


if __name__ == "__main__":
    main()
