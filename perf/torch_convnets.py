"""The paper's Table 1 convnets in PyTorch, the same layers as
apps/lib/convnets.hpp (NCHW, float32, random data, one step = forward +
backward + SGD update), for actorflow-bench --only convnets.

usage: torch_convnets.py alexnet|overfeat|vgg_a|googlenet STEPS [BATCH] [THREADS] [cpu|cuda]
prints: step_ms=<median of the steps after the warm-up steps>

With cuda (actorflow-bench --only gpu): the model on the GPU with cuDNN's
autotuner on, the batch fed from host memory each step as actorflow's is,
three warm-up steps.
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv(cin, cout, k, stride=1, same=True):
    # TensorFlow's SAME for odd kernels at stride 1 is k // 2 on each side; for
    # AlexNet's 11x11/4 on 224 SAME pads 3 before and 4 after (asymmetric).
    pad = k // 2 if same and stride == 1 else 0
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad), nn.ReLU(inplace=True))


class SamePad(nn.Module):
    """TensorFlow's SAME padding for a k x k window at stride s on size n."""

    def __init__(self, n, k, s):
        super().__init__()
        out = (n + s - 1) // s
        total = max(0, (out - 1) * s + k - n)
        self.pad = (total // 2, total - total // 2, total // 2, total - total // 2)

    def forward(self, x):
        return F.pad(x, self.pad)


def dense(cin, cout, relu=True):
    return nn.Sequential(nn.Linear(cin, cout), nn.ReLU(inplace=True)) if relu else nn.Linear(cin, cout)


def alexnet():
    return nn.Sequential(
        SamePad(224, 11, 4), conv(3, 64, 11, 4), nn.MaxPool2d(3, 2),
        conv(64, 192, 5), nn.MaxPool2d(3, 2),
        conv(192, 384, 3), conv(384, 256, 3), conv(256, 256, 3), nn.MaxPool2d(3, 2),
        nn.Flatten(), dense(256 * 6 * 6, 4096), dense(4096, 4096), dense(4096, 1000, False))


def overfeat():
    return nn.Sequential(
        conv(3, 96, 11, 4, False), nn.MaxPool2d(2, 2),
        conv(96, 256, 5, 1, False), nn.MaxPool2d(2, 2),
        conv(256, 512, 3), conv(512, 1024, 3), conv(1024, 1024, 3), nn.MaxPool2d(2, 2),
        nn.Flatten(), dense(1024 * 6 * 6, 3072), dense(3072, 4096), dense(4096, 1000, False))


def vgg_a():
    layers, cin = [], 3
    for cout, convs in [(64, 1), (128, 1), (256, 2), (512, 2), (512, 2)]:
        for _ in range(convs):
            layers.append(conv(cin, cout, 3))
            cin = cout
        layers.append(nn.MaxPool2d(2, 2))
    return nn.Sequential(*layers, nn.Flatten(), dense(512 * 7 * 7, 4096), dense(4096, 4096),
                         dense(4096, 1000, False))


class Inception(nn.Module):
    def __init__(self, cin, one, r3, three, r5, five, proj):
        super().__init__()
        self.b1 = conv(cin, one, 1)
        self.b3 = nn.Sequential(conv(cin, r3, 1), conv(r3, three, 3))
        self.b5 = nn.Sequential(conv(cin, r5, 1), conv(r5, five, 5))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv(cin, proj, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


def googlenet():
    return nn.Sequential(
        SamePad(224, 7, 2), conv(3, 64, 7, 2), SamePad(112, 3, 2), nn.MaxPool2d(3, 2),
        conv(64, 64, 1), conv(64, 192, 3), SamePad(56, 3, 2), nn.MaxPool2d(3, 2),
        Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64),
        SamePad(28, 3, 2), nn.MaxPool2d(3, 2),
        Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
        Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
        Inception(528, 256, 160, 320, 32, 128, 128),
        SamePad(14, 3, 2), nn.MaxPool2d(3, 2),
        Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128),
        nn.AvgPool2d(7, 1), nn.Flatten(), dense(1024, 1000, False))


MODELS = {"alexnet": (alexnet, 224), "overfeat": (overfeat, 231), "vgg_a": (vgg_a, 224),
          "googlenet": (googlenet, 224)}


def main():
    name, steps = sys.argv[1], int(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
    device = torch.device(sys.argv[5] if len(sys.argv) > 5 else "cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("no CUDA device")
            sys.exit(1)
        torch.backends.cudnn.benchmark = True
    warmup = 3 if device.type == "cuda" else 1
    make, size = MODELS[name]
    torch.manual_seed(1)
    model = make().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.rand(batch, 3, size, size)
    labels = torch.randint(0, 1000, (batch,))
    times = []
    for step in range(steps + warmup):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(images.to(device)), labels.to(device))
        loss.backward()
        opt.step()
        loss.item()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    print(f"step_ms={1000 * statistics.median(times):.3f}")


if __name__ == "__main__":
    main()
