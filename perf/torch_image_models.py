"""torchvision's ResNet-50 and Inception-v3, the references of apps/lib/image_models.hpp.

usage: torch_image_models.py layers resnet50|inception_v3 SIZE [CHANNELS CLASSES]
         prints one line per layer: name, NHWC output shape without the batch, parameters
       torch_image_models.py step resnet50|inception_v3 STEPS BATCH SIZE [THREADS]
         prints step_ms=<median of the steps after one warm-up step>: forward, backward and
         an SGD update on random data, in training mode (batch norm on the batch's
         statistics, Inception's auxiliary head in the loss with weight 0.4)
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torchvision


def make(name, channels=3, classes=1000, aux=True):
    if name == "resnet50":
        m = torchvision.models.resnet50(num_classes=classes)
        if channels != 3:
            m.conv1 = nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
        return m
    m = torchvision.models.inception_v3(num_classes=classes, aux_logits=aux, init_weights=True)
    if channels != 3:
        m.Conv2d_1a_3x3.conv = nn.Conv2d(channels, 32, 3, 2, bias=False)
    return m


def layers(name, size, channels, classes):
    m = make(name, channels, classes)
    m.train()
    rows = []
    if name == "resnet50":
        # The stem's conv1, bn1 and relu are one record: conv1.
        watched = {"conv1": [m.conv1, m.bn1], "maxpool": [m.maxpool]}
        for stage in range(1, 5):
            for i, block in enumerate(getattr(m, "layer%d" % stage)):
                watched["layer%d.%d" % (stage, i)] = [block]
        watched["avgpool"] = [m.avgpool]
        watched["fc"] = [m.fc]
    else:
        watched = {n: [c] for n, c in m.named_children() if n != "dropout"}
    outputs = {}
    for n, mods in watched.items():
        mods[0].register_forward_hook(
            lambda mod, inp, out, n=n: outputs.__setitem__(n, tuple(out.shape)))
    m(torch.randn(2, channels, size, size))
    for n, mods in watched.items():
        shape = outputs[n]
        nhwc = (shape[2], shape[3], shape[1]) if len(shape) == 4 else shape[1:]
        params = sum(p.numel() for mod in mods for p in mod.parameters())
        print(n, ",".join(str(d) for d in nhwc), params)


def step(name, steps, batch, size):
    m = make(name, aux=size >= 299)  # the auxiliary head needs 299 pixels
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.rand(batch, 3, size, size)
    y = torch.randint(0, 1000, (batch,))
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        out = m(x)
        if isinstance(out, tuple):
            loss = loss_fn(out[0], y) + 0.4 * loss_fn(out[1], y)
        else:
            loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        if i > 0:
            times.append(time.perf_counter() - t0)
    print("step_ms=%.3f" % (1000 * statistics.median(times)))


if __name__ == "__main__":
    mode, model = sys.argv[1], sys.argv[2]
    if mode == "layers":
        extra = [int(a) for a in sys.argv[4:6]] or [3, 1000]
        layers(model, int(sys.argv[3]), *extra)
    else:
        torch.set_num_threads(int(sys.argv[6]) if len(sys.argv) > 6 else 2)
        step(model, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
