#!/usr/bin/env python3
"""psrt against PyTorch on the imported example models, in one run.

For each model (examples/onnx/<model>.onnx, made by make_models.py) it
trains the same network twice on Fashion-MNIST, with the same initial
weights (the .onnx file's), optimizer (Adam, cosine decay to 0 over the
run), batch, epochs and thread count:

  psrt:    deploy/local_train (the in-process trainer) on
           examples/fashion_mnist_onnx_<model>.pbtxt, --threads=T;
  PyTorch: the model class of make_models.py, torch.set_num_threads(T),
           the same schedule written out in Python.

and prints test accuracy and training examples/s side by side, with the
ratio psrt / PyTorch (examples/s of the training steps; PyTorch's time
excludes its data shuffling, psrt's includes its input pipeline).

--curve=N instead compares loss curves: N steps of plain SGD (--lr) from
the same weights on the same batches (the training files' order, no
shuffling), each step's loss from both, and the largest relative gap of
the curves smoothed over 10 steps. Dropout draws different masks in
each, so models with dropout (mlp, cnn, vit) differ by that noise.

  bazel build //deploy:local_train
  /opt/psrt/venv-torch/bin/python tests/bench/onnx_torch_bench.py --models=vit --epochs=5 --threads=2

Needs torch and onnx (a virtual environment, not the product); the psrt
side is the built binary.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "onnx"))
import make_models  # noqa: E402


def job_settings(job_path):
    text = open(job_path).read()
    def number(pattern, default):
        m = re.search(pattern, text)
        return type(default)(m.group(1)) if m else default
    return {"batch": number(r"batch_size:\s*(\d+)", 64), "lr": number(r"learning_rate:\s*([0-9.eE-]+)", 0.001),
            "epochs": number(r"\nepochs:\s*(\d+)", 1)}


def torch_run(name, settings, epochs, threads, data):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = load_model(name)
    x_train, y_train, x_test, y_test = data
    batch = settings["batch"]
    steps_per_epoch = math.ceil(len(x_train) / batch)
    total = steps_per_epoch * epochs
    opt = torch.optim.Adam(model.parameters(), lr=settings["lr"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(1.0, t / total))))
    rng = np.random.default_rng(1)
    train_seconds = 0.0
    model.train()
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        for s in range(steps_per_epoch):
            idx = order[s * batch:(s + 1) * batch]
            xb, yb = x_train[idx], y_train[idx]
            start = time.perf_counter()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            train_seconds += time.perf_counter() - start
    model.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, len(x_test), 1000):
            correct += (model(x_test[s:s + 1000]).argmax(1) == y_test[s:s + 1000]).sum().item()
    return correct / len(x_test), total * batch / train_seconds


def load_model(name):
    model = make_models.MODELS[name]()
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(ROOT, "examples", "onnx", name + ".onnx")).graph.initializer}
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[pname].copy()))
    return model


def torch_curve(name, batch, steps, lr, threads, data):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = load_model(name)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x_train, y_train = data[0], data[1]
    model.train()
    losses = []
    for s in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x_train[s * batch:(s + 1) * batch]), y_train[s * batch:(s + 1) * batch])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def psrt_curve(name, steps, lr, threads, binary):
    text = open(os.path.join(ROOT, "examples", f"fashion_mnist_onnx_{name}.pbtxt")).read()
    text = re.sub(r"\noptimizer \{.*?\n\}", f"\noptimizer {{ sgd {{ learning_rate: {lr} }} }}", text, flags=re.S)
    text = text.replace('path: "onnx/', f'path: "{ROOT}/examples/onnx/')
    with tempfile.TemporaryDirectory() as d:
        job, log = os.path.join(d, "job.pbtxt"), os.path.join(d, "loss.txt")
        open(job, "w").write(text)
        subprocess.run([binary, f"--job={job}", f"--steps={steps}", f"--threads={threads}", "--shuffle=false",
                        f"--loss_log={log}", f"--summary={os.path.join(d, 's.json')}", "--report_every=1000000"],
                       check=True, stdout=subprocess.DEVNULL)
        return [float(l) for l in open(log)]


def smooth(xs, k=10):
    return [sum(xs[max(0, i - k + 1):i + 1]) / len(xs[max(0, i - k + 1):i + 1]) for i in range(len(xs))]


def psrt_run(name, epochs, threads, binary):
    job = os.path.join(ROOT, "examples", f"fashion_mnist_onnx_{name}.pbtxt")
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "summary.json")
        subprocess.run([binary, f"--job={job}", f"--epochs={epochs}", f"--threads={threads}", f"--summary={summary}",
                        "--report_every=1000000"], check=True, stdout=subprocess.DEVNULL)
        s = json.load(open(summary))
    return s["metrics"]["accuracy"], s["examples_per_sec"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="vit")
    ap.add_argument("--epochs", type=int, default=0, help="0: each job's own")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--local_train", default=os.path.join(ROOT, "bazel-bin", "deploy", "local_train"))
    ap.add_argument("--curve", type=int, default=0, help="compare N steps' loss curves under plain SGD instead")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD's rate for --curve")
    args = ap.parse_args()
    def images(split, tokens):
        x = make_models.read_idx(os.path.join(args.data, f"{split}-images-idx3-ubyte.gz"))
        if tokens:  # each pixel's byte is its token id, as the job's id feature reads it
            return torch.from_numpy(x.astype(np.int64).reshape(-1, 784))
        return torch.from_numpy((x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28))
    def labels(split):
        return torch.from_numpy(make_models.read_idx(os.path.join(args.data, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64))
    datasets = {}
    def data_of(name):
        tokens = make_models.MODELS[name] is make_models.Tokens
        if tokens not in datasets:
            datasets[tokens] = (images("train", tokens), labels("train"), images("t10k", tokens), labels("t10k"))
        return datasets[tokens]
    if args.curve:
        print(f"{'model':10} {'steps':>5} {'first loss psrt/torch':>22} {'last 10 psrt/torch':>20} {'max gap (10-step mean)':>24}")
        for name in args.models.split(","):
            batch = job_settings(os.path.join(ROOT, "examples", f"fashion_mnist_onnx_{name}.pbtxt"))["batch"]
            p = psrt_curve(name, args.curve, args.lr, args.threads, args.local_train)
            t = torch_curve(name, batch, args.curve, args.lr, args.threads, data_of(name))
            sp, st = smooth(p), smooth(t)
            gap = max(abs(a - b) / b for a, b in zip(sp, st))
            print(f"{name:10} {len(p):5d} {p[0]:10.4f}/{t[0]:<11.4f} {sp[-1]:9.4f}/{st[-1]:<10.4f} {100 * gap:23.2f}%", flush=True)
        return
    rows = []
    for name in args.models.split(","):
        settings = job_settings(os.path.join(ROOT, "examples", f"fashion_mnist_onnx_{name}.pbtxt"))
        epochs = args.epochs or settings["epochs"]
        p_acc, p_eps = psrt_run(name, epochs, args.threads, args.local_train)
        t_acc, t_eps = torch_run(name, settings, epochs, args.threads, data_of(name))
        rows.append((name, epochs, settings["batch"], p_acc, t_acc, p_eps, t_eps))
        print(f"{name}: psrt {p_acc:.4f} at {p_eps:.0f} ex/s, PyTorch {t_acc:.4f} at {t_eps:.0f} ex/s", flush=True)
    print(f"\n{'model':10} {'epochs':>6} {'batch':>5} {'psrt acc':>9} {'torch acc':>9} {'psrt ex/s':>10} {'torch ex/s':>10} {'ratio':>6}")
    for name, epochs, batch, pa, ta, pe, te in rows:
        print(f"{name:10} {epochs:6d} {batch:5d} {pa:9.4f} {ta:9.4f} {pe:10.0f} {te:10.0f} {pe / te:6.2f}")


if __name__ == "__main__":
    main()
