#!/usr/bin/env python3
"""Exports the Fashion-MNIST example models from PyTorch to ONNX, with
PyTorch's loss and gradients on a fixed batch for psrt's tests.

For each model (an MLP, a small CNN, a narrower one with batch
normalisation, "ops" that uses every op of the
second import slice, a small ResNet, the same ResNet with batch
normalisation, a small vision transformer, a narrow MobileNetV2 and
"tokens", the pixels as token ids through nn.Embedding) it writes, beside
this script:
  <model>.onnx            torch.onnx.export (opset 18, dynamic batch, training
                          mode so that Dropout nodes are kept), the initial
                          weights inside;
  <model>.reference.pb    an onnx.GraphProto whose initializers are the
                          batch ("input", NCHW float, pixels / 255 -- for
                          "tokens" int64 [32, 784], the pixel bytes; "label",
                          int64), PyTorch's mean cross-entropy ("loss") and
                          the gradient of every parameter ("grad/<name>",
                          named as the .onnx file's initializers), from the
                          file's own initial weights in eval mode (no
                          dropout; a model with batch normalisation in
                          train mode: the batch's statistics).

Run with a Python that has torch, onnx and onnxscript:
  /opt/psrt/venv-torch/bin/python examples/onnx/make_models.py
The files are checked in: psrt's tests (common/graph:onnx_torch_test) read
them and need no PyTorch.
"""
import argparse
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from fashion_mnist import BATCH, read_idx

HERE = os.path.dirname(os.path.abspath(__file__))


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


class Ops(nn.Module):
    """Every op of the second import slice in one small net: strided,
    padded, dilated, grouped and depthwise convolutions, ReLU6 (Clip),
    average pooling, broadcasting Add/Sub/Mul/Div against parameters, and
    ReduceMean / ReduceSum over axes."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, stride=2, padding=1)                   # 14x14
        self.depthwise = nn.Conv2d(8, 16, 3, padding=1, groups=8)             # multiplier 2
        self.grouped = nn.Conv2d(16, 8, (3, 2), padding=(2, 1), dilation=2, groups=2, stride=(1, 2))
        self.pool = nn.AvgPool2d(3, stride=2, padding=1)                       # count_include_pad
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 8).reshape(1, 8, 1, 1))
        self.shift = nn.Parameter(torch.linspace(-0.2, 0.2, 8).reshape(8, 1, 1))
        self.div = nn.Parameter(torch.linspace(1.0, 2.0, 7))
        self.fc_pooled = nn.Linear(8, 10)
        self.fc_rows = nn.Linear(7, 10)

    def forward(self, x):
        x = nn.functional.relu6(self.stem(x))
        x = nn.functional.relu6(self.depthwise(x))
        x = self.grouped(x)                                                     # 14x7
        x = self.pool(x)                                                        # 7x4
        x = x * self.scale - self.shift
        pooled = x.mean(dim=(2, 3))                                             # [N, 8]
        rows = x.sum(dim=(1, 3), keepdim=True)                                  # [N, 1, 7, 1]
        rows = rows.flatten(1) / self.div                                       # [N, 7]
        return self.fc_pooled(pooled) + self.fc_rows(rows)


class Block(nn.Module):
    """A residual block: two 3x3 convolutions, the shortcut a strided 1x1
    projection where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class BnBlock(nn.Module):
    """Block with batch normalisation after each convolution (no conv
    biases), as torchvision's BasicBlock."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


def resnet_bn():
    # The ResNet above with batch normalisation (training-mode statistics).
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        BnBlock(16, 16, 1), BnBlock(16, 32, 2), BnBlock(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10))


def cnn_bn():
    # A narrow CNN with batch normalisation after each convolution, small
    # enough for the multi-process strategy tests (tests:imported_strategies_test).
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 7 * 7, 10))


def resnet():
    # A small ResNet for 28x28: conv stem, three residual blocks (two with a
    # strided projection shortcut), global average pool, linear.
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10))


class Vit(nn.Module):
    """A small vision transformer (ViT) over Fashion-MNIST: 7x7 patches as a
    strided convolution (16 tokens of 64), a class token, learned position
    embeddings, two pre-norm encoder layers of PyTorch's own
    nn.TransformerEncoderLayer (4 heads, GELU MLP of 128, dropout 0.1), a
    final LayerNorm and a linear head on the class token."""

    def __init__(self, dim=64, depth=2, heads=4, mlp=128):
        super().__init__()
        self.patch = nn.Conv2d(1, dim, 7, stride=7)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)                           # [N, 16, 64]
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: a 1x1 expansion (skipped at ratio 1), a 3x3
    depthwise convolution, each with batch normalisation and ReLU6, then a
    linear 1x1 projection with batch normalisation; the input is added back
    where stride and width are unchanged."""

    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), nn.ReLU6(),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.conv(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    """A narrow MobileNetV2 for Fashion-MNIST padded with zeros to 32x32:
    stem 3x3/2 to 16x16, then stages (expansion, width, repeats, stride)
    (1, 8, 1, 1), (6, 8, 2, 2), (6, 8, 2, 2), (6, 16, 2, 2) to 2x2 --
    torchvision's first four at width 0.25 (rounded up to 8 channels) with
    fewer repeats (its are 1, 2, 3, 4) -- a 1x1 convolution to 128 (its
    1280 x 0.25 would be 320), global average pool, linear. No dropout
    before the classifier (torchvision's 0.2): the reference runs in train
    mode for the batch statistics, where dropout would draw a mask."""

    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()]
        cin = 8
        for expand, cout, repeats, stride in [(1, 8, 1, 1), (6, 8, 2, 2), (6, 8, 2, 2), (6, 16, 2, 2)]:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers += [nn.Conv2d(cin, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(128, 10)

    def forward(self, x):
        x = nn.functional.pad(x, (2, 2, 2, 2))                                  # 28x28 -> 32x32
        x = self.features(x)
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Tokens(nn.Module):
    """Fashion-MNIST as a sequence of 784 tokens: each pixel's byte (0-255,
    as the IDX file holds it) is a token id. A token embedding (256 x 8) plus
    a position embedding (784 x 8, nn.Embedding looked up with the constant
    positions 0..783), ReLU, then the 784 x 8 features flattened into a
    hidden layer of 64 and a linear head. (A mean pool over the tokens
    would lose where each pixel is: the positions' mean is one constant
    vector.) The token lookup is a Gather of the run-time ids: psrt's
    embedding path (a table pulled by rows under the PS strategy)."""

    def __init__(self, vocab=256, length=784, dim=8, hidden=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(length, dim)
        self.register_buffer("positions", torch.arange(length), persistent=False)
        self.fc = nn.Linear(length * dim, hidden)
        self.head = nn.Linear(hidden, 10)

    def forward(self, tokens):
        x = torch.relu(self.tok(tokens) + self.pos(self.positions))            # [N, 784, 8]
        return self.head(torch.relu(self.fc(x.flatten(1))))


def takes_tokens(model):
    return isinstance(model, Tokens)


def example_input(model, n):
    """A batch of n as the model's graph input takes it: images NCHW float,
    or token ids [n, 784] int64."""
    if takes_tokens(model):
        return torch.zeros(n, 784, dtype=torch.int64)
    return torch.zeros(n, 1, 28, 28)


def has_batch_norm(model):
    return any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


def export(model, path):
    # In training mode, so that the Dropout layers come along (an eval-mode
    # export leaves them out): psrt applies them in training steps only.
    model.train()
    x = example_input(model, 2)
    if has_batch_norm(model):
        # The torch.export-based exporter of this PyTorch (2.15) writes no
        # BatchNormalization node for a training-mode BatchNorm2d (it is
        # gone from the graph); the TorchScript exporter writes it with
        # training_mode=1, the running statistics as initializers.
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["logits"],
                          opset_version=18, dynamo=False, do_constant_folding=False,
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING)
        return
    # optimize=False: the exporter's optimiser merges initializers that
    # hold equal values (every LayerNorm's all-ones weight becomes one
    # tensor, tying parameters PyTorch trains apart) and folds weight
    # transposes into new, unnamed initializers.
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["logits"],
                      opset_version=18, dynamo=True, external_data=False, optimize=False,
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
    # Eval mode turns dropout off; batch normalisation runs on the batch's
    # statistics (train mode), as psrt's does.
    model.train(has_batch_norm(model))
    if takes_tokens(model):
        x = torch.from_numpy(images.astype(np.int64)).reshape(-1, 784)  # each pixel's byte is its token
    else:
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


MODELS = {"mlp": mlp, "cnn": cnn, "cnn_bn": cnn_bn, "ops": Ops, "resnet": resnet, "resnet_bn": resnet_bn, "vit": Vit,
          "mobilenetv2": MobileNetV2, "tokens": Tokens}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default=",".join(MODELS), help="which to write (comma-separated)")
    args = ap.parse_args()
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))[:BATCH]
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))[:BATCH]
    for name in args.models.split(","):
        make = MODELS[name]
        torch.manual_seed(args.seed)
        path = os.path.join(args.out, name + ".onnx")
        export(make(), path)
        onnx.checker.check_model(onnx.load(path))
        reference(path, images, labels, os.path.join(args.out, name + ".reference.pb"))


if __name__ == "__main__":
    main()
