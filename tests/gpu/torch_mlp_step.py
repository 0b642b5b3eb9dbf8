"""PyTorch's training step for the MLP of examples/fashion_mnist_mlp.pbtxt
(784-256-128-10, ReLU, dropout 0.2, softmax cross-entropy, Adam), on the GPU:
the baseline our GPU executor's step time is reported beside.

  python3 torch_mlp_step.py [--steps 500]
"""
import argparse
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=500)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no GPU for PyTorch")
        return
    dev = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(0))
    for batch in (64, 128, 1024):
        model = torch.nn.Sequential(
            torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Dropout(0.2),
            torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
            torch.nn.Linear(128, 10)).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.rand(batch, 784, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        for _ in range(50):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) / args.steps * 1e3
        print(f"PyTorch MLP step, batch {batch}: {ms:.3f} ms")


if __name__ == "__main__":
    main()
