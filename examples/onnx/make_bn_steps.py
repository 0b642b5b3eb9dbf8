#!/usr/bin/env python3
"""PyTorch's moving statistics of batch normalisation after a few training
steps, for psrt's test of them (common/graph:onnx_torch_test,
BatchNormMovingStatisticsMatchPyTorch).

From resnet_bn.onnx's own weights (make_models.py), PyTorch trains STEPS
plain SGD steps (learning rate LR, mean cross-entropy) in train mode on
fixed Fashion-MNIST batches -- BatchNorm2d normalising with each batch's
statistics and folding them into running_mean / running_var with its
momentum 0.1 (ONNX's 0.9) and the unbiased variance -- then evaluates in
eval mode (the running statistics) on a fixed test batch. It writes
resnet_bn.steps.pb beside this script, an onnx.GraphProto whose
initializers are:
  "input", "label"      the STEPS training batches end to end (NCHW float,
                        pixels / 255; int64), BATCH examples each;
  "eval_input", "eval_label"  the evaluation batch (the test set's first
                        EVAL examples);
  "lr"                  the learning rate;
  "train_loss"          [STEPS], each step's loss;
  "eval_loss"           the eval-mode loss after the steps;
  "running/<name>"      every running_mean / running_var after the steps,
                        named as the .onnx file's initializers;
  "weight/<name>"       every parameter after the steps.

Run with a Python that has torch and onnx (after make_models.py):
  /opt/psrt/venv-torch/bin/python examples/onnx/make_bn_steps.py
The file is checked in: the test reads it and needs no PyTorch.
"""
import argparse
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from fashion_mnist import BATCH, read_idx
from make_models import MODELS

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 4
LR = 0.1
EVAL = 64


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    m = onnx.load(os.path.join(args.out, "resnet_bn.onnx"))
    weights = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    model = MODELS["resnet_bn"]()
    state = model.state_dict()
    with torch.no_grad():
        for name, t in state.items():
            if name.endswith("num_batches_tracked"):
                continue
            if name not in weights:
                raise SystemExit(f"no initializer for {name}")
            t.copy_(torch.from_numpy(weights[name].copy()))
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))[:STEPS * BATCH]
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))[:STEPS * BATCH]
    x = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(labels.astype(np.int64))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model.train()
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[s * BATCH:(s + 1) * BATCH]), y[s * BATCH:(s + 1) * BATCH])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    eval_images = read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte.gz"))[:EVAL]
    eval_labels = read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz"))[:EVAL]
    ex = torch.from_numpy(eval_images.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    ey = torch.from_numpy(eval_labels.astype(np.int64))
    model.eval()
    with torch.no_grad():
        eval_loss = nn.functional.cross_entropy(model(ex), ey).item()
    tensors = [numpy_helper.from_array(x.numpy(), "input"), numpy_helper.from_array(y.numpy(), "label"),
               numpy_helper.from_array(ex.numpy(), "eval_input"), numpy_helper.from_array(ey.numpy(), "eval_label"),
               numpy_helper.from_array(np.array(LR, dtype=np.float32), "lr"),
               numpy_helper.from_array(np.array(losses, dtype=np.float32), "train_loss"),
               numpy_helper.from_array(np.array(eval_loss, dtype=np.float32), "eval_loss")]
    params = dict(model.named_parameters())
    for name, t in model.state_dict().items():
        if name.endswith("running_mean") or name.endswith("running_var"):
            tensors.append(numpy_helper.from_array(t.numpy(), "running/" + name))
        elif name in params:
            tensors.append(numpy_helper.from_array(t.detach().numpy(), "weight/" + name))
    g = onnx.helper.make_graph([], "bn_steps", [], [], initializer=tensors)
    out = os.path.join(args.out, "resnet_bn.steps.pb")
    with open(out, "wb") as f:
        f.write(g.SerializeToString())
    print(f"{out}: {STEPS} steps, losses {['%.6f' % l for l in losses]}, eval loss {eval_loss:.6f}")


if __name__ == "__main__":
    main()
